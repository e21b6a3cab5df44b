"""What a container runtime needs to serve (smoke): a venv that sees the image's packages, the server's
environment, and `supervise()`, the host process that runs a server in a container and passes stop signals on
(an engine client does not).

A server is exec'd in the container with the complete environment it should see: what differs from the
container's own goes in as `-e NAME` (values in the engine's environment, never on its command line), what
it lacks is unset. Its process id goes to a pidfile under /toolchain/run, so that a server whose supervisor
was killed is still stopped when the runtime exits.
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
from collections.abc import Mapping, Sequence
from pathlib import Path

from toolchain.core.proc.runner import CommandTimeout, run
from toolchain.target.container.engine import KILL_PIDFILE, image_repo

PKG_ROOT = str(Path(__file__).resolve().parents[3])  # the directory holding this `toolchain` package
# Host variables that reach the container's pip / server when set here (a host target inherits them all).
PROXIES = ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy")
PIP_FROM_HOST = (*PROXIES, "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_NO_INDEX", "PIP_TRUSTED_HOST",
                 "PIP_DEFAULT_TIMEOUT")
SERVE_FROM_HOST = (*PROXIES, "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_ENDPOINT", "HF_HUB_OFFLINE",
                   "TRANSFORMERS_OFFLINE")
# Shell start-up files a variable can make every shell read (an image may point them at setvars.sh).
SHELL_STARTUP = ("BASH_ENV", "ENV")
TERM_GRACE = 3.0  # supervise(): after forwarding SIGTERM, how long before SIGKILL
NETWORK_FLAGS = ("--network", "--net")

BOOT = ("import sys; sys.path.insert(0, sys.argv.pop(1)); "
        "from toolchain.target.container.serve import supervise; sys.exit(supervise(sys.argv[1:]))")


def from_host(names: Sequence[str]) -> dict[str, str]:
    """The variables of `names` this process has, to pass on into the container's server."""
    return {k: os.environ[k] for k in names if k in os.environ}


def serve_env(container_env: Mapping[str, str], venv: str) -> dict[str, str | None]:
    """Layered over this process's environment: the container's environment replaces it (None removes a
    host variable), plus the model-hub and proxy settings from here, without shell start-up files that
    source oneAPI; `venv` first on PATH."""
    env: dict[str, str | None] = {k: None for k in os.environ if k not in container_env}
    env.update(container_env)
    env.update(from_host(SERVE_FROM_HOST))
    for name in SHELL_STARTUP:
        if any(w in (env.get(name) or "").lower() for w in ("setvars", "oneapi")):
            env[name] = None
    if venv:
        env.update(VIRTUAL_ENV=venv, PATH=f"{venv}/bin:" + container_env.get("PATH", "/usr/bin:/bin"))
    return env


def host_network_args(run_args: Sequence[str]) -> tuple[list[str], str]:
    """run-args with the network set to the host's; also the network they named instead ("" if none)."""
    out: list[str] = []
    replaced, skip = "", False
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
    return [*out, "--network=host"], replaced


def pinned_image(image: str, digest: str) -> str:
    """The reference that names exactly the locked image: repo@sha256:... or the local image id."""
    if digest.startswith("id:sha256:"):
        return digest[len("id:sha256:"):]
    if digest.startswith("sha256:"):
        return f"{image_repo(image)}@{digest}"
    return ""


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
        code = run(argv, check=False, verbose=True).returncode
    finally:
        for sig in stops:  # a late stop request: the server is gone
            signal.signal(sig, signal.SIG_IGN)
        received.put(None)
        forwarder.join(timeout=TERM_GRACE + 60)
        _quiet([*as_root, "rm", "-f", where["pidfile"]])
    return 128 - code if code < 0 else code


def boot_argv(where: Mapping[str, object], exec_argv: Sequence[str]) -> list[str]:
    """The host command that runs `supervise()` over `exec_argv` (this package, whatever the interpreter)."""
    return [sys.executable, "-c", BOOT, PKG_ROOT, json.dumps(where), *exec_argv]


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
    with contextlib.suppress(CommandTimeout):
        run(argv, capture=True, check=False, timeout=60)
