"""Builds inside the target container: podman and docker, differing only in a frozen `EngineConfig`.

Two modes (recipe `[target]`):
- `image`: a fresh container per build (per `workspace()`), with the source tree, the output directory and
  the dependency trees mounted at fixed paths (`/toolchain/src`, `/toolchain/out`, `/toolchain/deps/NAME`),
  so a build does not depend on where the host keeps them. One-off commands (probe, setvars) run in a
  second container that lives as long as the runtime. Every container the tool starts carries the label
  `toolchain=1` (and `toolchain.pid=<pid>`) and is removed on success, failure and Ctrl-C, unless
  TOOLCHAIN_KEEP_CONTAINERS=1.
- `container`: exec into a running container; sources are copied in and wheels out, the container is left
  running and what was copied in (under `/toolchain`) is removed again.

Environment values reach the container as `-e NAME` with the value in the engine's own environment, never
on its command line (secrets). The image is recorded by digest: `sha256:...` is a registry (repo) digest,
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
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from toolchain.core.fs import file_lock, invoking_user
from toolchain.core.proc import CommandFailed, Completed, merge_env, run
from toolchain.core.redact import is_secret
from toolchain.errors import BuildError, ToolError
from toolchain.recipe.load import TargetSpec
from toolchain.target.base import PROBE, Workspace, target_info
from toolchain.target.facts import TargetInfo

ROOT = "/toolchain"
SRC, OUT, DEPS, SETVARS, PIDS = (f"{ROOT}/src", f"{ROOT}/out", f"{ROOT}/deps", f"{ROOT}/setvars", f"{ROOT}/run")
KEEP_ENV = "TOOLCHAIN_KEEP_CONTAINERS"
LABEL = "toolchain"
QUERY_TIMEOUT = 120.0
# safe.directory: the checkouts belong to the host user, not necessarily to the container's user.
GIT_SAFE = {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "safe.directory", "GIT_CONFIG_VALUE_0": "*"}
# Variables the engine client itself reads: their build values must not become the engine's own, so they
# are passed as NAME=VALUE (none of them is a secret by name).
ENGINE_READS = {"PATH", "HOME", "TMPDIR", "TZ", "REGISTRY_AUTH_FILE", "CONTAINER_HOST", "CONTAINER_CONNECTION",
                "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "no_proxy"}
ENGINE_READS_PREFIXES = ("LD_", "XDG_", "CONTAINERS_", "DOCKER_", "PODMAN_", "BUILDAH_", "GO", "SSL_")
# `sh -c KILL_PIDFILE PIDFILE SIGNAL`: send SIGNAL to the process group (else the process) whose id an
# `exec_argv(pidfile=...)` command wrote to PIDFILE.
KILL_PIDFILE = 'p=$(cat "$0" 2>/dev/null) && { kill -"$1" -- "-$p" 2>/dev/null || kill -"$1" "$p"; }'


@dataclass(frozen=True)
class EngineConfig:
    name: str
    create_args: tuple[str, ...] = ()
    remove_args: tuple[str, ...] = ("rm", "--force")
    rootless_format: str = ""  # `info --format`: prints "true" or a list naming "rootless" when rootless
    service_hint: str = ""


ENGINES = {
    "podman": EngineConfig("podman", create_args=("--security-opt", "label=disable"),
                           remove_args=("rm", "--force", "--time", "0"),
                           rootless_format="{{.Host.Security.Rootless}}",
                           service_hint="run `podman info` to see why; check its configuration (CONTAINERS_CONF, "
                                        "storage.conf) and, for a remote engine, CONTAINER_HOST"),
    "docker": EngineConfig("docker", create_args=("--security-opt", "label=disable"),
                           rootless_format="{{json .SecurityOptions}}",
                           service_hint="start the daemon (`sudo systemctl start docker`), check DOCKER_HOST/"
                                        "`docker context ls`, and that you may use /var/run/docker.sock "
                                        "(group docker)"),
}


class ContainerError(ToolError):
    """A container engine problem."""


class EngineNotFound(ContainerError):
    pass


class EngineNotRunning(ContainerError):
    pass


class ImageNotFound(ContainerError):
    return_code = 2


class ContainerNotRunning(ContainerError):
    return_code = 2


class InterpreterMissing(ContainerError):
    return_code = 2


def _engine_reads(name: str) -> bool:
    return name in ENGINE_READS or name.startswith(ENGINE_READS_PREFIXES)


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


class _NoSigint:
    """Cleanup must finish even when Ctrl-C comes again: SIGINT is ignored meanwhile (the engine commands
    started here inherit that)."""

    def __enter__(self):
        self.old = None
        if threading.current_thread() is threading.main_thread():
            self.old = signal.signal(signal.SIGINT, signal.SIG_IGN)

    def __exit__(self, *exc):
        if self.old is not None:
            signal.signal(signal.SIGINT, self.old)


class ContainerRuntime:
    """A `HostRuntime` look-alike that runs everything inside a podman or docker container."""

    def __init__(self, spec: TargetSpec, ui=None, config: EngineConfig | None = None) -> None:
        self.spec = spec
        self.kind = spec.runtime
        self.config = config or ENGINES[spec.runtime]
        self.ui = ui
        self.exec_mode = bool(spec.container)
        self._oneoff = ""           # fresh mode: container for one-off commands
        self._setvars: dict[str, str] = {}  # host directory -> in-container directory
        self._rootless = False
        self._container_id = ""
        self._image = spec.image
        self._image_ref = ""        # what the container runs: image name or id
        self._image_id = ""
        self._repo_digests: tuple[str, ...] = ()
        self._base_env: dict[str, str] | None = None
        self._stack: contextlib.ExitStack | None = None

    # ---- engine plumbing --------------------------------------------------------------------------

    def _argv(self, *args: str) -> list[str]:
        return [self.config.name, *self.spec.engine_args, *args]

    def _query(self, *args: str, timeout: float | None = QUERY_TIMEOUT, check: bool = False) -> Completed:
        return run(self._argv(*args), capture=True, check=check, timeout=timeout)

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
        return self._argv(*flags, container, *inner), engine_env

    def _exec(self, container: str, argv: Sequence[str], *, env: Mapping[str, str | None] | None = None,
              cwd: str | None = None, log: Path | None = None, capture: bool = False, check: bool = True,
              timeout: float | None = None, verbose: bool = False, user: str = "") -> Completed:
        pidfile = ""
        if self.exec_mode and not user:  # someone else's container: keep the process killable on Ctrl-C
                                          # (housekeeping runs as user 0, unwrapped)
            pidfile = f"{PIDS}/{uuid.uuid4().hex}"
        full, engine_env = self.exec_argv(container, argv, env=env, cwd=cwd, user=user, pidfile=pidfile)
        try:
            return run(full, env=merge_env(os.environ, engine_env), cwd=None,
                       log=log, capture=capture, check=check, timeout=timeout, verbose=verbose)
        except BaseException as exc:
            if pidfile and not isinstance(exc, CommandFailed):
                with _NoSigint():
                    self._query("exec", container, "sh", "-c", KILL_PIDFILE + '; rm -f "$0"', pidfile, "KILL")
            raise

    # ---- lifecycle ----------------------------------------------------------------------------------

    def __enter__(self) -> ContainerRuntime:
        self._check_engine()
        stack = contextlib.ExitStack()
        try:
            if self.exec_mode:
                self._check_container()
                if self.spec.run_args:
                    self._say(warn=True, message=f"target.run-args {list(self.spec.run_args)} are ignored: they apply "
                                                 f"to containers the tool starts, not to {self.spec.container}")
                lock = Path(tempfile.gettempdir()) / f"toolchain-{self.kind}-{self._container_id[:12]}.lock"
                stack.enter_context(file_lock(lock))  # one builder at a time uses its /toolchain
                stack.callback(self._exec_cleanup)
                self._exec(self._container_id, ["mkdir", "-p", PIDS], user="0", capture=True)
            else:
                self._check_image()
                stack.callback(self._remove_oneoff)
        except BaseException:
            stack.close()
            raise
        self._stack = stack
        return self

    def __exit__(self, *exc) -> None:
        if self._stack is not None:
            with _NoSigint():
                self._stack.close()
            self._stack = None

    def describe(self) -> str:
        if self.exec_mode:
            return f"{self.kind} container {self.spec.container}"
        return f"{self.kind} container (image {self.spec.image})"

    def _check_engine(self) -> None:
        name = self.config.name
        try:
            r = self._query("info", "--format", self.config.rootless_format)
        except CommandFailed as exc:
            if exc.returncode == 127:
                raise EngineNotFound(f"target.runtime = {self.kind!r}, but {name} is not installed (not on PATH)",
                                     hint=f"install {name}, or set [target] runtime to another engine or \"host\"")
            raise
        except BuildError as exc:  # timed out
            raise EngineNotRunning(f"{name} is installed but its engine does not answer: {exc}",
                                   hint=self.config.service_hint) from None
        if r.returncode != 0:
            why = (r.stderr or r.stdout).strip().splitlines()
            raise EngineNotRunning(f"{name} is installed but its engine does not answer: `{name} info` failed "
                                   f"(exit {r.returncode}): {why[-1] if why else ''}", hint=self.config.service_hint)
        self._rootless = "true" in r.stdout.lower() or "rootless" in r.stdout

    def _check_image(self) -> None:
        image = self.spec.image
        if self._inspect_image(image) != 0:
            self._say(f"{image} is not in {self.config.name}: pulling it")
            r = run(self._argv("pull", image), capture=True, check=False)
            if r.returncode != 0 or self._inspect_image(image) != 0:
                why = (r.stderr or r.stdout).strip().splitlines()
                raise ImageNotFound(
                    f"target.image: {image!r} is not in {self.config.name} and cannot be pulled: "
                    f"{why[-1] if why else 'exit %d' % r.returncode}",
                    hint=f"check the name and tag in [target] image; `{self.config.name} images` lists local "
                         f"images; pull or load it first (`{self.config.name} pull IMAGE`, "
                         f"`{self.config.name} load -i FILE`); for a private registry `{self.config.name} login` first")
        self._image_ref = image

    def _inspect_image(self, ref: str) -> int:
        r = self._query("image", "inspect", "--format", "{{.Id}}|{{json .RepoDigests}}", ref)
        if r.returncode == 0:
            image_id, _, digests = r.stdout.strip().partition("|")
            self._image_id = image_id
            self._repo_digests = tuple(json.loads(digests) or ()) if digests.strip() else ()
        return r.returncode

    def _check_container(self) -> None:
        name, engine = self.spec.container, self.config.name
        r = self._query("container", "inspect", "--format", "{{.Id}}|{{.State.Running}}|{{.Image}}|{{.Config.Image}}",
                        name)
        if r.returncode != 0:
            raise ContainerNotRunning(f"target.container: there is no {engine} container {name!r}",
                                      hint=f"start it first (`{engine} run -d --name {name} IMAGE ...`), or fix "
                                           f"[target] container; `{engine} ps -a` lists containers")
        cid, running, image_id, image = r.stdout.strip().split("|", 3)
        if running != "true":
            raise ContainerNotRunning(f"target.container: {engine} container {name!r} exists but is not running",
                                      hint=f"start it: `{engine} start {name}`")
        self._container_id, self._image = cid, image
        self._inspect_image(image_id)

    def _say(self, message: str, *, warn: bool = False) -> None:
        if self.ui is not None:
            (self.ui.warn if warn else self.ui.info)(message)

    def _labels(self, role: str) -> list[str]:
        return ["--label", f"{LABEL}=1", "--label", f"{LABEL}.pid={os.getpid()}", "--label", f"{LABEL}.role={role}"]

    def _start(self, role: str, mounts: Sequence[tuple[str, str, bool]]) -> str:
        """A fresh container that sleeps until removed; its name."""
        name = f"toolchain-{role}-{uuid.uuid4().hex[:12]}"
        argv = ["run", "--detach", "--name", name, *self._labels(role), *self.config.create_args]
        for src, dst, ro in mounts:
            if "," in src or "," in dst:
                raise ContainerError(f"cannot mount {src}: the path contains a comma",
                                     hint="use a cache/output directory whose path has no comma")
            argv += ["--mount", f"type=bind,source={src},destination={dst}" + (",readonly" if ro else "")]
        argv += [*self.spec.run_args, "--entrypoint", "sleep", self._image_ref, "infinity"]
        try:
            r = self._query(*argv, timeout=None)
        except BaseException:
            self._remove(name, quiet=True)
            raise
        if r.returncode != 0:
            self._remove(name, quiet=True)
            raise ContainerError(f"{self.config.name} could not start a container from {self._image_ref}: "
                                 f"{(r.stderr or r.stdout).strip()[-1000:]}",
                                 hint="check [target] run-args and engine-args; the command was: "
                                      + shlex.join(self._argv(*argv)))
        return name

    def _remove(self, name: str, *, quiet: bool = False) -> None:
        if os.environ.get(KEEP_ENV) == "1" and not quiet:
            self._say(warn=True, message=f"keeping container {name} ({KEEP_ENV}=1); remove it with: "
                      f"{shlex.join(self._argv(*self.config.remove_args, name))}")
            return
        with _NoSigint():
            self._query(*self.config.remove_args, name)

    def _remove_oneoff(self) -> None:
        if self._oneoff:
            name, self._oneoff = self._oneoff, ""
            self._remove(name)

    def _setvars_mounts(self) -> list[tuple[str, str, bool]]:
        return [(host, inside, True) for host, inside in self._setvars.items()]

    def _target(self) -> str:
        if self.exec_mode:
            return self._container_id
        if not self._oneoff:
            self._oneoff = self._start("run", self._setvars_mounts())
        return self._oneoff

    # ---- the runtime interface ------------------------------------------------------------------------

    def base_env(self) -> dict[str, str]:
        if self._base_env is None:
            r = self.run(["env", "-0"], capture=True)
            self._base_env = dict(item.split("=", 1) for item in r.stdout.split("\0") if "=" in item)
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
            if self.exec_mode:
                self._exec(self._container_id, ["rm", "-rf", inside], user="0", capture=True)
                self._query("cp", folder, f"{self._container_id}:{inside}", check=True)
            else:
                self._remove_oneoff()  # started without the mount: the next run() starts one with it
        return f"{self._setvars[folder]}/{host.name}"

    def run(self, argv: Sequence[str], *, env: Mapping[str, str | None] | None = None, cwd: str | None = None,
            log: Path | None = None, capture: bool = False, check: bool = True, timeout: float | None = None,
            verbose: bool = False) -> Completed:
        return self._exec(self._target(), argv, env=env, cwd=cwd, log=log, capture=capture, check=check,
                          timeout=timeout, verbose=verbose)

    def identity(self) -> dict[str, object] | None:
        """Containers are probed every time (an image or a running container can change under the same name)."""
        return None

    def probe_watch(self) -> tuple[TargetInfo, list[str]]:
        return self.probe(), []

    def probe(self) -> TargetInfo:
        python, where = self.spec.python, self.describe()
        r = self.run([python, "-c", PROBE], capture=True, check=False)
        if r.returncode != 0:
            err = (r.stderr or r.stdout).strip()
            if r.returncode in (126, 127) or "executable file not found" in err:
                raise InterpreterMissing(
                    f"target.python: {python!r} is not in the {where}: {err.splitlines()[-1] if err else ''}",
                    hint=f"set [target] python to an interpreter that exists there, e.g. \"python3\" or "
                         f"\"/opt/venv/bin/python\" (look with `{self.config.name} run --rm --entrypoint sh "
                         f"{self._image_ref or self._image} -c 'command -v python3'`)")
            raise ContainerError(f"probing {python} in the {where} failed (exit {r.returncode}): {err[-500:]}",
                                 hint=f"run it by hand: {self.config.name} exec ... {python} -c 'import sys'")
        digest = image_digest(self._image, self._image_id, self._repo_digests)
        return target_info(self.kind, python, r.stdout, image=self._image, image_digest=digest,
                           container=self._container_id)

    @contextlib.contextmanager
    def workspace(self, src: Path, out: Path, deps: Mapping[str, Path]) -> Iterator[Workspace]:
        inside = {name: f"{DEPS}/{name}" for name in deps}
        if self.exec_mode:
            with self._copied(src, out, deps, inside) as name:
                yield Workspace(SRC, OUT, inside, self._runner(name))
            return
        mounts = [(str(src), SRC, False), (str(out), OUT, False)]
        mounts += [(str(path), inside[n], False) for n, path in deps.items()]
        mounts += self._setvars_mounts()
        mounts += [(alt, alt, True) for alt in _alternates([src, *deps.values()])]
        name = self._start("build", mounts)
        try:
            yield Workspace(SRC, OUT, inside, self._runner(name))
        finally:
            with _NoSigint():
                uid, gid = (0, 0) if self._rootless else invoking_user()
                self._exec(name, ["chown", "-R", f"{uid}:{gid}", SRC, OUT, *inside.values()], user="0",
                           capture=True, check=False)
                self._remove(name)

    def _runner(self, container: str):
        def runner(argv, *, env, cwd, log, verbose=False, capture=False):
            full = {**GIT_SAFE, **env} if "GIT_CONFIG_COUNT" not in env else dict(env)
            return self._exec(container, argv, env=full, cwd=cwd, log=log, verbose=verbose, capture=capture)
        return runner

    # ---- exec mode: copy in, copy out ---------------------------------------------------------------------

    @contextlib.contextmanager
    def _copied(self, src: Path, out: Path, deps: Mapping[str, Path], inside: Mapping[str, str]) -> Iterator[str]:
        cid = self._container_id
        scratch = [SRC, OUT, DEPS, f"{ROOT}/git"]
        try:
            self._exec(cid, ["sh", "-c", 'rm -rf "$0" "$@" && mkdir -p "$@"', SRC, OUT, DEPS, f"{ROOT}/git"],
                       user="0", capture=True)
            alts = {alt: f"{ROOT}/git/{i}" for i, alt in enumerate(_alternates([src, *deps.values()]))}
            for alt, there in alts.items():
                self._query("cp", alt, f"{cid}:{there}", check=True, timeout=None)
            for host, there in [(src, SRC), *((path, inside[n]) for n, path in deps.items())]:
                self._query("cp", str(host), f"{cid}:{there}", check=True, timeout=None)
                mine = _alternates([host])
                if mine:  # the copy borrows objects from the copies of the host's object directories
                    self._exec(cid, ["sh", "-c", 'printf "%s\\n" "$@" >"$0"',
                                     f"{there}/.git/objects/info/alternates", *(alts[a] for a in mine)],
                               user="0", capture=True)
            uid = self._exec(cid, ["sh", "-c", 'echo "$(id -u):$(id -g)"'], capture=True).stdout.strip()
            if uid != "0:0":  # the build runs as the container's user
                self._exec(cid, ["chown", "-R", uid, SRC, OUT, DEPS], user="0", capture=True)
            yield cid
            self._query("cp", f"{cid}:{OUT}/.", f"{out}/", check=True, timeout=None)
            _chown_tree(out)
        finally:
            with _NoSigint():
                self._exec(cid, ["rm", "-rf", *scratch], user="0", capture=True, check=False)

    def _exec_cleanup(self) -> None:
        self._exec(self._container_id, ["sh", "-c", 'rm -rf "$@"; rmdir "$0" 2>/dev/null; true', ROOT, PIDS,
                                        *self._setvars.values()], user="0", capture=True, check=False)


def _alternates(trees: Sequence[Path]) -> list[str]:
    """Object directories the (shared) checkouts borrow from, by absolute host path."""
    found: list[str] = []
    for tree in trees:
        info = Path(tree) / ".git" / "objects" / "info" / "alternates"
        if info.is_file():
            for line in info.read_text().splitlines():
                line = line.strip()
                if line and not line.startswith("#") and os.path.isabs(line) and line not in found:
                    found.append(line)
    return found


def _chown_tree(root: Path) -> None:
    """Files copied out by a root process belong to the invoking user (the sudo caller)."""
    if os.geteuid() != 0:
        return
    uid, gid = invoking_user()
    for path in [root, *root.rglob("*")]:
        os.chown(path, uid, gid, follow_symlinks=False)
