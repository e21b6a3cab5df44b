"""What the two container runtimes share, as a small base: the engine check on entry and cleanup on exit,
one-off commands (probe, setvars), setvars paths, and how a workspace's commands run.

A build sees its trees at fixed paths (`/toolchain/src`, `/toolchain/out`, `/toolchain/deps/NAME`) and a
setvars folder of the host at `/toolchain/setvars`, so that a build does not depend on where the host keeps
them. The implementations (`FreshContainerRuntime`, `ExecContainerRuntime`) say where commands run and how
the trees get there.
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path

from toolchain.console import UI
from toolchain.core.proc import Completed
from toolchain.recipe.load import TargetSpec
from toolchain.target.base import PROBE, Extra, Runner, Workspace, target_info
from toolchain.target.container.engine import (
    ENGINES,
    ROOT,
    Container,
    ContainerError,
    Engine,
    EngineConfig,
    Image,
    InterpreterMissing,
    NoSigint,
)
from toolchain.target.facts import TargetInfo

SRC, OUT, DEPS, SETVARS = f"{ROOT}/src", f"{ROOT}/out", f"{ROOT}/deps", f"{ROOT}/setvars"
# A build's Extra tools and caches (target.base.Extra): mounted at EXTRA/NAME (fresh), or copied there and
# the caches kept at KEPT/NAME, in the container itself (exec)
EXTRA, KEPT = f"{ROOT}/extra", "/var/cache/xpu-toolchain"
# safe.directory: the checkouts belong to the host user, not necessarily to the container's user.
GIT_SAFE = {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "safe.directory", "GIT_CONFIG_VALUE_0": "*"}


class ContainerRuntimeBase(abc.ABC):
    """A `Runtime` (toolchain.target.base) whose commands run in a podman or docker container."""

    workspaces_at_once = False  # (each kind says whether its builds can run side by side)

    def __init__(self, spec: TargetSpec, ui: UI | None = None, config: EngineConfig | None = None) -> None:
        self.spec = spec
        self.kind = spec.runtime
        self.engine = Engine(config or ENGINES[spec.runtime], tuple(spec.engine_args), ui)
        self.rootless = False
        self.image: Image | None = None           # known once entered
        self._setvars: dict[str, str] = {}        # host directory -> in-container directory
        self._base_env: dict[str, str] | None = None
        self._stack: contextlib.ExitStack | None = None

    # ---- what an implementation provides ----------------------------------------------------------------

    @abc.abstractmethod
    def describe(self) -> str: ...

    @abc.abstractmethod
    def _open(self, stack: contextlib.ExitStack) -> None:
        """Check the image or container (sets `image`); what must happen at exit goes on `stack`."""

    @abc.abstractmethod
    def _target(self) -> Container:
        """Where one-off commands run."""

    @abc.abstractmethod
    def _bring_setvars(self, folder: str, inside: str) -> None:
        """Make the host's `folder` visible at `inside` for the commands that follow."""

    @abc.abstractmethod
    def workspace(self, src: Path, out: Path, deps: Mapping[str, Path],
                  extras: Sequence[Extra] = ()) -> AbstractContextManager[Workspace]: ...

    def _container_id(self) -> str:
        """The container recorded in the lock ("" when each build gets a fresh one)."""
        return ""

    # ---- lifecycle ------------------------------------------------------------------------------------

    def __enter__(self) -> ContainerRuntimeBase:
        self.rootless = self.engine.check()
        stack = contextlib.ExitStack()
        try:
            self._open(stack)
        except BaseException:
            with NoSigint():
                stack.close()
            raise
        self._stack = stack
        return self

    def __exit__(self, *exc: object) -> None:
        if self._stack is not None:
            with NoSigint():
                self._stack.close()
            self._stack = None

    # ---- the Runtime protocol ----------------------------------------------------------------------------

    def base_env(self) -> dict[str, str]:
        if self._base_env is None:
            self._base_env = self._target().environment()
        return dict(self._base_env)

    def toolchain_path(self, setvars: str, recipe_dir: Path) -> str:
        """Absolute paths name a file in the container; a relative one is the host's, brought in read-only."""
        if Path(setvars).is_absolute():
            return setvars
        host = (recipe_dir / setvars).resolve()
        if not host.is_file():
            return str(host)  # the existence check inside the target reports it
        folder = str(host.parent)
        if folder not in self._setvars:
            inside = SETVARS if not self._setvars else f"{SETVARS}-{len(self._setvars) + 1}"
            self._setvars[folder] = inside
            self._bring_setvars(folder, inside)
        return f"{self._setvars[folder]}/{host.name}"

    def run(self, argv: Sequence[str], *, env: Mapping[str, str | None] | None = None, cwd: str | None = None,
            log: Path | None = None, capture: bool = False, check: bool = True, timeout: float | None = None,
            verbose: bool = False) -> Completed:
        return self._target().call(argv, env=env, cwd=cwd, log=log, capture=capture, check=check, timeout=timeout,
                                   verbose=verbose)

    def identity(self) -> dict[str, object] | None:
        """Containers are probed every time (an image or a running container can change under the same name)."""
        return None

    def probe_watch(self) -> tuple[TargetInfo, list[str]]:
        return self.probe(), []

    def probe(self) -> TargetInfo:
        python, where = self.spec.python, self.describe()
        r = self.run([python, "-c", PROBE], capture=True, check=False)
        image = self.image or Image(self.spec.image, "")
        if r.returncode != 0:
            err = (r.stderr or r.stdout).strip()
            if r.returncode in (126, 127) or "executable file not found" in err:
                raise InterpreterMissing(
                    f"target.python: {python!r} is not in the {where}: {err.splitlines()[-1] if err else ''}",
                    hint=f"set [target] python to an interpreter that exists there, e.g. \"python3\" or "
                         f"\"/opt/venv/bin/python\" (look with `{self.engine.name} run --rm --entrypoint sh "
                         f"{image.start_ref} -c 'command -v python3'`)")
            raise ContainerError(f"probing {python} in the {where} failed (exit {r.returncode}): {err[-500:]}",
                                 hint=f"run it by hand: {self.engine.name} exec ... {python} -c 'import sys'")
        return target_info(self.kind, python, r.stdout, image=image.name, image_digest=image.digest,
                           container=self._container_id())

    # ---- for the implementations ---------------------------------------------------------------------------

    def _runner(self, container: Container) -> Runner:
        def runner(argv: Sequence[str], *, env: Mapping[str, str | None], cwd: str, log: Path | None,
                   verbose: bool = False, capture: bool = False) -> Completed:
            full = {**GIT_SAFE, **env} if "GIT_CONFIG_COUNT" not in env else dict(env)
            return container.call(argv, env=full, cwd=cwd, log=log, verbose=verbose, capture=capture)
        return runner


def alternates(trees: Sequence[Path]) -> list[str]:
    """Object directories the (shared) checkouts borrow from, by absolute host path."""
    found: list[str] = []
    for tree in trees:
        info = Path(tree) / ".git" / "objects" / "info" / "alternates"
        if info.is_file():
            for line in info.read_text().splitlines():
                line = line.strip()
                if line and not line.startswith("#") and Path(line).is_absolute() and line not in found:
                    found.append(line)
    return found
