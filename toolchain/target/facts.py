"""What a build ran on: the target (interpreter, platform, torch, image) and the toolchain (oneAPI), as
probed, and how the probe's answer is read (the probe is toolchain/scripts/interpreter.py, run as a file in
the target). The plan carries them; the lock records them."""

from __future__ import annotations

import json
from dataclasses import asdict

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


def target_info(kind: str, python: str, probe_stdout: str, **extra: str) -> TargetInfo:
    """The probe's answer (toolchain/scripts/interpreter.py's last line, JSON) as a `TargetInfo`."""
    data = json.loads(probe_stdout.strip().splitlines()[-1])
    data.pop("executable", None)
    data.pop("watch", None)
    return TargetInfo(runtime=kind, python=python, **data, **extra)


def watch_dirs(probe_stdout: str) -> list[str]:
    """The directories whose change would change the probe's answer (its `watch`)."""
    return list(json.loads(probe_stdout.strip().splitlines()[-1]).get("watch", []))
