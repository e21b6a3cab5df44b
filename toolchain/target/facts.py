"""What a build ran on: the target (interpreter, platform, torch, image) and the toolchain (oneAPI), as
probed, and how the probe's answer is read (the probe is toolchain/scripts/interpreter.py, run as a file in
the target). The plan carries them; the lock records them."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from toolchain.core.checks import STR, STRS
from toolchain.core.places import interpreter_name, portable_path
from toolchain.core.record import field, fields, record
from toolchain.core.serial import meta


@record
class ToolchainInfo:
    """The oneAPI environment a stack was built with (all empty for a recipe without a toolchain). Each field
    declares its key in a lock's [toolchain] (kebab-case) and the value it must hold there (`check`)."""
    setvars: str = field(default="", metadata=meta(check=STR, portable=lambda v, _: portable_path(v)))
    setvars_args: tuple[str, ...] = field(default=(), metadata=meta(check=STRS))
    oneapi_version: str = field(default="", metadata=meta(check=STR))
    cmplr_root: str = field(default="", metadata=meta(check=STR, portable=lambda v, _: portable_path(v)))
    env_diff_sha256: str = field(default="", metadata=meta(check=STR))


@record(kw_only=True)
class TargetInfo:
    """Where the wheels were built, as probed inside the target (host or container); declared as a lock's
    [target] as ToolchainInfo is."""
    runtime: str = field(default="host", metadata=meta(check=STR))
    # a host's interpreter by its command name in the lock (its path on this machine: the build record); a
    # container's is a fact of its image, kept as it is
    python: str = field(default="python3", metadata=meta(
        check=STR, portable=lambda _, t: t.python_by_name()))
    python_version: str = field(default="", metadata=meta(check=STR))
    python_tag: str = field(default="", metadata=meta(check=STR))  # e.g. cp311
    platform: str = field(default="", metadata=meta(check=STR))  # e.g. linux_x86_64
    pip_version: str = field(default="", metadata=meta(check=STR))
    torch_version: str = field(default="", metadata=meta(check=STR))
    torch_xpu: str = field(default="", metadata=meta(check=STR))
    image: str = field(default="", metadata=meta(check=STR))
    image_digest: str = field(default="", metadata=meta(check=STR))
    container: str = field(default="", metadata=meta(check=STR, record=True))  # (a fresh one's name: this run's)

    def python_by_name(self) -> str:
        """The interpreter as a lock names it: a host's by its command name, a container's as its image has it."""
        return self.python if self.runtime not in ("", "host") else interpreter_name(self.python)

    def fingerprint(self) -> dict[str, str]:
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "container"}  # (all str)


# The environment variables that shape an interpreter's sys.path (and so what it finds installed): part of the
# identity of a remembered probe, beside the paths it reports having read (`probe_inputs`).
SYS_PATH_VARS = ("PYTHONPATH", "PYTHONHOME", "PYTHONNOUSERSITE", "PYTHONUSERBASE", "PYTHONSAFEPATH",
                 "PYTHONPLATLIBDIR", "PYTHONEXECUTABLE", "VIRTUAL_ENV", "HOME")


def sys_path_env(env: Mapping[str, str | None]) -> list[list[str]]:
    """The values of SYS_PATH_VARS in `env` (set ones only), for a remembered probe's identity. PYTHONPATH's
    entries as the interpreter resolves them, against the current folder (a relative `src` is another folder
    in another working folder; an empty entry is the current folder)."""
    import os

    found = []
    for k in sorted(set(SYS_PATH_VARS)):
        v = env.get(k)
        if v is not None:
            if k == "PYTHONPATH":
                v = os.pathsep.join(os.path.abspath(e or os.curdir) for e in v.split(os.pathsep))
            found.append([k, v])
    return found


def _answer(probe_stdout: str) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(probe_stdout.strip().splitlines()[-1])
    return found


def target_info(kind: str, python: str, probe_stdout: str, **extra: str) -> TargetInfo:
    """The probe's answer (toolchain/scripts/interpreter.py's last line, JSON) as a `TargetInfo`."""
    data = _answer(probe_stdout)
    for reported in ("executable", "inputs", "stats", "dists", "watch"):
        data.pop(reported, None)
    return TargetInfo(runtime=kind, python=python, **data, **extra)


StatKey = list[int] | None  # core/probe_memo.stat_key's


def probe_inputs(probe_stdout: str) -> dict[str, StatKey]:
    """Every path the probe read its answer from (its `inputs`: what it opened and listed, sys.path, .pth and
    metadata files), each with the stat the probe took before reading it (`stats`; a probe that reports none:
    the stat now)."""
    from toolchain.core.probe_memo import stat_key

    answer = _answer(probe_stdout)
    stats = answer.get("stats")
    stats = stats if isinstance(stats, dict) else {}
    found: dict[str, StatKey] = {}
    for p in answer.get("inputs", []):
        given = stats.get(p, False)
        ok = given is None or (isinstance(given, list) and all(isinstance(n, int) for n in given))
        found[str(p)] = given if ok else stat_key(str(p))
    return found


def probe_dists(probe_stdout: str) -> dict[str, str | None]:
    """The versions of the distributions the probe was asked for (None for one not installed)."""
    return {str(k): None if v is None else str(v) for k, v in _answer(probe_stdout).get("dists", {}).items()}
