"""Where builds run: the host, a fresh container per build, or a running container. `make_runtime` picks the
implementation of the `Runtime` protocol (toolchain.target.base) that a recipe's `[target]` names."""

from __future__ import annotations

from toolchain.console import UI
from toolchain.recipe.load import TargetSpec
from toolchain.target.base import Runtime
from toolchain.target.container import ExecContainerRuntime, FreshContainerRuntime
from toolchain.target.host import HostRuntime

__all__ = ["ExecContainerRuntime", "FreshContainerRuntime", "HostRuntime", "Runtime", "make_runtime"]


def make_runtime(spec: TargetSpec, ui: UI | None = None) -> Runtime:
    if spec.runtime == "host":
        return HostRuntime(spec)
    if spec.container:
        return ExecContainerRuntime(spec, ui=ui)
    return FreshContainerRuntime(spec, ui=ui)
