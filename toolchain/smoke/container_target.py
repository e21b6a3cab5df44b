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
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from toolchain.core import toml as tomlio
from toolchain.core.proc import Completed, merge_env
from toolchain.errors import UsageError
from toolchain.lock import Lock
from toolchain.recipe.load import TargetSpec
from toolchain.smoke import devices
from toolchain.target.container import (
    KILL_PIDFILE,
    PIDS,
    ROOT,
    ContainerRuntime,
    image_digest,
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


class ContainerTarget(ContainerRuntime):
    """Where smoke installs and serves for a podman/docker lock: the container runtime with one serving
    container (`serving(port)` starts it) that `run()` and `launch()` use."""

    def __init__(self, spec: TargetSpec, *, locked_digest: str = "", wheels: Path | None = None,
                 venv: bool = True, ui=None) -> None:
        run_args, self.replaced_network = ([], "") if spec.container else host_network_args(spec.run_args)
        super().__init__(replace(spec, run_args=tuple(run_args)), ui)
        self.locked_digest = locked_digest
        self.wheels = wheels
        self.venv = VENV if venv else ""
        self.python = f"{VENV}/bin/python" if venv else spec.python
        self.container = ""
        self.notes: list[str] = []
        self._cenv: dict[str, str] = {}

    @property
    def name(self) -> str:
        if self.exec_mode:
            return self.describe()
        return f"{self.kind} container {self.container or '(not started)'}"

    # ---- lifecycle -----------------------------------------------------------------------------------

    @contextlib.contextmanager
    def serving(self, port: int) -> Iterator[ContainerTarget]:
        """Engine and image (or container) checked, the serving container started and prepared; at the end
        servers left running are killed and the container removed (exec mode: /toolchain removed)."""
        with self:
            self._note_digest()
            if self.replaced_network:
                self._say(warn=True, message=f"target.run-args: serving on the host's network instead of "
                                             f"{self.replaced_network!r} (smoke talks to the server on this machine)")
            if self.exec_mode:
                self._check_network(port)
                self.container = self._container_id
                self._stack.callback(self._exec, self.container, ["rm", "-rf", SMOKE_DIR, WHEELS], user="0",
                                     capture=True, check=False)
            else:
                mounts = [(str(self.wheels), WHEELS, True)] if self.wheels else []
                self.container = self._start("smoke", mounts)
                self._stack.callback(self._remove, self.container)
            self._stack.callback(self._kill_servers)
            self._exec(self.container, ["sh", "-c", 'mkdir -p "$0" "$1" && chmod 1777 "$1"', SMOKE_DIR, PIDS],
                       user="0", capture=True)
            owner = self._exec(self.container, ["sh", "-c", 'echo "$(id -u):$(id -g)"'], capture=True).stdout.strip()
            self._exec(self.container, ["chown", owner, SMOKE_DIR], user="0", capture=True)
            if self.wheels and self.exec_mode:
                self._exec(self.container, ["rm", "-rf", WHEELS], user="0", capture=True)
                self._query("cp", str(self.wheels), f"{self.container}:{WHEELS}", check=True, timeout=None)
            env = self._exec(self.container, ["env", "-0"], capture=True).stdout
            self._cenv = dict(item.split("=", 1) for item in env.split("\0") if "=" in item)
            yield self

    def _check_image(self) -> None:
        pinned = pinned_image(self.spec.image, self.locked_digest)
        if pinned and self._inspect_image(pinned) == 0:
            self._image_ref = pinned
        else:
            super()._check_image()

    def _note_digest(self) -> None:
        now = self.current_digest()
        if self.locked_digest and now != self.locked_digest:
            self.notes.append(f"the lock was built in image {self.locked_digest}; serving from "
                              f"{self._image or self.spec.image} {now}")
            self._say(warn=True, message=self.notes[-1])

    def _target(self) -> str:
        return self.container

    def _kill_servers(self) -> None:
        """Servers whose supervisor did not get to stop them (it was killed)."""
        self._exec(self.container, ["sh", "-c", 'k=$1; for f in "$0"/serve-*; do [ -f "$f" ] && sh -c "$k" "$f" '
                                    'KILL; rm -f "$f"; done; true', PIDS, KILL_PIDFILE],
                   user="0", capture=True, check=False, timeout=60)

    def current_digest(self) -> str:
        return image_digest(self._image, self._image_id, self._repo_digests)

    def to_dict(self) -> dict[str, Any]:
        return {"runtime": self.kind, "mode": "container" if self.exec_mode else "image", "name": self.name,
                "container": self.container, "image": self._image, "image_ref": self._image_ref or self._image,
                "image_digest": self.current_digest() if self._image_id else "",
                "locked_image_digest": self.locked_digest, "python": self.python, "notes": list(self.notes)}

    def _check_network(self, port: int) -> None:
        name, engine = self.spec.container, self.kind
        r = self._query("container", "inspect", "--format", "{{.HostConfig.NetworkMode}}|"
                        "{{json .HostConfig.PortBindings}}", name, check=True)
        mode, _, bindings = r.stdout.strip().partition("|")
        if mode == "host":
            return
        published = json.loads(bindings or "null") or {}
        if any(b.get("HostPort") == str(port) for b in published.get(f"{port}/tcp") or ()):
            self._say(warn=True, message=f"{name} publishes port {port}: the server must listen on 0.0.0.0 "
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
        return super().run(argv, env=full, cwd=cwd, log=log, capture=capture, check=check, timeout=timeout,
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
        pidfile = f"{PIDS}/serve-{uuid.uuid4().hex}"
        exec_argv, engine_env = self.exec_argv(self.container, argv, env=changes, pidfile=pidfile)
        where = {"engine": self._argv(), "container": self.container, "pidfile": pidfile}
        return [sys.executable, "-c", BOOT, PKG_ROOT, json.dumps(where), *exec_argv], \
            merge_env(os.environ, engine_env)

    # ---- devices -----------------------------------------------------------------------------------------

    def device_check(self, device: str, tp: int, mask: str) -> devices.DeviceCheck:
        """The cards as the container sees them: Intel GPUs in sysfs whose /dev/dri node is there."""
        out = self._exec(self.container, ["sh", "-c", CARDS_SCRIPT], capture=True).stdout
        by_slot: dict[str, devices.Card] = {}
        hidden = 0
        for line in out.splitlines():
            node, vendor, pci_id, slot, visible = (line.split("|") + [""] * 5)[:5]
            try:
                if int(vendor, 16) != devices.VENDOR_INTEL:
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
        dri = (f"recreate {self.spec.container} with --device=/dev/dri" if self.exec_mode
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
    argv, the container and the pidfile the server writes. Runs the exec in a session of its own and passes
    SIGINT/SIGTERM/SIGHUP on to the process in the container (the engine client would leave it running);
    SIGTERM is followed by SIGKILL after TERM_GRACE. Exits with the server's exit code."""
    where, argv = json.loads(args[0]), list(args[1:])
    as_root = [*where["engine"], "exec", "--user", "0", where["container"]]
    child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, start_new_session=True)
    pending: list[int] = []
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda signum, _frame: pending.append(signum))
    force_at = float("inf")
    while child.poll() is None:
        while pending:
            signum = pending.pop(0)
            _quiet([*as_root, "sh", "-c", KILL_PIDFILE, where["pidfile"], signal.Signals(signum).name[3:]])
            if signum == signal.SIGTERM:
                force_at = min(force_at, time.monotonic() + TERM_GRACE)
        if time.monotonic() > force_at:
            _quiet([*as_root, "sh", "-c", KILL_PIDFILE, where["pidfile"], "KILL"])
            force_at = float("inf")
        try:
            child.wait(timeout=0.1)
        except subprocess.TimeoutExpired:
            pass
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # a late stop request: the server is gone
        signal.signal(sig, signal.SIG_IGN)
    _quiet([*as_root, "rm", "-f", where["pidfile"]])
    code = child.returncode
    return 128 - code if code < 0 else code


def _quiet(argv: Sequence[str]) -> None:
    try:
        subprocess.run(list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        pass
