"""Builds inside a podman or docker container. Two implementations of the `Runtime` protocol
(toolchain.target.base), picked by `toolchain.target.make_runtime` from the recipe's `[target]`:

- `FreshContainerRuntime` (fresh.py, `image = ...`): a fresh container per build, trees mounted;
- `ExecContainerRuntime` (exec.py, `container = ...`): exec into a running container, trees copied.

Both are built on `engine.py`: the engine calls (`Engine`), one container (`Container`), labelled fresh
containers (`Engine.started`) and borrowed running ones (`Engine.borrowed`). Smoke serves through the same
API (serve.py: a venv, the server environment, `supervise()`).
"""

from toolchain.target.container.engine import (
    ENGINES,
    KEEP_ENV,
    KILL_PIDFILE,
    PIDS,
    ROOT,
    Container,
    ContainerError,
    ContainerNotRunning,
    Engine,
    EngineConfig,
    EngineNotFound,
    EngineNotRunning,
    Image,
    ImageNotFound,
    InterpreterMissing,
    Mount,
    NoSigint,
    image_digest,
    image_repo,
)
from toolchain.target.container.exec import ExecContainerRuntime
from toolchain.target.container.fresh import FreshContainerRuntime

__all__ = [
    "ENGINES", "KEEP_ENV", "KILL_PIDFILE", "PIDS", "ROOT", "Container", "ContainerError", "ContainerNotRunning",
    "Engine", "EngineConfig", "EngineNotFound", "EngineNotRunning", "ExecContainerRuntime", "FreshContainerRuntime",
    "Image", "ImageNotFound", "InterpreterMissing", "Mount", "NoSigint", "image_digest", "image_repo",
]
