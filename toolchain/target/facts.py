"""What a build ran on: the target (interpreter, platform, torch, image) and the toolchain (oneAPI), as
probed, and how the probe's answer is read (the probe is toolchain/scripts/interpreter.py, run as a file in
the target). The plan carries them; the lock records them."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

from toolchain.core.record import record


@record
class ToolchainInfo:
    """The oneAPI environment a stack was built with (all empty for a recipe without a toolchain)."""
    setvars: str = ""
    setvars_args: tuple[str, ...] = ()
    oneapi_version: str = ""
    cmplr_root: str = ""
    env_diff_sha256: str = ""


@record
class TargetInfo:
    """Where the wheels were built, as probed inside the target (host or container)."""
    runtime: str = "host"
    python: str = "python3"
    python_version: str = ""
    python_tag: str = ""  # e.g. cp311
    platform: str = ""  # e.g. linux_x86_64
    pip_version: str = ""
    torch_version: str = ""
    torch_xpu: str = ""
    image: str = ""
    image_digest: str = ""
    container: str = ""

    def fingerprint(self) -> dict[str, str]:
        return {k: v for k, v in asdict(self).items() if k != "container"}


# The environment variables that shape an interpreter's sys.path (and so what it finds installed): part of the
# identity of a remembered probe, beside the paths it reports having read (`probe_inputs`).
SYS_PATH_VARS = ("PYTHONPATH", "PYTHONHOME", "PYTHONNOUSERSITE", "PYTHONUSERBASE", "PYTHONSAFEPATH",
                 "PYTHONPLATLIBDIR", "PYTHONEXECUTABLE", "VIRTUAL_ENV", "HOME")


def sys_path_env(env: Mapping[str, str | None]) -> list[list[str]]:
    """The values of SYS_PATH_VARS in `env` (set ones only), for a remembered probe's identity."""
    return [[k, v] for k in sorted(set(SYS_PATH_VARS)) if (v := env.get(k)) is not None]


def _answer(probe_stdout: str) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(probe_stdout.strip().splitlines()[-1])
    return found


def target_info(kind: str, python: str, probe_stdout: str, **extra: str) -> TargetInfo:
    """The probe's answer (toolchain/scripts/interpreter.py's last line, JSON) as a `TargetInfo`."""
    data = _answer(probe_stdout)
    for reported in ("executable", "inputs", "dists", "watch"):
        data.pop(reported, None)
    return TargetInfo(runtime=kind, python=python, **data, **extra)


def probe_inputs(probe_stdout: str) -> list[str]:
    """Every path the probe read its answer from (its `inputs`: sys.path, .pth and metadata files)."""
    return [str(p) for p in _answer(probe_stdout).get("inputs", [])]


def probe_dists(probe_stdout: str) -> dict[str, str | None]:
    """The versions of the distributions the probe was asked for (None for one not installed)."""
    return {str(k): None if v is None else str(v) for k, v in _answer(probe_stdout).get("dists", {}).items()}
