"""Smoke in the lock's container: `ContainerTarget`, the `install.Target` of a podman or docker lock.

- image mode (`[target] image`): ONE serving container from the locked image (by its recorded digest when
  that image is here), started with the recipe's `run-args` and the host's network (so the server's
  127.0.0.1:PORT is this machine's), labelled `toolchain=1` like every container the tool starts. The
  lock's wheels are mounted read-only at /toolchain/wheels. The container is removed at the end (success,
  failure, Ctrl-C) unless TOOLCHAIN_KEEP_CONTAINERS=1.
- exec mode (`[target] container`): the running container; the wheels are copied in, and at the end what
  was brought in (under /toolchain) is removed and the server killed. The container keeps running.

The wheels go into a venv made with --system-site-packages (and a .pth when the image's interpreter is a
venv itself), so the image's torch stays and the image is left as it was. The server is exec'd in the
container with the smoke environment: the container's own environment (never setvars.sh) with its oneAPI
traces removed, plus the run's variables, passed as `-e NAME` (values in the engine's environment). An
engine does not pass signals from `ENGINE exec` on, so the server runs under `supervise()`, a small host
process that forwards SIGINT/SIGTERM into the container.

Built on the public API of toolchain.target.container: `Engine.started()` for the serving container,
`Engine.borrowed()` for a running one, `Container.call()` for every command in it.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import sys
import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from toolchain.console import UI
from toolchain.core import toml as tomlio
from toolchain.core.devices import VENDOR_INTEL
from toolchain.core.proc import CommandTimeout, Completed, merge_env, run
from toolchain.errors import UsageError
from toolchain.lock import Lock
from toolchain.recipe.load import TargetSpec
from toolchain.smoke import devices
from toolchain.target.container import (
    ENGINES,
    KILL_PIDFILE,
    PIDS,
    ROOT,
    Container,
    Engine,
    Image,
    Mount,
    NoSigint,
    image_repo,
)

WHEELS = f"{ROOT}/wheels"
SMOKE_DIR = f"{ROOT}/smoke"
VENV = f"{SMOKE_DIR}/venv"
PKG_ROOT = str(Path(__file__).resolve().parents[2])  # the directory holding this `toolchain` package
# Host variables that reach the container's pip / server when set here (a host target inherits them all).
PROXIES = ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy")
PIP_FROM_HOST = PROXIES + ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_NO_INDEX", "PIP_TRUSTED_HOST",
                           "PIP_DEFAULT_TIMEOUT")
SERVE_FROM_HOST = PROXIES + ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_ENDPOINT", "HF_HUB_OFFLINE",
                             "TRANSFORMERS_OFFLINE")
# Shell start-up files a variable can make every shell read (an image may point them at setvars.sh).
SHELL_STARTUP = ("BASH_ENV", "ENV")
TERM_GRACE = 3.0  # supervise(): after forwarding SIGTERM, how long before SIGKILL
NETWORK_FLAGS = ("--network", "--net")

# Make a venv that sees the image's packages; pip comes from the image (no ensurepip needed).
VENV_SCRIPT = r"""
import os, site, subprocess, sys, venv
path = sys.argv[1]
venv.EnvBuilder(system_site_packages=True, clear=True, symlinks=True, with_pip=False).create(path)
if sys.prefix != sys.base_prefix:  # the image's interpreter is a venv: its site-packages stay visible too
    lib = os.path.join(path, "lib", "python%d.%d" % sys.version_info[:2], "site-packages")
    with open(os.path.join(lib, "_toolchain_image_site.pth"), "w") as f:
        f.write("\n".join(p for p in site.getsitepackages() if os.path.isdir(p)) + "\n")
python = os.path.join(path, "bin", "python")
if subprocess.run([python, "-m", "pip", "--version"]).returncode != 0:
    subprocess.run([python, "-m", "ensurepip", "--default-pip"], check=True)
