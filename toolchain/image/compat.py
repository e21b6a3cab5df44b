"""Whether a base's interpreter can take the lock's wheels: each wheel's tags against the tags that
interpreter supports (its Python, ABI, platform and glibc), and the lock's [target] Python against the base's.
Checked before anything is written; a refusal names both sides (exit 2). A pass is remembered by the wheels'
names and the interpreter (a pure function of them): a warm `toolchain image` imports no `packaging.tags`
(platform, logging: a tenth of its start)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from toolchain.errors import UsageError
from toolchain.image.base import Interpreter

if TYPE_CHECKING:
    from packaging.tags import Tag

LEGACY = {(2, 17): "manylinux2014", (2, 12): "manylinux2010", (2, 5): "manylinux1"}


def platforms(interp: Interpreter) -> list[str]:
    """The platform tags the interpreter accepts, most specific first: manylinux_2_Y for every glibc up to
    its own (and the legacy aliases), then its own platform (linux_x86_64)."""
    arch = interp.platform.split("_", 1)[1] if interp.platform.startswith("linux_") else ""
    out: list[str] = []
    if arch and interp.glibc:
        major, minor = (int(x) for x in interp.glibc.split(".")[:2])
        for m in range(minor, -1, -1):
            out.append(f"manylinux_{major}_{m}_{arch}")
            if (major, m) in LEGACY:
                out.append(f"{LEGACY[major, m]}_{arch}")
    return [*out, interp.platform]


def supported(interp: Interpreter) -> set[Tag]:
    """Every tag a wheel may carry to install into the interpreter (CPython's, then the generic ones)."""
    from packaging.tags import compatible_tags, cpython_tags

    version = tuple(int(x) for x in interp.python_version.split(".")[:2])
    plats = platforms(interp)
    abi = interp.python_tag if interp.python_tag.startswith("cp") else "none"
    tags = set(cpython_tags(version, [abi], plats)) if interp.python_tag.startswith("cp") else set()
    return tags | set(compatible_tags(version, interp.python_tag, plats))


def check_wheels(wheels: Sequence[Path], interp: Interpreter, lock_tag: str, lock_platform: str, base: str, *,
                 memo_dir: Path | None = None) -> None:
    """UsageError naming each wheel (or the lock's [target]) the base's interpreter cannot take; a pass is
    remembered under `memo_dir` (core/probe_memo.py)."""
    from toolchain.core.probe_memo import remembered

    def check() -> tuple[bool, list[str]]:
        _check(wheels, interp, lock_tag, lock_platform, base)
        return True, []

    identity = {"wheels": [w.name for w in wheels], "lock-tag": lock_tag, "base": base.rsplit("@", 1)[-1],
                "interpreter": [interp.python_version, interp.python_tag, interp.soabi, interp.platform, interp.glibc]}
    remembered(memo_dir, "image-compat", identity, check)


def _check(wheels: Sequence[Path], interp: Interpreter, lock_tag: str, lock_platform: str, base: str) -> None:
    from packaging.utils import parse_wheel_filename

    theirs = (f"the base {base} has Python {interp.python_version} ({interp.python_tag}, {interp.soabi or 'no SOABI'}), "
              f"platform {interp.platform}, glibc {interp.glibc or 'none'}")
    problems = []
    if lock_tag and lock_tag != interp.python_tag:
        problems.append(f"the lock's [target] was built with {lock_tag} ({lock_platform}), {theirs}")
    ok = supported(interp)
    for wheel in wheels:
        tags = parse_wheel_filename(wheel.name)[3]
        if not tags & ok:
            problems.append(f"{wheel.name} is tagged {', '.join(sorted(str(t) for t in tags))}: {theirs}")
    if problems:
        raise UsageError("the base image's interpreter cannot take the lock's wheels:\n" +
                         "\n".join(f"  - {p}" for p in problems),
                         hint="build the lock in (or over) that image (`[target] image`/`base`), or pass --base "
                              "an image with the lock's Python")
