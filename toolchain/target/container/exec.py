"""Exec into a running container: `ExecContainerRuntime` (recipe `[target] container`).

The container is someone else's (a vLLM container a user started): the sources are copied in and the
wheels out (a smoke: the shared directory copied in, the server exec'd there), and at the end what was
copied in (under /toolchain) is removed and servers left behind killed; the container keeps running.
One process at a time uses it.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from toolchain import scripts
from toolchain.console import UI
from toolchain.errors import UsageError
from toolchain.recipe.load import TargetSpec
from toolchain.target.container.common import (
    DEPS,
    EXTRA,
    KEPT,
    OUT,
    SCRATCH,
    SCRIPTS,
    SHARE,
    SRC,
    ContainerRuntimeBase,
    alternates,
)
from toolchain.target.container.engine import ROOT, Container, EngineConfig, NoSigint
from toolchain.target.parts import Extra, Serving, Workspace

GIT = f"{ROOT}/git"  # copies of the object directories the checkouts borrow from


class ExecContainerRuntime(ContainerRuntimeBase):
    """Builds in the running container the recipe names."""

    workspaces_at_once = False  # the trees are copied to fixed paths in the one container: one build at a time

    def __init__(self, spec: TargetSpec, ui: UI | None = None, config: EngineConfig | None = None, *,
                 serving: Serving | None = None) -> None:
        super().__init__(spec, ui, config, serving=serving)
        self._container: Container | None = None  # once entered
        self._scripts_in = False                   # the package's scripts copied in (removed at exit)

    def describe(self) -> str:
        return f"{self.kind} container {self.spec.container}"

    def _open(self, stack: contextlib.ExitStack) -> None:
        self._container = stack.enter_context(self.engine.borrowed(self.spec.container))
        self.image = self._container.image
        if self.serving is not None:
            self._note_digest(self.image)
            self._check_network(self.serving.port)
            stack.callback(self._container.call, ["rm", "-rf", SCRATCH, SHARE], user="0", capture=True, check=False)
        elif self.spec.run_args:
            self.engine.say(warn=True, message=f"target.run-args {list(self.spec.run_args)} are ignored: they "
                                               f"apply to containers the tool starts, not to {self.spec.container}")
        stack.callback(self._remove_setvars)
        stack.callback(self._remove_scripts)

    def _check_network(self, port: int) -> None:
        """Smoke talks to the server on this machine: the container uses the host's network or publishes `port`."""
        name, engine = self.spec.container, self.kind
        r = self.engine.query("container", "inspect", "--format", "{{.HostConfig.NetworkMode}}|"
                              "{{json .HostConfig.PortBindings}}", name, check=True)
        mode, _, bindings = r.stdout.strip().partition("|")
        if mode == "host":
            return
        published = json.loads(bindings or "null") or {}
        if any(b.get("HostPort") == str(port) for b in published.get(f"{port}/tcp") or ()):
            self.engine.say(warn=True, message=f"{name} publishes port {port}: the server must listen on 0.0.0.0 "
                                               f"inside it (--host 0.0.0.0)")
            return
        raise UsageError(f"target.container: {engine} container {name!r} does not use the host's network "
                         f"(network {mode!r}) and does not publish port {port}, so smoke cannot reach a "
                         f"server in it", hint=f"start it with --network=host (`{engine} run -d --network=host "
                                               f"--name {name} ...`), or with -p 127.0.0.1:{port}:{port} and pass "
                                               f"--port {port} --host 0.0.0.0")

    def _target(self) -> Container:
        if self._container is None:
            raise RuntimeError("ExecContainerRuntime used outside `with`")
        return self._container

    def _container_id(self) -> str:
        return self._target().id

    def _bring_setvars(self, folder: str, inside: str) -> None:
        container = self._target()
        container.call(["rm", "-rf", inside], user="0", capture=True)
        container.copy_into(folder, inside)

    def _bring_scripts(self) -> None:
        if not self._scripts_in:
            container = self._target()
            container.call(["rm", "-rf", SCRIPTS], user="0", capture=True)
            container.copy_into(str(scripts.FOLDER), SCRIPTS)
            self._scripts_in = True

    def _remove_scripts(self) -> None:
        if self._scripts_in:
            self._target().call(["rm", "-rf", SCRIPTS], user="0", capture=True, check=False)
            self._scripts_in = False

    def _remove_setvars(self) -> None:
        if self._setvars:
            self._target().call(["rm", "-rf", *self._setvars.values()], user="0", capture=True, check=False)

    @contextlib.contextmanager
    def workspace(self, src: Path, out: Path, deps: Mapping[str, Path],
                  extras: Sequence[Extra] = ()) -> Iterator[Workspace]:
        """The trees copied in (a checkout that borrows objects borrows from copies of them), the wheels
        copied out; at the end the copies are removed. Extra tools are copied in too; an Extra cache is a
        directory kept in the container (KEPT/NAME), for the next build there (a running container cannot
        gain a mount)."""
        container = self._target()
        _, _, inside = self.workspace_paths(src, out, deps)
        try:
            container.call(["sh", "-c", 'rm -rf "$0" "$@" && mkdir -p "$@"', SRC, OUT, DEPS, GIT], user="0",
                           capture=True)
            alts = {alt: f"{GIT}/{i}" for i, alt in enumerate(alternates([src, *deps.values()]))}
            for alt, there in alts.items():
                container.copy_into(alt, there)
            for host, there in [(src, SRC), *((path, inside[n]) for n, path in deps.items())]:
                container.copy_into(host, there)
                mine = alternates([host])
                if mine:  # the copy borrows objects from the copies of the host's object directories
                    container.call(["sh", "-c", 'printf "%s\\n" "$@" >"$0"', f"{there}/.git/objects/info/alternates",
                                    *(alts[a] for a in mine)], user="0", capture=True)
            extra_at = {e.name: (f"{KEPT}/{e.name}" if e.cache else f"{EXTRA}/{e.name}") for e in extras}
            kept = [extra_at[e.name] for e in extras if e.cache]
            container.call(["mkdir", "-p", EXTRA, *kept], user="0", capture=True)
            for e in extras:
                if not e.cache:
                    container.copy_into(str(e.host), extra_at[e.name])
            uid = container.user()
            if uid != "0:0":  # the build runs as the container's user (not -R on a kept cache: it is large)
                container.call(["chown", "-R", uid, SRC, OUT, DEPS, EXTRA], user="0", capture=True)
                if kept:
                    container.call(["chown", uid, *kept], user="0", capture=True)
            self._bring_scripts()
            yield Workspace(SRC, OUT, inside, self._runner(container), extra_at, SCRIPTS)
            container.copy_out(OUT, out)
        finally:
            with NoSigint():
                container.call(["rm", "-rf", SRC, OUT, DEPS, GIT, EXTRA], user="0", capture=True, check=False)
