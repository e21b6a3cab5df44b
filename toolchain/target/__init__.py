"""Where builds and smokes run: the host, a fresh container, or a running container. `make_runtime` picks the
strategy of the `Runtime` protocol (toolchain.target.base) that a recipe's `[target]` names; `serving` makes
it ready to serve (smoke).

The container runtimes are imported when a recipe asks for one: a host build does not pay for them (`_LAZY`:
the names imported on first use, and from which module; tests/test_public_names.py resolves every one)."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from toolchain.console import UI
from toolchain.core.lazy import lazy_exports
from toolchain.errors import UsageError
from toolchain.recipe.model import TargetSpec

if TYPE_CHECKING:
    from toolchain.target.base import Interpreter, Runtime
    from toolchain.target.container import ExecContainerRuntime, FreshContainerRuntime
    from toolchain.target.container.presence import ImageState
    from toolchain.target.doctor import Finding
    from toolchain.target.facts import TargetInfo
    from toolchain.target.host import HostRuntime
    from toolchain.target.parts import Serving

__all__ = ["ExecContainerRuntime", "FreshContainerRuntime", "HostRuntime", "Interpreter", "Runtime", "Serving",
           "absent_image", "entry_findings", "make_runtime", "memo_dir", "target_spec"]


def make_runtime(spec: TargetSpec, ui: UI | None = None, *, serving: Serving | None = None) -> Runtime:
    """The runtime a target spec names: the host, a fresh container per build, or exec into a running one."""
    if not in_container(spec):
        from toolchain.target.host import HostRuntime

        return HostRuntime(spec)
    from toolchain.target.container import ExecContainerRuntime, FreshContainerRuntime

    if spec.container:
        return ExecContainerRuntime(spec, ui=ui, serving=serving)
    return FreshContainerRuntime(spec, ui=ui, serving=serving)


def target_spec(target: TargetInfo, recipe_target: Mapping[str, object], python: str, where: str) -> TargetSpec:
    """The target a lock (at `where`) was built in, to run its stack there again: the runtime and interpreter it
    records (`python` instead, when given; this machine's own Python for a host lock that names none), the image
    or the running container (exec mode names it as the recipe did), and the recipe's run-args and engine-args
    (`recipe_target`: the [target] table of the recipe text the lock keeps)."""
    if not in_container(target):
        return TargetSpec(runtime="host", python=python or target.python or sys.executable)
    container = str(recipe_target.get("container") or target.container)
    if not target.image and not container:
        raise UsageError(f"{where}: [target] runtime is {target.runtime!r} but the lock names neither an image "
                         f"nor a container", hint="rebuild the lock, or serve with --no-install --python PATH")
    return TargetSpec(runtime=target.runtime, python=python or target.python, image="" if container else target.image,
                      container=container, run_args=_strings(recipe_target.get("run-args")),
                      engine_args=_strings(recipe_target.get("engine-args")))


def _strings(value: object) -> tuple[str, ...]:
    return tuple(str(a) for a in value) if isinstance(value, list | tuple) else ()


def in_container(target: TargetSpec | TargetInfo) -> bool:
    """True: the target (a recipe's, or the one a lock was built in) is a container (an image's, or a running
    one), not this machine."""
    return (target.runtime or "host") != "host"


def memo_dir(spec: TargetSpec, cache_dir: Path) -> Path | None:
    """Where a probe of this target may be remembered (core/probe_memo.py): the cache's memo folder for the host,
    whose files a stat re-checks; None for a container (what it reads is not this machine's files)."""
    return None if in_container(spec) else Path(cache_dir) / "memo"


def from_image(spec: TargetSpec) -> bool:
    """True: the target is a fresh container of the recipe's image (one may have to be pulled)."""
    return in_container(spec) and not spec.container


def absent_image(spec: TargetSpec, ui: UI) -> ImageState | None:
    """The state of the recipe's container image when it is not here (None: the host, a running container, or
    the image is here). The registry is asked for its size; nothing is pulled."""
    if not from_image(spec):
        return None
    from toolchain.target.container.presence import engine_of, image_state

    engine = engine_of(spec, ui)
    engine.check()  # (not installed, not answering: the same error a build gives)
    state = image_state(spec, engine)
    return state if state is not None and not state.present else None


def entry_findings(spec: TargetSpec, ui: UI) -> tuple[list[Finding], bool]:
    """doctor's last lines for the target (a container: the image, then the engine, one trivial container with
    the recipe's run-args) and whether it can be entered: nothing is pulled. The host: none, and yes."""
    if not in_container(spec):
        return [], True
    from toolchain.target.container.presence import container_findings

    with ui.status(f"trying {spec.runtime} with the recipe's run-args"):
        return container_findings(spec, ui)


# (Interpreter, Runtime: smoke's; a build that compiles nothing creates neither class)
_LAZY = {"ExecContainerRuntime": "container", "FreshContainerRuntime": "container", "HostRuntime": "host", "Interpreter": "base",
         "Runtime": "base", "Serving": "parts"}
__getattr__ = lazy_exports(__name__, _LAZY)
