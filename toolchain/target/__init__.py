"""Where builds run: the host, a fresh container per build, or a running container. `make_runtime` picks the
implementation of the `Runtime` protocol (toolchain.target.base) that a recipe's `[target]` names."""

from __future__ import annotations

from toolchain.recipe.load import TargetSpec
from toolchain.target.base import Runtime

__all__ = ["HostRuntime", "Runtime", "make_runtime"]
from toolchain.target.host import HostRuntime


def make_runtime(spec: TargetSpec, ui=None):
    if spec.runtime == "host":
        return HostRuntime(spec)
    from toolchain.target.container import ContainerRuntime

    return ContainerRuntime(spec, ui=ui)
