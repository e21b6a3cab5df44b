"""The toolchain environment: source oneAPI `setvars.sh` under bash inside the target and keep the difference.

`bash -c` is used only around `source` (toolchain/scripts/setvars.bash, whose text is the `-c` argument), with
the script path and its arguments passed as positional arguments, never formatted into the script text. That
script wraps `source`, `.` and `command .` so every file sourced while setvars runs is reported
(`ToolchainEnv.sourced`); on the host, where strace is present and may trace, the shell runs under it and every
path it and its children read, looked up or executed is reported too (`ToolchainEnv.read`, target/shelltrace.py:
`$(<file)`, `cat file`, a program on PATH): the inputs a remembered capture re-checks.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from toolchain.core.fs import open_log, sha256_bytes
from toolchain.core.proc.runner import display
from toolchain.core.record import record
from toolchain.core.redact import is_secret, redact_text
from toolchain.core.regex import Regex
from toolchain.errors import BuildError, RecipeError
from toolchain.recipe.load import Recipe
from toolchain.target.facts import ToolchainInfo

if TYPE_CHECKING:
    from toolchain.core.proc.runner import Completed
    from toolchain.target.base import BuildRuntime, Place

MARK = "\0__TOOLCHAIN_SETVARS__\0"
IGNORED = frozenset({"_", "OLDPWD", "SHLVL", "PWD"})  # what a shell changes between two runs of one command
VERSION_RE = Regex(r"Compiler\s+(\d{4}\.\d+(?:\.\d+)*)")


@record
class ToolchainEnv:
    """The sourced oneAPI environment: its facts and the variables setvars changed."""

    info: ToolchainInfo
    diff: tuple[tuple[str, str | None], ...]  # variables set (or, None, unset) by setvars
    banner: str = ""
    sourced: tuple[str, ...] = ()  # every file setvars sourced (absolute, as the target sees it), in order
    read: tuple[str, ...] = ()  # every path the shell and its children read, found or absent (traced; else ())

    def as_dict(self) -> dict[str, str | None]:
        return dict(self.diff)


NO_TOOLCHAIN = ToolchainEnv(ToolchainInfo(), ())


def _parse_env(blob: str) -> dict[str, str]:
    out = {}
    for item in blob.split("\0"):
        if "=" in item:
            k, v = item.split("=", 1)
            out[k] = v
    return out


def capture(recipe: Recipe, runtime: BuildRuntime, log: Path | None = None) -> ToolchainEnv:
    """Source the recipe's setvars in the target and capture the oneAPI environment and compiler banner it gives."""
    spec = recipe.toolchain
    if not spec.enabled:
        return NO_TOOLCHAIN
    setvars = runtime.toolchain_path(spec.setvars, spec.base_dir)  # relative: to the recipe that set it
    exists = runtime.run(["test", "-f", setvars], check=False, capture=True)
    if exists.returncode != 0:
        raise RecipeError(
            f"{recipe.path.name}: toolchain.setvars: {setvars} does not exist in the {runtime.describe()}",
            hint="install the oneAPI Base Toolkit there, or set [toolchain] setvars to your setvars.sh "
                 "(or <version>/oneapi-vars.sh); use setvars = \"\" for a recipe without compiled kernels")
    from toolchain import scripts

    argv = ["bash", "-c", scripts.path("setvars.bash").read_text(), "toolchain-setvars", setvars, *spec.setvars_args]
    r, read = _run_traced(runtime, argv)  # logged below, once the secrets setvars sets are known
    parts = r.stdout.split(MARK)
    known = {**os.environ, **runtime.base_env(), **(_parse_env(parts[2]) if len(parts) == 3 else {})}
    output = redact_text(r.stderr, known)  # the script's own output (its stdout goes to stderr)
    if log is not None:
        with open_log(log) as f:
            shown = [*argv[:2], "<toolchain/scripts/setvars.bash>", *argv[3:]]
            f.write(f"$ {display(shown)}\n{output}# exit {r.returncode}\n")
    if r.returncode != 0 or len(parts) != 3:
        raise BuildError(f"sourcing {setvars} {' '.join(spec.setvars_args)} failed (exit {r.returncode}) "
                         f"in the {runtime.describe()}:\n{output[-2000:]}",
                         hint="run it by hand under bash to see why; check [toolchain] setvars-args")
    before, after = _parse_env(parts[0]), _parse_env(parts[2])
    diff: dict[str, str | None] = {k: v for k, v in after.items() if before.get(k) != v and k not in IGNORED}
    diff.update({k: None for k in before if k not in after and k not in IGNORED})
    banner, version = compiler_version(runtime, diff)
    cmplr_root = diff.get("CMPLR_ROOT") or before.get("CMPLR_ROOT") or ""
    if not version and not cmplr_root:
        raise BuildError(f"{setvars} ran but gave no compiler: CMPLR_ROOT is unset and `icpx --version` fails",
                         hint="the kernels need icpx (oneAPI DPC++/C++ compiler); install it or fix setvars")
    fingerprint = sha256_bytes("\0".join(f"{k}={'<secret>' if is_secret(k) else v}"
                                         for k, v in sorted(diff.items(), key=lambda kv: kv[0])).encode())
    info = ToolchainInfo(setvars=setvars, setvars_args=spec.setvars_args, oneapi_version=version,
                         cmplr_root=cmplr_root or "", env_diff_sha256=fingerprint)
    sourced = tuple(dict.fromkeys(p for p in parts[1].split("\0") if p))
    return ToolchainEnv(info, tuple(sorted(diff.items())), banner, sourced, read)


def _run_traced(runtime: BuildRuntime, argv: list[str]) -> tuple[Completed, tuple[str, ...]]:
    """`argv` run in the target, and the paths it read as strace saw them (target/shelltrace.py) when the
    target is this host and strace may trace; otherwise (or when the traced run fails: tracing not permitted,
    or setvars failing, which the plain run then reports) run plainly, with () read."""
    from toolchain.target import shelltrace

    strace = shelltrace.tracer() if runtime.kind == "host" else None
    if strace is not None:
        import tempfile

        with tempfile.TemporaryDirectory(prefix="toolchain-setvars-") as tmp:
            trace = Path(tmp) / "trace"
            r = runtime.run(shelltrace.traced_argv(strace, trace, argv), capture=True, check=False)
            if r.returncode == 0 and r.stdout.count(MARK) == 2 and trace.is_file():
                text = trace.read_text(encoding="utf-8", errors="surrogateescape")
                return r, tuple(p for p in shelltrace.paths_read(text, os.getcwd()) if not p.startswith(tmp))
    return runtime.run(argv, capture=True, check=False), ()


def compiler_version(runtime: Place, diff: Mapping[str, str | None]) -> tuple[str, str]:
    """(first banner line, version) from `icpx --version` in the sourced environment (else CMPLR_ROOT's)."""
    candidates = [["icpx", "--version"]]
    if diff.get("CMPLR_ROOT"):
        candidates.append([f"{diff['CMPLR_ROOT']}/bin/icpx", "--version"])
    for argv in candidates:
        r = runtime.run(argv, env=diff, capture=True, check=False)
        if r.returncode == 0:
            m = VERSION_RE.search(r.stdout)
            return (r.stdout.splitlines()[0] if r.stdout else ""), (m.group(1) if m else "")
    return "", ""
