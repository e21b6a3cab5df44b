"""What a build ran on: the target (interpreter, platform, torch, image) and the toolchain (oneAPI), as
probed, and how the probe's answer is read (the probe is toolchain/scripts/interpreter.py, run as a file in
the target). The plan carries them; the lock records them."""

from __future__ import annotations

import json
from dataclasses import asdict, field

from toolchain.core.checks import STR, STRS
from toolchain.core.record import record
from toolchain.core.serial import meta


@record
class ToolchainInfo:
    """The oneAPI environment a stack was built with (all empty for a recipe without a toolchain). Each field
    declares its key in a lock's [toolchain] (kebab-case) and the value it must hold there (`check`)."""
    setvars: str = field(default="", metadata=meta(check=STR))
    setvars_args: tuple[str, ...] = field(default=(), metadata=meta(check=STRS))
    oneapi_version: str = field(default="", metadata=meta(check=STR))
    cmplr_root: str = field(default="", metadata=meta(check=STR))
    env_diff_sha256: str = field(default="", metadata=meta(check=STR))


@record
class TargetInfo:
    """Where the wheels were built, as probed inside the target (host or container); declared as a lock's
    [target] as ToolchainInfo is."""
    runtime: str = field(default="host", metadata=meta(check=STR))
    python: str = field(default="python3", metadata=meta(check=STR))
    python_version: str = field(default="", metadata=meta(check=STR))
    python_tag: str = field(default="", metadata=meta(check=STR))  # e.g. cp311
    platform: str = field(default="", metadata=meta(check=STR))  # e.g. linux_x86_64
    pip_version: str = field(default="", metadata=meta(check=STR))
    torch_version: str = field(default="", metadata=meta(check=STR))
    torch_xpu: str = field(default="", metadata=meta(check=STR))
    image: str = field(default="", metadata=meta(check=STR))
    image_digest: str = field(default="", metadata=meta(check=STR))
    container: str = field(default="", metadata=meta(check=STR))

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
