"""The container engine: podman and docker, differing only in a frozen `EngineConfig` (as in cibuildwheel).

`Engine` makes the engine calls (`info`, `image inspect`, `pull`, `run`, `exec`, `cp`, `rm`); `Container` is
one container: `call()` runs a command in it, `copy_into()` and `copy_out()` move files. There are two ways
to have one, both context managers:

- `Engine.started(role, image, mounts, run_args)`: a fresh container that sleeps until it is removed. It
  carries the label `toolchain=1` (and `toolchain.pid=<pid>`, `toolchain.role=ROLE`) and is removed on
  success, failure and Ctrl-C, unless TOOLCHAIN_KEEP_CONTAINERS=1. A SIGKILL cannot be caught: the label
  `toolchain.owner` (core.proc.owner.owner_token) lets the next run that starts a container remove what a killed run left.
- `Engine.borrowed(name)`: a running container that is not the tool's. One process at a time uses its
  `/toolchain`; what the tool brought in there is removed at the end and the container keeps running. A
  command run in it writes its process id under `/toolchain/run`, so that Ctrl-C or a timeout can kill it
  there (an engine client does not pass signals on).

Environment values reach the container as `-e NAME` with the value in the engine's own environment, never
on its command line (secrets). An image is recorded by digest: `sha256:...` is a registry (repo) digest,
`id:sha256:...` the local image id when the image has no repo digest.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import Any, Union

from toolchain.console import UI
from toolchain.core.fs import file_lock, give_to_invoking_user
from toolchain.core.proc.owner import owner_gone, owner_token
from toolchain.core.proc.runner import CommandFailed, CommandTimeout, Completed, merge_env, run
from toolchain.core.record import field, record, replace
from toolchain.core.redact import is_secret
from toolchain.errors import ToolError

ROOT = "/toolchain"          # everything the tool brings into a container lives under here
PIDS = f"{ROOT}/run"         # pidfiles of commands run in a borrowed container
KEEP_ENV = "TOOLCHAIN_KEEP_CONTAINERS"
LABEL = "toolchain"
OWNER = f"{LABEL}.owner"  # proc.owner_token() of the tool that started the container
_REAPED: set[tuple[str, str]] = set()  # (engine, its host) whose orphaned containers this process removed
_REAP_LOCK = threading.Lock()
QUERY_TIMEOUT = 120.0
# Variables the engine client itself reads: their build values must not become the engine's own, so they
# are passed as NAME=VALUE (none of them is a secret by name).
ENGINE_READS = {"PATH", "HOME", "TMPDIR", "TZ", "REGISTRY_AUTH_FILE", "CONTAINER_HOST", "CONTAINER_CONNECTION",
                "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "no_proxy"}
ENGINE_READS_PREFIXES = ("LD_", "XDG_", "CONTAINERS_", "DOCKER_", "PODMAN_", "BUILDAH_", "GO", "SSL_")
# `sh -c KILL_PIDFILE PIDFILE SIGNAL`: send SIGNAL to the process group (else the process) whose id an
# `exec_argv(pidfile=...)` command wrote to PIDFILE.
# (`kill -s SIG -- -PGID`: dash, the /bin/sh of Debian images, rejects `kill -SIG -- -PGID`.)
KILL_PIDFILE = 'p=$(cat "$0" 2>/dev/null) && { kill -s "$1" -- "-$p" 2>/dev/null || kill -s "$1" "$p"; }'


@record
class EngineConfig:
    """How one engine (podman or docker) is called: its program, extra create and remove arguments."""
    name: str
    create_args: tuple[str, ...] = ()
    remove_args: tuple[str, ...] = ("rm", "--force")
    rootless_format: str = ""  # `info --format`: prints "true" or a list naming "rootless" when rootless
    owner_format: str = ""     # `ps --format`: a container's id and its owner label
    service_hint: str = ""


ENGINES = {
    "podman": EngineConfig("podman", create_args=("--security-opt", "label=disable"),
                           remove_args=("rm", "--force", "--time", "0"),
                           rootless_format="{{.Host.Security.Rootless}}",
                           owner_format='{{.ID}} {{index .Labels "' + OWNER + '"}}',
                           service_hint="run `podman info` to see why; check its configuration (CONTAINERS_CONF, "
                                        "storage.conf) and, for a remote engine, CONTAINER_HOST"),
    "docker": EngineConfig("docker", create_args=("--security-opt", "label=disable"),
                           rootless_format="{{json .SecurityOptions}}",
                           owner_format='{{.ID}} {{.Label "' + OWNER + '"}}',
                           service_hint="start the daemon (`sudo systemctl start docker`), check DOCKER_HOST/"
                                        "`docker context ls`, and that you may use /var/run/docker.sock "
                                        "(group docker)"),
}


class ContainerError(ToolError):
    """A container engine problem."""


class EngineNotFound(ContainerError):
    """The recipe's container engine is not installed (its program is not on PATH)."""
    pass


