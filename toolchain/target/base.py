"""What a runtime is, as small protocols, and the Python it hands out (`Interpreter`).

- `Place`: where commands run (`run`, `query`, `script`, `base_env`, `describe`, `said`, `report`), a context
  manager whose entry opens the place and whose exit leaves it as it was found. Callers never ask where it is:
  they ask it to act (run, copy in and out, carry a program in, leave a folder) or to name itself in a
  message, and each runtime does that as its place needs (tests/test_where_it_runs.py keeps it so);
- `BuildRuntime`: what a build needs besides (`probe`, `workspace`, `toolchain_path`, ...);
- `ServeRuntime`: what smoke's serving needs besides (copy in and out, a venv, serve and stop);
- `Runtime`: both, as every strategy offers: `HostRuntime` (toolchain.target.host, this machine),
  `FreshContainerRuntime` (a fresh container: one per build, one for a smoke's serving) and
  `ExecContainerRuntime` (exec into a running container), both in toolchain.target.container;
  `toolchain.target.make_runtime` picks one. A new place to run (a remote box) is one more class with
  these members.

A caller types its parameter with the smallest of them it needs. This module imports target/parts.py (what a
build is handed: `Workspace`, `Extra`), never the other way round; the probe's answer is read in
target/facts.py. The commands import it for types only: a command that makes no runtime creates no class of it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol, Self

from toolchain.core.record import field, record

if TYPE_CHECKING:
    from toolchain.core.proc.runner import Completed
    from toolchain.target.facts import TargetInfo
    from toolchain.target.parts import Extra, Workspace


class Place(Protocol):
    """Where commands run: what builds and smoke alike ask of a runtime."""

    kind: str  # "host", or the engine ("podman", "docker"): what the lock records as [target] runtime

    def __enter__(self) -> Self: ...
    def __exit__(self, *exc: object) -> None: ...
    def describe(self) -> str: ...
    def said(self, template: str) -> str:
        """`template` with `{where}` replaced as messages name this place (a container: "podman container NAME"),
        or "" where it goes without saying (this machine): callers print what it says, never ask which."""
        ...
    def report(self) -> dict[str, object]:
        """Where it ran, for a report (smoke's report.json `target`)."""
        ...
    def base_env(self) -> dict[str, str]: ...
    def run(self, argv: Sequence[str], *, env: Mapping[str, str | None] | None = None, cwd: str | None = None,
            log: Path | None = None, capture: bool = False, check: bool = True, timeout: float | None = None,
            verbose: bool = False) -> Completed: ...
    def script(self, name: str) -> str:
        """Where the target sees the package's script `name` (toolchain/scripts/NAME), to run as a file."""
        ...
    def query(self, python: str, script: Path, *args: str) -> Completed:
        """`python -c SOURCE ARGS` of the stdlib-only script file `script` where this place's commands run, its
        output captured (never raising on its exit code). The host, whose commands are this process's children
        (its cgroup, CPU affinity and files), answers in this process from the script's `answer(args)`: no
        interpreter is started."""
        ...
    def inherited_env(self) -> Mapping[str, str]:
        """What of this process's environment its commands inherit (the host: all of it; a container: none,
        its image's environment is its own)."""
        ...


class BuildRuntime(Place, Protocol):
    """What a build needs: the probe, the toolchain's path, and a workspace per build (trees in, wheels out)."""

    def builds_at_once(self, wanted: int) -> int:
        """How many of `wanted` builds may have a workspace open at once here (exec into one running
        container: one, its trees go to fixed paths; a fresh container each, or the host: all)."""
        ...
    def workspace_paths(self, src: Path, out: Path,
                        deps: Mapping[str, Path]) -> tuple[str, str, dict[str, str]]:
        """Where a workspace of these folders of this machine shows them to the build (src, out, deps), without
        opening one: `toolchain plan`'s exact command."""
        ...
    def carried(self, name: str, program: Path, *, static: bool) -> Extra | None:
        """The program of this machine at `program` as an `Extra` a workspace brings in, where it can run
        there (a container: only a `static` one, a dynamically linked program needs this machine's libraries);
        None: the build looks for it on the target's PATH."""
        ...
    def toolchain_path(self, setvars: str, recipe_dir: Path) -> str: ...
    def probe(self) -> TargetInfo: ...
    def probe_inputs(self) -> tuple[TargetInfo, dict[str, list[int] | None]]:
        """The probe, and every path it read its answer from (a remembered answer is valid while none changes)."""
        ...
    def identity(self) -> dict[str, object] | None:
        """What a remembered probe depends on; None: probe every time."""
        ...
    def workspace(self, src: Path, out: Path, deps: Mapping[str, Path],
                  extras: Sequence[Extra] = ()) -> AbstractContextManager[Workspace]: ...


class ServeRuntime(Place, Protocol):
    """What smoke's serving needs: `visible_path` (a host directory named by `Serving.share`), `copy_in` /
    `copy_out`, `make_venv` (a Python there; any other is `Interpreter(runtime, python, venv)`, a function of
    the runtime, not a member of it), `serve` (a long-running process: the host-side
    argv and environment that start it; stopping that host process stops it, and whatever a killed one left
    behind is stopped when the runtime exits)."""

    def provides(self, dist: str) -> bool:
        """Whether a venv made here may import `dist` without it being installed into it: a container's venv
        sees its image's packages (an image brings its own vLLM; not looked at before the venv is made), the
        host's fresh venv holds only what is installed into it."""
        ...
    def venv_at(self, host: Path) -> str:
        """A venv at this folder of this machine (`--venv`), as this place names it; UsageError where the place
        cannot use one there (a container makes its venv inside it)."""
        ...
    def leave(self, path: str, keep: bool) -> Literal["kept", "removed", ""]:
        """A folder a run made at `path` here, when the run ends: "kept" (`keep`), "removed" now, or "" where it
        goes with the place itself (a container's) or is not there."""
        ...
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
    def make_venv(self, base_python: str, path: str, log: Path) -> Interpreter:
        """A fresh virtual environment at `path` in the target, made by `base_python`."""
        ...
    def python_env(self, py: Interpreter) -> dict[str, str | None]:
        """Layered over `base_env()` when running `py` (pip, checks); None removes a variable."""
        ...
    def serve_env(self, py: Interpreter) -> dict[str, str | None]:
        """Layered over this process's environment for a server that runs `py`'s environment."""
        ...
    def which(self, program: str, py: Interpreter) -> str:
        """The file `program` (a bare name) names on the PATH `py`'s server sees, as far as it can be looked up
        from here (this machine: its path; a container: the name as given)."""
        ...
    def serve(self, argv: Sequence[str], env: Mapping[str, str]) -> tuple[list[str], dict[str, str]]:
        """(argv, env) of the process to start on this machine that runs `argv` with the complete
        environment `env` in the target, stops it when signalled, and exits with its exit code."""
        ...


class Runtime(BuildRuntime, ServeRuntime, Protocol):
    """A place that builds and serves: what every strategy offers (`make_runtime` returns one)."""


@record
class Interpreter:
    """A Python in a runtime: a venv's (`venv` set) or a base interpreter."""
    runtime: ServeRuntime = field(compare=False, repr=False)
    python: str
    venv: str = ""

    def run(self, argv: Sequence[str], *, log: Path | None = None, capture: bool = False,
            timeout: float | None = None, check: bool = True, env: Mapping[str, str | None] | None = None) -> Completed:
        """`argv` in the runtime with this interpreter's environment (and `env` over it: None removes)."""
        return self.runtime.run(argv, env={**self.runtime.python_env(self), **(env or {})}, log=log, capture=capture,
                                timeout=timeout, check=check)

    def script(self, name: str) -> str:
        """Where this interpreter sees the package's script `name` (`Place.script`)."""
        return self.runtime.script(name)

    def where(self) -> str:
        return self.python + self.runtime.said(" in the {where}")
