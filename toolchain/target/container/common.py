"""What the two container runtimes share, as a small base: the engine check on entry and cleanup on exit,
one-off commands (probe, setvars), setvars paths, how a workspace's commands run, and serving (smoke): a
venv, the server's environment and its supervised start, servers left behind stopped at exit.

A build sees its trees at fixed paths (`/toolchain/src`, `/toolchain/out`, `/toolchain/deps/NAME`) and a
setvars folder of the host at `/toolchain/setvars`, so that a build does not depend on where the host keeps
them. The implementations (`FreshContainerRuntime`, `ExecContainerRuntime`) say where commands run and how
the trees get there.
"""

from __future__ import annotations

import abc
import contextlib
import os
import uuid
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Literal, Self

from toolchain import scripts
from toolchain.console import UI
from toolchain.core.proc.runner import Completed, merge_env
from toolchain.recipe.load import TargetSpec
from toolchain.target.base import Interpreter
from toolchain.target.container import serve
from toolchain.target.container.engine import (
    ENGINES,
    KILL_PIDFILE,
    PIDS,
    ROOT,
    Container,
    ContainerError,
    Engine,
    EngineConfig,
    Image,
    InterpreterMissing,
    NoSigint,
)
from toolchain.target.facts import TargetInfo, target_info
from toolchain.target.parts import Extra, Runner, Serving, Workspace

SRC, OUT, DEPS, SETVARS = f"{ROOT}/src", f"{ROOT}/out", f"{ROOT}/deps", f"{ROOT}/setvars"
# A build's Extra tools and caches (target.parts.Extra): mounted at EXTRA/NAME (fresh), or copied there and
# the caches kept at KEPT/NAME, in the container itself (exec)
EXTRA, KEPT = f"{ROOT}/extra", "/var/cache/xpu-toolchain"
# smoke: the shared host directory (Serving.share) and one run's files (scratch: the venv)
SHARE, SCRATCH = f"{ROOT}/wheels", f"{ROOT}/smoke"
# the package's scripts (toolchain/scripts), run as files: mounted read-only (fresh), copied in (exec)
SCRIPTS = f"{ROOT}/scripts"
# safe.directory: the checkouts belong to the host user, not necessarily to the container's user.
GIT_SAFE = {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "safe.directory", "GIT_CONFIG_VALUE_0": "*"}