class EngineNotRunning(ContainerError):
    """The engine is installed but does not answer (e.g. docker's daemon is not running)."""
    pass


class StartFailed(ContainerError):
    """The engine could not start a container: `cause` in a line (start_failure), the fix in the hint."""

    def __init__(self, message: str, *, cause: str, hint: str) -> None:
        super().__init__(message, hint=hint)
        self.cause = cause


class ImageNotFound(ContainerError):
    """The image a recipe names is not in the engine and cannot be pulled (a user error: exit 2)."""
    return_code = 2


class ContainerNotRunning(ContainerError):
    """The running container a recipe execs into is gone or stopped (exit 2)."""
    return_code = 2


class InterpreterMissing(ContainerError):
    """The recipe's target interpreter does not exist in the container (exit 2)."""
    return_code = 2


def image_repo(image: str) -> str:
    """`registry/name` of an image reference, without its tag or digest."""
    repo = image.split("@", 1)[0]
    if ":" in repo.rsplit("/", 1)[-1]:
        repo = repo.rsplit(":", 1)[0]
    return repo


def image_digest(image: str, image_id: str, repo_digests: Sequence[str]) -> str:
    """The repo digest naming `image` (else the first one), else `id:` + the local image id."""
    repo = image_repo(image)
    found = [d.split("@", 1) for d in repo_digests if "@" in d]
    for r, digest in found:
        if r == repo or r.endswith("/" + repo) or repo.endswith("/" + r):
            return digest
    if found:
        return found[0][1]
    return "id:" + (image_id if ":" in image_id else f"sha256:{image_id}")


_SignalHandler = Union[Callable[[int, Union[FrameType, None]], Any], int, signal.Handlers, None]


class NoSigint:
    """Cleanup must finish even when Ctrl-C comes again: SIGINT is ignored meanwhile (the engine commands
    started here inherit that)."""

    def __enter__(self) -> None:
        self.old: _SignalHandler = None
        if threading.current_thread() is threading.main_thread():
            self.old = signal.signal(signal.SIGINT, signal.SIG_IGN)

    def __exit__(self, *exc: object) -> None:
        if self.old is not None:
            signal.signal(signal.SIGINT, self.old)


@record
class Image:
    """An image as the engine has it: the name given, its local id, its repo digests and the reference started."""
    name: str                        # as the recipe (or the running container) names it
    id: str                          # the engine's local image id
    repo_digests: tuple[str, ...] = ()
    ref: str = ""                    # what a container starts from when not `name` (a pinned reference)

    @property
    def digest(self) -> str:
        return image_digest(self.name, self.id, self.repo_digests)

    @property
    def start_ref(self) -> str:
        return self.ref or self.name


@record
class Mount:
    """A bind mount of a host path into a container, read-only or not."""
    source: str
    destination: str
    readonly: bool = False


