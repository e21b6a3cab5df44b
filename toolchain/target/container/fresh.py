"""A fresh container: `FreshContainerRuntime` (recipe `[target] image`).

Builds: each `workspace()` starts a container with the source tree, the output directory and the dependency
trees mounted at the fixed paths, and removes it at the end (the trees are handed back to the invoking user
first). One-off commands (probe, setvars) run in a second container that lives as long as the runtime and
is started again when a setvars folder has to be mounted.

Serving (smoke, `serving=Serving(...)`): that one-off container is the serving one, started on entry from the
locked image (by its recorded digest when that image is here) with the recipe's `run-args` and the host's
network (so the server's 127.0.0.1:PORT is this machine's), the shared directory mounted read-only, labelled
`toolchain.role=smoke`; removed at exit (success, failure, Ctrl-C) unless TOOLCHAIN_KEEP_CONTAINERS=1.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from toolchain import scripts
from toolchain.console import UI
from toolchain.core.fs import invoking_user
from toolchain.recipe.load import TargetSpec
from toolchain.target.container.common import (
    EXTRA,
    OUT,
    SCRIPTS,
    SHARE,
    SRC,
    ContainerRuntimeBase,
    alternates,
)
from toolchain.target.container.engine import Container, EngineConfig, Image, Mount, NoSigint
from toolchain.target.container.serve import host_network_args, pinned_image
from toolchain.target.parts import Extra, Serving, Workspace


class FreshContainerRuntime(ContainerRuntimeBase):
    """Builds in a fresh container from the recipe's image, one per build."""

    workspaces_at_once = True  # a container of its own per workspace

    def __init__(self, spec: TargetSpec, ui: UI | None = None, config: EngineConfig | None = None, *,
                 serving: Serving | None = None) -> None:
        super().__init__(spec, ui, config, serving=serving)
        self._oneoff: Container | None = None  # where one-off commands run (serving: the serving container)
        self._oneoff_lock = threading.Lock()
        self._role, self._run_args, self._replaced_network = "run", list(spec.run_args), ""
        if serving is not None:
            self._role = "smoke"
            self._run_args, self._replaced_network = host_network_args(spec.run_args)

    def describe(self) -> str:
        serving = self._container_id()  # a serving container is one container: named once it runs
        return f"{self.kind} container {serving} (image {self.spec.image})" if serving else \
            f"{self.kind} container (image {self.spec.image})"

    def _container_id(self) -> str:
        return self._oneoff.id if self.serving is not None and self._oneoff is not None else ""

    def _open(self, stack: contextlib.ExitStack) -> None:
        stack.callback(self._remove_oneoff)
        key = "target.base" if self.spec.base else "target.image"  # (the key an error names)
        if self.serving is None:
            self.image = self.engine.image(self.spec.image, key=key)
            return
        self.image = self.engine.image(self.spec.image, pinned=pinned_image(self.spec.image, self.serving.digest),
                                       key=key)
        self._note_digest(self.image)
        if self._replaced_network:
            self.engine.say(warn=True, message=f"target.run-args: serving on the host's network instead of "
                                               f"{self._replaced_network!r} (smoke talks to the server on this "
                                               f"machine)")
        self._target()

    def _image(self) -> Image:
        if self.image is None:
            raise RuntimeError("FreshContainerRuntime used outside `with`")
        return self.image

    def _oneoff_mounts(self) -> list[Mount]:
        share = self.serving.share if self.serving else None
        return ([Mount(str(share), SHARE, readonly=True)] if share is not None else []) + self._setvars_mounts()

    def _setvars_mounts(self) -> list[Mount]:
        """setvars' folders, and the package's scripts: every container this runtime starts has them."""
        return [*(Mount(host, inside, readonly=True) for host, inside in self._setvars.items()),
                Mount(str(scripts.FOLDER), SCRIPTS, readonly=True)]

    def _target(self) -> Container:
        with self._oneoff_lock:  # (builds side by side may both run a one-off command first)
            if self._oneoff is None:
                self._oneoff = self.engine.start(self._role, self._image(), self._oneoff_mounts(), self._run_args)
            return self._oneoff

    def _remove_oneoff(self) -> None:
        container, self._oneoff = self._oneoff, None
        if container is not None:
            self.engine.remove(container.id)

    def _bring_scripts(self) -> None:
        """Every container this runtime starts has them mounted."""

    def _bring_setvars(self, folder: str, inside: str) -> None:
        self._remove_oneoff()  # started without the mount: the next run() starts one with it

    @contextlib.contextmanager
    def workspace(self, src: Path, out: Path, deps: Mapping[str, Path],
                  extras: Sequence[Extra] = ()) -> Iterator[Workspace]:
        _, _, inside = self.workspace_paths(src, out, deps)
        mounts = [Mount(str(src), SRC), Mount(str(out), OUT)]
        mounts += [Mount(str(path), inside[n]) for n, path in deps.items()]
        mounts += [Mount(str(e.host), f"{EXTRA}/{e.name}", readonly=not e.cache) for e in extras]
        mounts += self._setvars_mounts()
        mounts += [Mount(alt, alt, readonly=True) for alt in alternates([src, *deps.values()])]
        with self.engine.started("build", self._image(), mounts, self.spec.run_args) as container:
            try:
                yield Workspace(SRC, OUT, inside, self._runner(container),
                                {e.name: f"{EXTRA}/{e.name}" for e in extras}, SCRIPTS)
            finally:
                with NoSigint():  # what the build wrote in the mounted trees belongs to the invoking user
                    uid, gid = (0, 0) if self.rootless else invoking_user()
                    container.call(["chown", "-R", f"{uid}:{gid}", SRC, OUT, *inside.values()], user="0",
                                   capture=True, check=False)
