"""What every runtime shares: the `Runtime` protocol and how the probe's answer is read (the probe is
toolchain/scripts/interpreter.py, run as a file in the target). What a runtime hands out (a `Workspace` one
build runs in, an `Interpreter`, what it serves and brings in) is in target/parts.py."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from toolchain.core.proc import Completed
from toolchain.target.facts import TargetInfo

if TYPE_CHECKING:
    from toolchain.target.parts import Extra, Interpreter, Workspace


class Runner(Protocol):
    def __call__(self, argv: Sequence[str], *, env: Mapping[str, str | None], cwd: str, log: Path | None,
                 verbose: bool = False, capture: bool = False) -> Completed: ...


class Runtime(Protocol):
    """Where commands run, for builds and for smoke. Strategies: `HostRuntime` (toolchain.target.host, this
    machine), `FreshContainerRuntime` (a fresh container: one per build, one for a smoke's serving) and
    `ExecContainerRuntime` (exec into a running container), both in toolchain.target.container;
    `toolchain.target.make_runtime` picks one. A new place to run (a remote box) is one more class with these
    members: a context manager whose entry opens the place and whose exit leaves it as it was found.

    - build: `run`, `probe`, `toolchain_path`, `workspace` (trees in, wheels out), `script` (a file of
      toolchain/scripts where the target sees it);
    - smoke: `visible_path` (a host directory named by `Serving.share`), `copy_in` / `copy_out`,
      `make_venv` and `interpreter` (a Python there), `serve` (a long-running process: the host-side argv and
      environment that start it; stopping that host process stops it, and whatever a killed one left behind
      is stopped when the runtime exits)."""

    kind: str  # "host", or the engine ("podman", "docker"): what the lock records as [target] runtime
    workspaces_at_once: bool  # True: workspaces may be open in several threads at once (separate builds)
    on_host: bool  # True: its paths are this machine's (a venv made there outlives the runtime)

    def __enter__(self) -> Runtime: ...
    def __exit__(self, *exc: object) -> None: ...
    def describe(self) -> str: ...
    def report(self) -> dict[str, object]:
        """Where it ran, for a report (smoke's report.json `target`)."""
        ...
    def base_env(self) -> dict[str, str]: ...
    def toolchain_path(self, setvars: str, recipe_dir: Path) -> str: ...
    def run(self, argv: Sequence[str], *, env: Mapping[str, str | None] | None = None, cwd: str | None = None,
            log: Path | None = None, capture: bool = False, check: bool = True, timeout: float | None = None,
            verbose: bool = False) -> Completed: ...
    def probe(self) -> TargetInfo: ...
    def script(self, name: str) -> str:
        """Where the target sees the package's script `name` (toolchain/scripts/NAME), to run as a file."""
        ...
    def probe_watch(self) -> tuple[TargetInfo, list[str]]:
        """The probe, and the paths whose change would change its answer."""
        ...
    def identity(self) -> dict[str, object] | None:
        """What a remembered probe depends on; None: probe every time."""
        ...
    def workspace(self, src: Path, out: Path, deps: Mapping[str, Path],
                  extras: Sequence[Extra] = ()) -> AbstractContextManager[Workspace]: ...
    def copy_in(self, host: Path, inside: str) -> None:
        """A host file or directory to `inside` in the target (the host: a copy)."""
        ...
    def copy_out(self, inside: str, host: Path) -> None:
        """The contents of directory `inside` of the target into `host`."""
        ...
    def visible_path(self, host: Path) -> str:
        """Where the target sees a file of this machine (one under `Serving.share`; the host: itself)."""
        ...
    def scratch(self, host_dir: Path) -> str:
        """A directory for one run's files in the target (the host: `host_dir`)."""
        ...
    def interpreter(self, python: str, venv: str = "") -> Interpreter:
        """A Python in this target (`venv`: the virtual environment it belongs to)."""
        ...
    def make_venv(self, base_python: str, path: str, log: Path) -> Interpreter:
        """A fresh virtual environment at `path` in the target, made by `base_python`."""
        ...
    def python_env(self, py: Interpreter) -> dict[str, str | None]:
        """Layered over `base_env()` when running `py` (pip, checks); None removes a variable."""
        ...
    def serve_env(self, py: Interpreter) -> dict[str, str | None]:
        """Layered over this process's environment for a server that runs `py`'s environment."""
        ...
    def serve(self, argv: Sequence[str], env: Mapping[str, str]) -> tuple[list[str], dict[str, str]]:
        """(argv, env) of the process to start on this machine that runs `argv` with the complete
        environment `env` in the target, stops it when signalled, and exits with its exit code."""
        ...


def target_info(kind: str, python: str, probe_stdout: str, **extra: str) -> TargetInfo:
    data = json.loads(probe_stdout.strip().splitlines()[-1])
    data.pop("executable", None)
    data.pop("watch", None)
    return TargetInfo(runtime=kind, python=python, **data, **extra)


def watch_dirs(probe_stdout: str) -> list[str]:
    return list(json.loads(probe_stdout.strip().splitlines()[-1]).get("watch", []))