@record
class Engine:
    """One engine client: its config, the recipe's `engine-args`, and where to say what it does."""
    config: EngineConfig
    engine_args: tuple[str, ...] = ()
    ui: UI | None = field(default=None, compare=False)

    @property
    def name(self) -> str:
        return self.config.name

    def argv(self, *args: str) -> list[str]:
        return [self.config.name, *self.engine_args, *args]

    def query(self, *args: str, timeout: float | None = QUERY_TIMEOUT, check: bool = False) -> Completed:
        return run(self.argv(*args), capture=True, check=check, timeout=timeout)

    def say(self, message: str, *, warn: bool = False) -> None:
        if self.ui is not None:
            (self.ui.warn if warn else self.ui.info)(message)

    # ---- checks ----------------------------------------------------------------------------------------

    def check(self) -> bool:
        """The engine is installed and answers; whether it is rootless."""
        name = self.config.name
        try:
            r = self.query("info", "--format", self.config.rootless_format)
        except CommandTimeout as exc:
            raise EngineNotRunning(f"{name} is installed but its engine does not answer: {exc}",
                                   hint=self.config.service_hint) from None
        if not r.started:
            raise EngineNotFound(f"target.runtime = {name!r}, but {name} is not installed (not on PATH)",
                                 hint=f"install {name}, or set [target] runtime to another engine or \"host\"")
        if r.returncode != 0:
            why = (r.stderr or r.stdout).strip().splitlines()
            raise EngineNotRunning(f"{name} is installed but its engine does not answer: `{name} info` failed "
                                   f"(exit {r.returncode}): {why[-1] if why else ''}", hint=self.config.service_hint)
        return "true" in r.stdout.lower() or "rootless" in r.stdout

    def inspect_image(self, ref: str) -> Image | None:
        r = self.query("image", "inspect", "--format", "{{.Id}}|{{json .RepoDigests}}", ref)
        if r.returncode != 0:
            return None
        image_id, _, digests = r.stdout.strip().partition("|")
        return Image(ref, image_id, tuple(json.loads(digests) or ()) if digests.strip() else ())

    def image(self, name: str, *, pinned: str = "", key: str = "target.image") -> Image:
        """The image `name`, pulled when the engine does not have it. `pinned` (repo@sha256:... or an image
        id) names the exact image to start instead, when the engine has that one. `key`: the recipe key that
        names the image (target.image, or target.base: pinned by digest), as an error names it."""
        if pinned:
            exact = self.inspect_image(pinned)
            if exact is not None:
                return replace(exact, name=name, ref=pinned)
        found = self.inspect_image(name)
        if found is None:
            self.say(f"{name} is not in {self.name}: pulling it")
            r = run(self.argv("pull", name), capture=True, check=False)
            found = self.inspect_image(name) if r.returncode == 0 else None
            if found is None:
                why = (r.stderr or r.stdout).strip().splitlines() or [f"exit {r.returncode}"]
                what = "name and digest" if key == "target.base" else "name and tag"
                raise ImageNotFound(
                    f"{key}: {name!r} is not in {self.name} and cannot be pulled: {why[-1]}",
                    hint=f"check the {what} in [target] {key.rsplit('.', maxsplit=1)[-1]}; `{self.name} images` lists local "
                         f"images; pull or load it first (`{self.name} pull IMAGE`, "
                         f"`{self.name} load -i FILE`); for a private registry `{self.name} login` first")
        return found

    # ---- commands in a container --------------------------------------------------------------------------

    def exec_argv(self, container: str, argv: Sequence[str], *, env: Mapping[str, str | None] | None = None,
                  cwd: str | None = None, user: str = "", pidfile: str = "") -> tuple[list[str], dict[str, str]]:
        """`ENGINE exec ... container argv`, and what the engine's own environment must add: the values of
        the `-e NAME` flags (None in `env` unsets). With `pidfile`, the process writes its id there first
        (see KILL_PIDFILE)."""
        flags, engine_env, unset = ["exec"], {}, []
        if cwd:
            flags += ["--workdir", cwd]
        if user:
            flags += ["--user", user]
        for k, v in (env or {}).items():
            if v is None:
                unset += ["-u", k]
            elif _engine_reads(k) and not is_secret(k):
                flags += ["-e", f"{k}={v}"]
            else:
                flags += ["-e", k]
                engine_env[k] = v
        inner = (["env", *unset] if unset else []) + list(argv)
        if pidfile:
            inner = ["sh", "-c", 'echo $$ >"$0" && exec "$@"', pidfile, *inner]
        return self.argv(*flags, container, *inner), engine_env

    # ---- containers ------------------------------------------------------------------------------------

    @contextlib.contextmanager
    def started(self, role: str, image: Image, mounts: Sequence[Mount] = (),
                run_args: Sequence[str] = ()) -> Iterator[Container]:
        """A fresh labelled container from `image` that sleeps until removed at the end."""
        container = self.start(role, image, mounts, run_args)
        try:
            yield container
        finally:
            self.remove(container.id)

    @contextlib.contextmanager
    def borrowed(self, name: str) -> Iterator[Container]:
        """The running container `name`, for this process alone (a lock per container); at the end what was
        brought into it under /toolchain is gone and it keeps running."""
        container = self._attach(name)
        with file_lock(Path(tempfile.gettempdir()) / f"toolchain-{self.name}-{container.id[:12]}.lock"):
            try:
                container.call(["sh", "-c", 'mkdir -p "$0" && chmod 1777 "$0"', PIDS], user="0", capture=True)
                yield container
            finally:
                with NoSigint():
                    container.call(["sh", "-c", 'rm -rf "$1"; rmdir "$0" 2>/dev/null; true', ROOT, PIDS],
                                   user="0", capture=True, check=False)

    def remove(self, name: str, *, quiet: bool = False) -> None:
        if os.environ.get(KEEP_ENV) == "1" and not quiet:
            self.say(warn=True, message=f"keeping container {name} ({KEEP_ENV}=1); remove it with: "
                     f"{shlex.join(self.argv(*self.config.remove_args, name))}")
            return
        with NoSigint():
            self.query(*self.config.remove_args, name)

    def start(self, role: str, image: Image, mounts: Sequence[Mount] = (), run_args: Sequence[str] = ()) -> Container:
        """A fresh labelled container from `image` that sleeps until `remove()` (prefer `started()`)."""
        self.reap_orphans()
        name = f"toolchain-{role}-{uuid.uuid4().hex[:12]}"
        labels = ["--label", f"{LABEL}=1", "--label", f"{LABEL}.pid={os.getpid()}", "--label", f"{LABEL}.role={role}"]
        if os.environ.get(KEEP_ENV) != "1":  # (one kept on purpose is not an orphan to remove)
            labels += ["--label", f"{OWNER}={owner_token()}"]
        argv = ["run", "--detach", "--name", name, *labels, *self.config.create_args]
        for m in mounts:
            if "," in m.source or "," in m.destination:
                raise ContainerError(f"cannot mount {m.source}: the path contains a comma",
                                     hint="use a cache/output directory whose path has no comma")
            argv += ["--mount", f"type=bind,source={m.source},destination={m.destination}"
                     + (",readonly" if m.readonly else "")]
        argv += [*run_args, "--entrypoint", "sleep", image.start_ref, "infinity"]
        try:
            r = self.query(*argv, timeout=None)
        except BaseException:
            self.remove(name, quiet=True)
            raise
        if r.returncode != 0:
            self.remove(name, quiet=True)
            said = (r.stderr or r.stdout).strip()
            cause, fix = start_failure(self.name, said, self.argv(*argv))
            raise StartFailed(f"{self.name} could not start a container from {image.start_ref}: {said[-1000:]}",
                              cause=cause, hint=fix)
        return Container(self, name, image, owned=True)

    def reap_orphans(self) -> list[str]:
        """Remove the containers a tool killed with SIGKILL left running (their owner label names a process of
        this boot that has ended; a tool on another machine sharing the engine is never taken for one), once
        per engine in a process, before it starts one of its own. Returns their ids."""
        where = (self.name, os.environ.get("CONTAINER_HOST", "") + os.environ.get("DOCKER_HOST", ""))
        with _REAP_LOCK:
            if where in _REAPED:
                return []
            _REAPED.add(where)
        r = self.query("ps", "-a", "--filter", f"label={OWNER}", "--format", self.config.owner_format)
        rows = [line.split() for line in r.stdout.splitlines()] if r.returncode == 0 else []
        orphans = [row[0] for row in rows if len(row) == 2 and owner_gone(row[1])]
        if orphans:
            self.query(*self.config.remove_args, *orphans)  # (one engine call for all of them)
            self.say(f"removed {len(orphans)} {self.name} container(s) left by a toolchain run that was killed")
        return orphans

    def _attach(self, name: str) -> Container:
        r = self.query("container", "inspect", "--format", "{{.Id}}|{{.State.Running}}|{{.Image}}|{{.Config.Image}}",
                       name)
        if r.returncode != 0:
            raise ContainerNotRunning(f"target.container: there is no {self.name} container {name!r}",
                                      hint=f"start it first (`{self.name} run -d --name {name} IMAGE ...`), or fix "
                                           f"[target] container; `{self.name} ps -a` lists containers")
        cid, running, image_id, image_name = r.stdout.strip().split("|", 3)
        if running != "true":
            raise ContainerNotRunning(f"target.container: {self.name} container {name!r} exists but is not running",
                                      hint=f"start it: `{self.name} start {name}`")
        found = self.inspect_image(image_id)
        image = Image(image_name, found.id if found else image_id, found.repo_digests if found else ())
        return Container(self, cid, image, owned=False)


