"""What a runtime is handed and hands out, as plain data: the `Workspace` one build runs in (and the `Runner`
that runs its commands), what smoke asks of a runtime it serves from (`Serving`) and what a build brings in
besides its trees (`Extra`). It names no runtime: target/base.py (the protocols) imports this module, not the
other way round. A warm build that compiles nothing and a command that makes no runtime create none of these
classes (a frozen dataclass costs about a millisecond to create at import)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from toolchain import scripts
from toolchain.core.record import field, record

if TYPE_CHECKING:
    from toolchain.core.proc.runner import Completed


class Runner(Protocol):
    """How a `Workspace` runs a command where the build sees its trees."""

    def __call__(self, argv: Sequence[str], *, env: Mapping[str, str | None], cwd: str, log: Path | None,
                 verbose: bool = False, capture: bool = False) -> Completed: ...


@record
class Serving:
    """What smoke asks of a runtime it serves from, given when the runtime is made: the port the server
    listens on (a container shares the host's network, or must publish it), a host directory the target must
    see (the lock's wheels: mounted read-only in a fresh container, copied into a running one), and the
    image digest the lock was built in (a fresh container starts exactly that image when it is here)."""
    port: int
    share: Path | None = None
    digest: str = ""


@record
class Extra:
    """A host file or directory one build needs besides its trees: a tool brought in read-only (`cache=False`),
    or a cache directory the build writes (`cache=True`). The host uses it in place; a fresh container mounts
    it at `/toolchain/extra/NAME`; exec mode copies a tool in and keeps a cache in the container itself
    (under /var/cache/xpu-toolchain/NAME, reused by the next build there), since a running container cannot
    gain a mount."""
    name: str
    host: Path
    cache: bool = False


@record
class Workspace:
    """Target-side paths of one build's directories, and how to run commands there."""
    src: str
    out: str
    deps: Mapping[str, str]
    runner: Runner
    extras: Mapping[str, str] = field(default_factory=dict)  # Extra.name -> target-side path
    scripts: str = str(scripts.FOLDER)  # where the build sees the package's scripts (toolchain/scripts)

    def script(self, name: str) -> str:
        """The target-side path of the package's script `name`, to run as a file."""
        scripts.path(name)  # (a name that is not a script is a mistake here, not in the target)
        return f"{self.scripts}/{name}"

    def run(self, argv: Sequence[str], *, env: Mapping[str, str | None], cwd: str, log: Path | None,
            verbose: bool = False, capture: bool = False) -> Completed:
        return self.runner(argv, env=env, cwd=cwd, log=log, verbose=verbose, capture=capture)