class ContainerRuntimeBase(abc.ABC):
    """A `Runtime` (toolchain.target.base) whose commands run in a podman or docker container."""

    workspaces_at_once = False  # (each kind says whether its builds can run side by side)

    def __init__(self, spec: TargetSpec, ui: UI | None = None, config: EngineConfig | None = None, *,
                 serving: Serving | None = None) -> None:
        self.spec = spec
        self.kind = spec.runtime
        self.engine = Engine(config or ENGINES[spec.runtime], tuple(spec.engine_args), ui)
        self.serving = serving
        self.rootless = False
        self.image: Image | None = None           # known once entered
        self.notes: list[str] = []                # what a report should say (the image is not the locked one)
        self._setvars: dict[str, str] = {}        # host directory -> in-container directory
        self._base_env: dict[str, str] | None = None
        self._stack: contextlib.ExitStack | None = None

    # ---- what an implementation provides ----------------------------------------------------------------

    @abc.abstractmethod
    def describe(self) -> str: ...

    def said(self, template: str) -> str:
        """`template` naming this container (`Place.said`)."""
        return template.replace("{where}", self.describe())

    def query(self, python: str, script: Path, *args: str) -> Completed:
        """The script run in the container (`Place.query`): its own limits and files."""
        return self.run([python, "-c", script.read_text(encoding="utf-8"), *args], capture=True, check=False)

    def inherited_env(self) -> Mapping[str, str]:
        return {}  # (the image's environment is the build's: base_env)

    def builds_at_once(self, wanted: int) -> int:
        return wanted if self.workspaces_at_once else 1

    def workspace_paths(self, src: Path, out: Path, deps: Mapping[str, Path]) -> tuple[str, str, dict[str, str]]:
        return SRC, OUT, {name: f"{DEPS}/{name}" for name in deps}

    def carried(self, name: str, program: Path, *, static: bool) -> Extra | None:
        return Extra(name, program) if static else None  # (a dynamically linked one needs this machine's libraries)

    def provides(self, dist: str) -> bool:
        return True  # (make_venv: --system-site-packages; the image's own packages, looked at once it is made)

    def venv_at(self, host: Path) -> str:
        from toolchain.errors import UsageError

        raise UsageError(f"--venv {host} is a path on this machine, but the stack serves in the {self.describe()}: "
                         f"its venv is made inside it", hint="drop --venv")

    def leave(self, path: str, keep: bool) -> Literal["kept", "removed", ""]:
        return ""  # (it goes with the container)

    def which(self, program: str, py: Interpreter) -> str:
        """`program` as given: its PATH is the container's, not looked at from here (`ServeRuntime.which`)."""
        return program

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

    @abc.abstractmethod
    def _bring_scripts(self) -> None:
        """Make the package's scripts visible at SCRIPTS for the commands that follow."""

    # ---- lifecycle ------------------------------------------------------------------------------------

    def __enter__(self) -> Self:
        self.rootless = self.engine.check()
        stack = contextlib.ExitStack()
        try:
            self._open(stack)
            if self.serving is not None:
                self._open_serving(stack)
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

    def probe_inputs(self) -> tuple[TargetInfo, dict[str, list[int] | None]]:
        return self.probe(), {}

    def probe(self) -> TargetInfo:
        python, where = self.spec.python, self.describe()
        r = self.run([python, self.script("interpreter.py")], capture=True, check=False)
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

    def script(self, name: str) -> str:
        scripts.path(name)
        self._bring_scripts()
        return f"{SCRIPTS}/{name}"

    def report(self) -> dict[str, object]:
        image = self.image
        return {"runtime": self.kind, "mode": "container" if self.spec.container else "image",
                "name": self.describe(), "container": self._container_id(),
                "image": image.name if image else self.spec.image,
                "image_ref": image.start_ref if image else self.spec.image,
                "image_digest": image.digest if image and image.id else "",
                "locked_image_digest": self.serving.digest if self.serving else "", "notes": list(self.notes)}

    # ---- smoke: files, interpreters, servers ---------------------------------------------------------------

    def copy_in(self, host: Path, inside: str) -> None:
        self._target().copy_into(host, inside)

    def copy_out(self, inside: str, host: Path) -> None:
        host.mkdir(parents=True, exist_ok=True)
        self._target().copy_out(inside, host)

    def visible_path(self, host: Path) -> str:
        share = self.serving.share if self.serving else None
        if share is not None and (host == share or share in host.parents):
            return str(Path(SHARE) / host.relative_to(share))
        return str(host)

    def scratch(self, host_dir: Path) -> str:
        return SCRATCH

    def make_venv(self, base_python: str, path: str, log: Path) -> Interpreter:
        """A venv made with --system-site-packages (and a .pth when the image's interpreter is a venv
        itself): the image's packages (its torch) stay visible and the image is left as it was."""
        py = Interpreter(self, base_python)
        py.run([base_python, self.script("make_venv.py"), path], log=log, timeout=600)
        return Interpreter(self, f"{path}/bin/python", path)

    def python_env(self, py: Interpreter) -> dict[str, str | None]:
        """The container's environment plus pip's settings from here."""
        return {"PIP_DISABLE_PIP_VERSION_CHECK": "1", **serve.from_host(serve.PIP_FROM_HOST)}

    def serve_env(self, py: Interpreter) -> dict[str, str | None]:
        return serve.serve_env(self.base_env(), py.venv)

    def serve(self, argv: Sequence[str], env: Mapping[str, str]) -> tuple[list[str], dict[str, str]]:
        """The server exec'd in the container under `serve.supervise()` with exactly `env`."""
        cenv = self.base_env()
        changes: dict[str, str | None] = {k: v for k, v in env.items() if cenv.get(k) != v}
        changes.update({k: None for k in cenv if k not in env})
        container = self._target()
        pidfile = f"{PIDS}/serve-{uuid.uuid4().hex}"
        exec_argv, engine_env = self.engine.exec_argv(container.id, argv, env=changes, pidfile=pidfile)
        where = {"engine": self.engine.argv(), "container": container.id, "pidfile": pidfile}
        return serve.boot_argv(where, exec_argv), merge_env(os.environ, engine_env)

    def _open_serving(self, stack: contextlib.ExitStack) -> None:
        """The container prepared to serve: scratch and pid directories, the share copied in where it is not
        mounted; at exit servers whose supervisor did not get to stop them are killed."""
        container = self._target()
        stack.callback(self._kill_servers, container)
        container.call(["sh", "-c", 'mkdir -p "$0" "$1" && chmod 1777 "$1"', SCRATCH, PIDS], user="0",
                       capture=True)
        container.call(["chown", container.user(), SCRATCH], user="0", capture=True)
        share = self.serving.share if self.serving else None
        if share is not None and not container.owned:  # a started container has it mounted
            container.call(["rm", "-rf", SHARE], user="0", capture=True)
            self.copy_in(share, SHARE)

    def _kill_servers(self, container: Container) -> None:
        container.call(["sh", "-c", 'k=$1; for f in "$0"/serve-*; do [ -f "$f" ] && sh -c "$k" "$f" '
                        'KILL; rm -f "$f"; done; true', PIDS, KILL_PIDFILE],
                       user="0", capture=True, check=False, timeout=60)

    def _note_digest(self, image: Image) -> None:
        locked = self.serving.digest if self.serving else ""
        if locked and image.digest != locked:
            self.notes.append(f"the lock was built in image {locked}; serving from "
                              f"{image.name or self.spec.image} {image.digest}")
            self.engine.say(warn=True, message=self.notes[-1])

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