@record
class Container:
    """One container: the tool's own (`owned`, removed at the end) or a borrowed running one."""
    engine: Engine
    id: str          # the name or id the engine knows it by
    image: Image
    owned: bool

    def call(self, argv: Sequence[str], *, env: Mapping[str, str | None] | None = None, cwd: str | None = None,
             log: Path | None = None, capture: bool = False, check: bool = True, timeout: float | None = None,
             verbose: bool = False, user: str = "") -> Completed:
        """Run `argv` in the container (`user` "0": housekeeping as root). In a borrowed container the
        command stays killable: on Ctrl-C or a timeout it is killed there too."""
        pidfile = "" if self.owned or user else f"{PIDS}/{uuid.uuid4().hex}"
        full, engine_env = self.engine.exec_argv(self.id, argv, env=env, cwd=cwd, user=user, pidfile=pidfile)
        try:
            done = run(full, env=merge_env(os.environ, engine_env), log=log, capture=capture, check=check,
                       timeout=timeout, verbose=verbose)
            return _missing_program_is_127(done)
        except BaseException as exc:
            if pidfile and (isinstance(exc, CommandTimeout) or not isinstance(exc, CommandFailed)):
                with NoSigint():
                    self.signal_pidfile(pidfile, "KILL", remove=True)
            raise

    def signal_pidfile(self, pidfile: str, sig: str, *, remove: bool = False) -> Completed:
        """Send `sig` (a name: INT, TERM, KILL) to what wrote `pidfile` (see KILL_PIDFILE)."""
        script = KILL_PIDFILE + ('; rm -f "$0"' if remove else "")
        return self.engine.query("exec", "--user", "0", self.id, "sh", "-c", script, pidfile, sig)

    def environment(self) -> dict[str, str]:
        out = self.call(["env", "-0"], capture=True).stdout
        return dict(item.split("=", 1) for item in out.split("\0") if "=" in item)

    def user(self) -> str:
        """`uid:gid` that commands run as."""
        return self.call(["sh", "-c", 'echo "$(id -u):$(id -g)"'], capture=True).stdout.strip()

    def copy_into(self, host: Path | str, inside: str) -> None:
        self.engine.query("cp", str(host), f"{self.id}:{inside}", check=True, timeout=None)

    def copy_out(self, inside: str, host: Path) -> None:
        """The contents of directory `inside` into `host`, owned by the invoking user (the sudo caller)."""
        self.engine.query("cp", f"{self.id}:{inside}/.", f"{host}/", check=True, timeout=None)
        give_to_invoking_user(host)


