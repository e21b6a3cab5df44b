"""Pre-flight for `--no-build-isolation`: the build requirements a source tree declares must already be
installed in the target interpreter, since pip will not install them. Checked inside the target
(toolchain/scripts/build_requires.py).

The check starts an interpreter in the target, so it is skipped where its answer is known: a tree that
declares no build requirements (read here, from the prepared tree), or requirements this process has
already found installed in the same target interpreter (a bisect checks once, not once per step)."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from toolchain.core import toml as tomlio
from toolchain.errors import BuildError

if TYPE_CHECKING:
    from toolchain.target.parts import Workspace

_FOUND: set[str] = set()  # (target identity, interpreter, requirements) found installed in this process
_LOCK = threading.Lock()

def declared_requires(tree: Path) -> list[str] | None:
    """`build-system.requires` of `tree/pyproject.toml` ([] without one); None when it cannot be read here
    (the check in the target then reads it)."""
    path = Path(tree) / "pyproject.toml"
    if not path.exists():
        return []
    try:
        reqs = tomlio.load_file(path).get("build-system", {}).get("requires", [])
    except (OSError, UnicodeDecodeError, tomlio.TOMLDecodeError, AttributeError):
        return None
    return [str(r) for r in reqs] if isinstance(reqs, list) else None


def check_build_requires(ws: Workspace, python: str, src: str, what: str, log: Path | None, *, tree: Path | None = None,
                         identity: Mapping[str, object] | None = None) -> None:
    """`src`: the source directory inside the target; `tree`: the same directory here (None: not readable
    here); `identity`: the target interpreter's (`Runtime.identity()`; None: check every time)."""
    reqs = declared_requires(tree) if tree is not None else None
    if reqs == []:
        return
    key = json.dumps([identity, python, sorted(reqs)], sort_keys=True, default=str) \
        if identity is not None and reqs is not None else None
    if key is not None and key in _FOUND:
        return
    r = ws.run([python, ws.script("build_requires.py"), src], env={}, cwd=src, log=log, capture=True)
    missing = [line for line in r.stdout.splitlines() if line.strip()]
    if not missing and key is not None:
        with _LOCK:
            _FOUND.add(key)
    raise_missing(missing, what, python)


def check_recorded_requires(reqs: list[str], versions: Mapping[str, str | None], python: str, what: str) -> None:
    """The check `check_build_requires` makes, for a cached wheel's recorded build requirements, with the
    versions a remembered probe found (`plan.installed_versions`): a warm build answers as a cold one would."""
    from toolchain.scripts.build_requires import missing

    raise_missing(missing(reqs, versions.get), what, python)


def raise_missing(missing: list[str], what: str, python: str) -> None:
    """BuildError naming the missing build requirements and the pip command that installs them (none: nothing)."""
    if missing:
        import shlex  # (only on the way to an error)

        wants = missing  # for want of wheel: a setuptools that needs none (see CHECK)
        if any(re.match(r"\s*wheel\b", m, re.I) for m in missing):
            wants = [m for m in missing if not re.match(r"\s*(wheel|setuptools)\b", m, re.I)] + ["setuptools>=70.1"]
        raise BuildError(f"{what}: build requirements missing in the target interpreter {python}: "
                         + ", ".join(missing),
                         hint="builds use --no-build-isolation, so install them there first: "
                              + shlex.join([python, "-m", "pip", "install", *wants])
                              + ("  (setuptools 70.1 or later builds wheels without the wheel package)"
                                 if wants != missing else ""))