"""
# One line per DRM card: node|vendor|device|PCI slot|visible (its /dev/dri node exists in the container).
CARDS_SCRIPT = r"""
for d in /sys/class/drm/card*; do
  n=${d##*/}; case $n in *-*) continue;; esac; [ -e "$d/device" ] || continue
  v=0; [ -e "/dev/dri/$n" ] && v=1
  echo "$n|$(cat "$d/device/vendor" 2>/dev/null)|$(cat "$d/device/device" 2>/dev/null)|$(basename "$(readlink -f "$d/device")")|$v"
done
"""
BOOT = ("import sys; sys.path.insert(0, sys.argv.pop(1)); "
        "from toolchain.smoke.container_target import supervise; sys.exit(supervise(sys.argv[1:]))")


def spec_from_lock(lock: Lock, python: str = "") -> TargetSpec:
    """The lock's target plus the recipe's run-args and engine-args (kept in the lock's recipe text). Exec
    mode names the container as the recipe did (the lock records its id)."""
    t = lock.target
    recipe = tomlio.loads(lock.recipe_text).get("target", {}) if lock.recipe_text.strip() else {}
    container = str(recipe.get("container") or t.container)
    if not t.image and not container:
        raise UsageError(f"{lock.path}: [target] runtime is {t.runtime!r} but the lock names neither an image "
                         f"nor a container", hint="rebuild the lock, or serve with --no-install --python PATH")
    return TargetSpec(runtime=t.runtime, python=python or t.python, image="" if container else t.image,
                      container=container,
                      run_args=tuple(str(a) for a in recipe.get("run-args", ())),
                      engine_args=tuple(str(a) for a in recipe.get("engine-args", ())))


def host_network_args(run_args: Sequence[str]) -> tuple[list[str], str]:
    """run-args with the network set to the host's; also the network they named instead ("" if none)."""
    out, replaced, skip = [], "", False
    for i, arg in enumerate(run_args):
        if skip:
            skip = False
            continue
        flag, eq, value = arg.partition("=")
        if flag in NETWORK_FLAGS:
            if not eq:
                value, skip = (run_args[i + 1] if i + 1 < len(run_args) else ""), True
            replaced = "" if value == "host" else value
            continue
        out.append(arg)
    return out + ["--network=host"], replaced


def pinned_image(image: str, digest: str) -> str:
    """The reference that names exactly the locked image: repo@sha256:... or the local image id."""
    if digest.startswith("id:sha256:"):
        return digest[len("id:sha256:"):]
    if digest.startswith("sha256:"):
        return f"{image_repo(image)}@{digest}"
    return ""


class ContainerTarget:
    """Where smoke installs and serves for a podman/docker lock (an `install.Target`): one serving container,
    started (image mode) or borrowed (exec mode) by `serving(port)`, that `run()` and `launch()` use."""

    def __init__(self, spec: TargetSpec, *, locked_digest: str = "", wheels: Path | None = None,
                 venv: bool = True, ui: UI | None = None) -> None:
        run_args, self.replaced_network = ([], "") if spec.container else host_network_args(spec.run_args)
        self.spec = replace(spec, run_args=tuple(run_args))
        self.kind = spec.runtime
        self.engine = Engine(ENGINES[spec.runtime], tuple(spec.engine_args), ui)
        self.locked_digest = locked_digest
        self.wheels = wheels
        self.venv = VENV if venv else ""
        self.python = f"{VENV}/bin/python" if venv else spec.python
        self.notes: list[str] = []
        self._container: Container | None = None
        self._cenv: dict[str, str] = {}

    @property
    def container(self) -> str:
        return self._container.id if self._container is not None else ""

    @property
    def name(self) -> str:
        if self.spec.container:
            return f"{self.kind} container {self.spec.container}"
        return f"{self.kind} container {self.container or '(not started)'}"

    # ---- lifecycle -----------------------------------------------------------------------------------

    @contextlib.contextmanager
    def serving(self, port: int) -> Iterator[ContainerTarget]:
        """Engine and image (or container) checked, the serving container started and prepared; at the end
        servers left running are killed and the container removed (exec mode: /toolchain removed)."""
        stack = contextlib.ExitStack()
        try:
            self.engine.check()
            container = self._open(stack, port)
            self._container = container
            stack.callback(self._kill_servers, container)
            container.call(["sh", "-c", 'mkdir -p "$0" "$1" && chmod 1777 "$1"', SMOKE_DIR, PIDS], user="0",
                           capture=True)
            container.call(["chown", container.user(), SMOKE_DIR], user="0", capture=True)
            if self.wheels and not container.owned:  # a started container has them mounted
                container.call(["rm", "-rf", WHEELS], user="0", capture=True)
                container.copy_into(self.wheels, WHEELS)
            self._cenv = container.environment()
            yield self
        finally:
            with NoSigint():
                stack.close()

    def _open(self, stack: contextlib.ExitStack, port: int) -> Container:
        """The serving container: the running one the lock names, or one started from the locked image."""
        if self.spec.container:
            container = stack.enter_context(self.engine.borrowed(self.spec.container))
            self._note_digest(container.image)
            self._check_network(port)
            stack.callback(container.call, ["rm", "-rf", SMOKE_DIR, WHEELS], user="0", capture=True, check=False)
            return container
        image = self.engine.image(self.spec.image, pinned=pinned_image(self.spec.image, self.locked_digest))
        self._note_digest(image)
        if self.replaced_network:
            self.engine.say(warn=True, message=f"target.run-args: serving on the host's network instead of "
                                               f"{self.replaced_network!r} (smoke talks to the server on this machine)")
        mounts = [Mount(str(self.wheels), WHEELS, readonly=True)] if self.wheels else []
        return stack.enter_context(self.engine.started("smoke", image, mounts, self.spec.run_args))

    def _serving(self) -> Container:
        if self._container is None:
            raise RuntimeError("ContainerTarget used outside `serving()`")
        return self._container

    def _note_digest(self, image: Image) -> None:
        if self.locked_digest and image.digest != self.locked_digest:
            self.notes.append(f"the lock was built in image {self.locked_digest}; serving from "
                              f"{image.name or self.spec.image} {image.digest}")
            self.engine.say(warn=True, message=self.notes[-1])

    def _kill_servers(self, container: Container) -> None:
        """Servers whose supervisor did not get to stop them (it was killed)."""
        container.call(["sh", "-c", 'k=$1; for f in "$0"/serve-*; do [ -f "$f" ] && sh -c "$k" "$f" '
                        'KILL; rm -f "$f"; done; true', PIDS, KILL_PIDFILE],
                       user="0", capture=True, check=False, timeout=60)

    def current_digest(self) -> str:
        return self._container.image.digest if self._container is not None else ""

    def to_dict(self) -> dict[str, Any]:
        image = self._container.image if self._container is not None else None
        return {"runtime": self.kind, "mode": "container" if self.spec.container else "image", "name": self.name,
                "container": self.container, "image": image.name if image else self.spec.image,
                "image_ref": image.start_ref if image else self.spec.image,
                "image_digest": image.digest if image and image.id else "",
                "locked_image_digest": self.locked_digest, "python": self.python, "notes": list(self.notes)}

    def _check_network(self, port: int) -> None:
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

    # ---- install.Target ---------------------------------------------------------------------------------

    def run(self, argv: Sequence[str], *, env: Mapping[str, str | None] | None = None, cwd: str | None = None,
            log: Path | None = None, capture: bool = False, check: bool = True, timeout: float | None = None,
            verbose: bool = False) -> Completed:
        """In the serving container, with the container's environment (plus pip settings from here)."""
        full = {"PIP_DISABLE_PIP_VERSION_CHECK": "1", **_from_host(PIP_FROM_HOST), **(env or {})}
        return self._serving().call(argv, env=full, cwd=cwd, log=log, capture=capture, check=check, timeout=timeout,
                                    verbose=verbose)

    def make_venv(self, base_python: str, log: Path) -> ContainerTarget:
        self.run([base_python, "-c", VENV_SCRIPT, self.venv], log=log, timeout=600)
        return self

    def visible_path(self, host_path: Path) -> str:
        if self.wheels is not None:
            wheels = Path(self.wheels)
            if host_path == wheels or wheels in host_path.parents:
                return str(Path(WHEELS) / host_path.relative_to(wheels))
        return str(host_path)

    def serve_env(self) -> dict[str, str | None]:
        """The container's environment replaces this process's (None removes a host variable)."""
        env: dict[str, str | None] = {k: None for k in os.environ if k not in self._cenv}
        env.update(self._cenv)
        env.update(_from_host(SERVE_FROM_HOST))
        for name in SHELL_STARTUP:
            if any(w in (env.get(name) or "").lower() for w in ("setvars", "oneapi")):
                env[name] = None
        if self.venv:
            env.update(VIRTUAL_ENV=self.venv, PATH=f"{self.venv}/bin:" + self._cenv.get("PATH", "/usr/bin:/bin"))
        return env

    def launch(self, argv: Sequence[str], env: Mapping[str, str]) -> tuple[list[str], dict[str, str]]:
        """`env` is the server's complete environment: what differs from the container's goes in as -e NAME,
        what it lacks is unset. The command runs under `supervise()`."""
        changes: dict[str, str | None] = {k: v for k, v in env.items() if self._cenv.get(k) != v}
        changes.update({k: None for k in self._cenv if k not in env})
        container = self._serving()
        pidfile = f"{PIDS}/serve-{uuid.uuid4().hex}"
        exec_argv, engine_env = self.engine.exec_argv(container.id, argv, env=changes, pidfile=pidfile)
        where = {"engine": self.engine.argv(), "container": container.id, "pidfile": pidfile}
        return [sys.executable, "-c", BOOT, PKG_ROOT, json.dumps(where), *exec_argv], \
            merge_env(os.environ, engine_env)

    # ---- devices -----------------------------------------------------------------------------------------

    def device_check(self, device: str, tp: int, mask: str) -> devices.DeviceCheck:
        """The cards as the container sees them: Intel GPUs in sysfs whose /dev/dri node is there."""
        out = self._serving().call(["sh", "-c", CARDS_SCRIPT], capture=True).stdout
        by_slot: dict[str, devices.Card] = {}
        hidden = 0
        for line in out.splitlines():
            node, vendor, pci_id, slot, visible = (line.split("|") + [""] * 5)[:5]
            try:
                if int(vendor, 16) != VENDOR_INTEL:
                    continue
                card = devices.Card(node, int(pci_id, 16), slot)
            except ValueError:
                continue
            if visible == "1":
                by_slot.setdefault(slot or node, card)
            else:
                hidden += 1
        check = devices.check(device, tp, mask, [by_slot[k] for k in sorted(by_slot)])
        if check.ok:
            return check
        dri = (f"recreate {self.spec.container} with --device=/dev/dri" if self.spec.container
               else "add \"--device=/dev/dri\" to [target] run-args")
        if not by_slot:
            seen = f"; the machine has {hidden}, but none is in the container's /dev/dri" if hidden else ""
            raise devices.DeviceMismatch(f"in the {self.name}: --device {device} needs {check.cards_needed} "
                                         f"{devices.profile(device).product} card(s), but the container sees no "
                                         f"Intel GPU (/sys/class/drm and /dev/dri there){seen}",
                                         hint=f"{dri}, or pass --skip-device-check to run without cards")
        raise devices.DeviceMismatch(f"in the {self.name}: {check.message}",
                                     hint="pick the --device and tensor-parallel-size that match the cards, or "
                                          "pass --skip-device-check")


def _from_host(names: Sequence[str]) -> dict[str, str]:
    return {k: os.environ[k] for k in names if k in os.environ}


def supervise(args: Sequence[str]) -> int:
    """The host side of a server in a container: `[WHERE_JSON, *ENGINE_EXEC_ARGV]`, WHERE naming the engine
    argv, the container and the pidfile the server writes. Runs the exec in a session of its own (its output
    goes on to this process's) and passes SIGINT/SIGTERM/SIGHUP on to the process in the container (the
    engine client would leave it running); SIGTERM is followed by SIGKILL after TERM_GRACE. Exits with the
    server's exit code."""
    where, argv = json.loads(args[0]), list(args[1:])
    as_root = [*where["engine"], "exec", "--user", "0", where["container"]]
    received: queue.SimpleQueue[int | None] = queue.SimpleQueue()  # put() may be called from a signal handler
    forwarder = threading.Thread(target=_forward, args=(received, as_root, where["pidfile"]), daemon=True)
    forwarder.start()
    stops = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    for sig in stops:
        signal.signal(sig, lambda signum, _frame: received.put(signum))
    try:
        code = run(argv, check=False, verbose=True, new_session=True).returncode
    finally:
        for sig in stops:  # a late stop request: the server is gone
            signal.signal(sig, signal.SIG_IGN)
        received.put(None)
        forwarder.join(timeout=TERM_GRACE + 60)
        _quiet([*as_root, "rm", "-f", where["pidfile"]])
    return 128 - code if code < 0 else code


def _forward(received: queue.SimpleQueue[int | None], as_root: list[str], pidfile: str) -> None:
    """Signals received, sent on to the server in the container (None: stop); after SIGTERM, SIGKILL."""
    force_at: float | None = None
    while True:
        try:
            wait = None if force_at is None else max(0.0, force_at - time.monotonic())
            signum = received.get(timeout=wait)
        except queue.Empty:
            _quiet([*as_root, "sh", "-c", KILL_PIDFILE, pidfile, "KILL"])
            force_at = None
            continue
        if signum is None:
            return
        _quiet([*as_root, "sh", "-c", KILL_PIDFILE, pidfile, signal.Signals(signum).name[3:]])
        if signum == signal.SIGTERM and force_at is None:
            force_at = time.monotonic() + TERM_GRACE


def _quiet(argv: Sequence[str]) -> None:
    try:
        run(argv, capture=True, check=False, timeout=60)
    except CommandTimeout:
        pass