# podman applies default ulimits (containers.conf [containers] default_ulimits) that a host without systemd (a
# container, a CI runner, WSL) may not let it raise: runc then fails with "error setting rlimit type N"
RLIMIT_SETTING = ("`[containers] default_ulimits = []` (on a host without systemd also `[engine] runtime = \"runc\"` "
                  "and `cgroup_manager = \"cgroupfs\"`)")


def rlimit_fix() -> str:
    """The fix for podman's default ulimits, naming the containers.conf files this user's podman reads."""
    named = os.environ.get("CONTAINERS_CONF", "")
    where = (f"in {named} (the file CONTAINERS_CONF names)" if named else
             "in /etc/containers/containers.conf (every user) or ~/.config/containers/containers.conf (yours), "
             "or in a file of your own that CONTAINERS_CONF points at")
    return f"set {RLIMIT_SETTING} {where}, as the README's Troubleshooting says"


def start_failure(engine: str, said: str, argv: Sequence[str]) -> tuple[str, str]:
    """(cause, fix) of an engine's failure to start a container, from what it said: the engine's own
    configuration (podman's default ulimits) or else the recipe's run-args / engine-args."""
    lines = said.strip().splitlines()
    last = lines[-1] if lines else "no message"
    if engine == "podman" and "rlimit" in said:
        return (f"podman's default ulimits cannot be applied here ({last[-300:]})", rlimit_fix())
    return last[-300:], "check [target] run-args and engine-args; the command was: " + shlex.join(argv)


def _missing_program_is_127(done: Completed) -> Completed:
    """A program missing in the container is exit 127 with the reason in stderr, as on the host and in podman:
    docker's exec answers 126 ("OCI runtime exec failed: ... executable file not found"), on stdout."""
    said = done.stderr + done.stdout
    if done.returncode == 126 and "executable file not found" in said:
        return replace(done, returncode=127, stderr=said, started=False)
    return done


def _engine_reads(name: str) -> bool:
    return name in ENGINE_READS or name.startswith(ENGINE_READS_PREFIXES)
