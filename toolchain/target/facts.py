"""What a build ran on: the target (interpreter, platform, torch, image) and the toolchain (oneAPI), as
probed. The plan carries them; the lock records them."""

from __future__ import annotations

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
