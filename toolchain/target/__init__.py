"""Where builds and smokes run: the host, a fresh container, or a running container. `make_runtime` picks the
strategy of the `Runtime` protocol (toolchain.target.base) that a recipe's `[target]` names; `serving` makes
it ready to serve (smoke).

The container runtimes are imported when a recipe asks for one: a host build does not pay for them."""

from __future__ import annotations

from typing import TYPE_CHECKING

from toolchain.console import UI
from toolchain.recipe.load import TargetSpec
from toolchain.target.base import Runtime
from toolchain.target.host import HostRuntime

if TYPE_CHECKING:
    from toolchain.target.container import ExecContainerRuntime, FreshContainerRuntime
    from toolchain.target.parts import Interpreter, Serving

__all__ = ["ExecContainerRuntime", "FreshContainerRuntime", "HostRuntime", "Interpreter", "Runtime", "Serving",
           "make_runtime"]


def make_runtime(spec: TargetSpec, ui: UI | None = None, *, serving: Serving | None = None) -> Runtime:
    if spec.runtime == "host":
        return HostRuntime(spec)
    from toolchain.target.container import ExecContainerRuntime, FreshContainerRuntime

    if spec.container:
        return ExecContainerRuntime(spec, ui=ui, serving=serving)
    return FreshContainerRuntime(spec, ui=ui, serving=serving)


def __getattr__(name: str) -> object:
    if name in ("ExecContainerRuntime", "FreshContainerRuntime"):
        from toolchain.target import container

        return getattr(container, name)
    if name in ("Interpreter", "Serving"):  # (smoke's: a build that compiles nothing creates neither class)
        from toolchain.target import parts

        return getattr(parts, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
