"""The build environment that makes builds deterministic.

Every build gets:
  SOURCE_DATE_EPOCH   the committer date of the pinned commit (setuptools, wheel, CMake and compilers read it);
  PYTHONHASHSEED=0    set and dict iteration order in build scripts does not vary;
  prefix maps         `-ffile-prefix-map=<src>=/usr/src/<name>` and `-fdebug-prefix-map=...` appended to
                      CFLAGS and CXXFLAGS (existing flags kept), so no build path lands in a binary through
                      __FILE__, debug info or assertions;
  ZERO_AR_DATE=1      static archives without member dates (the Darwin linker's switch; harmless elsewhere).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from toolchain.core.git import git
from toolchain.core.proc.runner import CommandFailed
from toolchain.errors import SourceError

PREFIX_ROOT = "/usr/src"
FLAG_VARIABLES = ("CFLAGS", "CXXFLAGS")


def commit_epoch(repo: Path, commit: str) -> int:
    """The committer date of `commit` in `repo`, in seconds since the epoch (for SOURCE_DATE_EPOCH)."""
    try:
        out = git(["show", "-s", "--format=%ct", f"{commit}^{{commit}}"], cwd=repo).stdout.strip()
    except CommandFailed as exc:
        raise SourceError(f"cannot read the committer date of {commit} in {repo}: {exc.tail.strip()}",
                          hint="check that the pinned commit exists in the checkout") from None
    if not out.isdigit():
        raise SourceError(f"git printed {out!r} as the committer date of {commit} in {repo}")
    return int(out)


def prefix_map_flags(src_dir: Path | str, name: str) -> list[str]:
    """Compiler flags that rewrite `src_dir` to /usr/src/<name> in everything the compiler emits."""
    src = os.path.abspath(os.fspath(src_dir))
    target = f"{PREFIX_ROOT}/{name}"
    return [f"-ffile-prefix-map={src}={target}", f"-fdebug-prefix-map={src}={target}"]


def deterministic_env(src_dir: Path | str, name: str, commit_epoch: int,
                      base_env: Mapping[str, str | None] | None = None) -> dict[str, str]:
    """The variables to merge into the build env of component `name` built from `src_dir` (the path as the
    compiler sees it: inside the container for container builds).

    With `base_env` (the environment the build would otherwise get) the returned CFLAGS and CXXFLAGS are its
    values with the prefix maps appended (once: applying this again adds nothing); without it they hold
    only the prefix maps, for the caller to append.
    """
    base = base_env or {}
    flags = prefix_map_flags(src_dir, name)
    env = {"SOURCE_DATE_EPOCH": str(int(commit_epoch)), "PYTHONHASHSEED": "0", "ZERO_AR_DATE": "1"}
    for var in FLAG_VARIABLES:
        existing = (base.get(var) or "").split()
        env[var] = " ".join(existing + [f for f in flags if f not in existing])
    return env
