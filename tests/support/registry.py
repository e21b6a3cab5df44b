"""A real OCI registry for tests: Debian's `docker-registry` (distribution 2.8) on 127.0.0.1.

    with run_registry(tmp_path) as reg:                         # no auth
        requests.get(f"{reg.url}/v2/")                          # 200
    with run_registry(tmp_path, username="u", password="p") as reg:
        requests.get(f"{reg.url}/v2/", auth=reg.auth)           # 200; 401 without auth

The registry listens on a free port of 127.0.0.1 (plain HTTP), stores blobs under ``reg.storage`` and logs
to ``reg.log``. ``run_registry`` returns once ``GET /v2/`` answers (200, or 401 with auth) and always stops the
process when the block ends, also on errors and Ctrl-C; the process also dies with the test process
(PR_SET_PDEATHSIG), so a killed pytest leaves no registry behind. ``reg.kill()`` kills it early (to test
what a client does when the registry goes away).

Needs the apt packages `docker-registry` and, for auth, `apache2-utils` (htpasswd); tests/support/ci_setup.sh
installs both. ``registry_available()`` says whether they are here.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, TypeVar

T = TypeVar("T")

REGISTRY_EXE = "docker-registry"
HTPASSWD_EXE = "htpasswd"
START_TIMEOUT = 30.0
STOP_TIMEOUT = 10.0
_PR_SET_PDEATHSIG = 1


class RegistryError(RuntimeError):
    """The registry could not be started."""


def registry_available(auth: bool = False) -> tuple[bool, str]:
    """(usable, reason): `docker-registry` (and `htpasswd` when ``auth``) are on PATH."""
    for exe, pkg in ((REGISTRY_EXE, "docker-registry"), (HTPASSWD_EXE, "apache2-utils"))[: 2 if auth else 1]:
        if shutil.which(exe) is None:
            return False, f"{exe} is not installed (apt-get install {pkg}; tests/support/ci_setup.sh does)"
    return True, "docker-registry is installed"


class ServedProcess:
    """What a test server started here has in common (the registry, Redis): where it listens, whether it is
    alive, killing or stopping it (always reaped) and its log's tail. The dataclasses below give the fields."""

    host: str
    port: int
    log: Path
    process: Optional[subprocess.Popen]

    @property
    def address(self) -> str:
        """host:port, as image references, `oras` and ccache want it."""
        return f"{self.host}:{self.port}"

    def alive(self) -> bool:
        """The process is running."""
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL the server now and reap it (no-op when it is gone)."""
        proc = self.process
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # its own session: any child goes too
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
        proc.wait()

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after STOP_TIMEOUT seconds; always reaps."""
        proc = self.process
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=STOP_TIMEOUT)
        self.kill()

    def log_tail(self, lines: int = 20) -> str:
        """The last lines of the server's log ("" when unreadable)."""
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


@dataclass
class Registry(ServedProcess):
    host: str
    port: int
    storage: Path
    config: Path
    log: Path
    username: Optional[str] = None
    password: Optional[str] = None
    process: Optional[subprocess.Popen] = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"http://{self.address}"

    @property
    def auth(self) -> Optional[tuple[str, str]]:
        """(username, password) for requests' ``auth=``, or None without auth."""
        return (self.username, self.password) if self.username is not None and self.password is not None else None


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:  # runs in the child between fork and exec
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _htpasswd_line(username: str, password: str) -> str:
    exe = shutil.which(HTPASSWD_EXE)
    if exe is None:
        raise RegistryError(registry_available(auth=True)[1])
    proc = subprocess.run([exe, "-Bbn", username, password], capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        raise RegistryError(f"htpasswd failed (exit {proc.returncode}): {proc.stderr.strip()}")
    return proc.stdout.strip() + "\n"


def _config(host: str, port: int, storage: Path, htpasswd: Optional[Path], delete: bool = True) -> dict:
    cfg = {
        "version": 0.1,
        "log": {"level": "info", "accesslog": {"disabled": False}},
        "storage": {"filesystem": {"rootdirectory": str(storage)}, "delete": {"enabled": delete},
                    "maintenance": {"uploadpurging": {"enabled": False}}},
        "http": {"addr": f"{host}:{port}", "secret": secrets.token_hex(16)},
    }
    if htpasswd is not None:
        cfg["auth"] = {"htpasswd": {"realm": "toolchain-test-registry", "path": str(htpasswd)}}
    return cfg


def _answers(reg: Registry) -> bool:
    """GET /v2/ gives 200 (no auth) or 401 (auth, no credentials sent)."""
    want = 401 if reg.username is not None else 200
    try:
        with urllib.request.urlopen(f"{reg.url}/v2/", timeout=2) as resp:
            return resp.status == want
    except urllib.error.HTTPError as e:
        return e.code == want
    except (urllib.error.URLError, OSError):
        return False


def _start(workdir: Path, host: str, username: Optional[str], password: Optional[str], delete: bool = True) -> Registry:
    exe = shutil.which(REGISTRY_EXE)
    if exe is None:
        raise RegistryError(registry_available()[1])
    storage = workdir / "storage"
    storage.mkdir(parents=True, exist_ok=True)
    htpasswd = None
    if username is not None:
        htpasswd = workdir / "htpasswd"
        htpasswd.write_text(_htpasswd_line(username, password or ""))
    port = _free_port(host)
    config = workdir / "config.yml"
    config.write_text(json.dumps(_config(host, port, storage, htpasswd, delete), indent=2))  # JSON is YAML
    log = workdir / "registry.log"
    reg = Registry(host, port, storage, config, log, username, password)
    with open(log, "wb") as out:
        reg.process = subprocess.Popen([exe, "serve", str(config)], stdin=subprocess.DEVNULL, stdout=out,
                                       stderr=subprocess.STDOUT, start_new_session=True,
                                       preexec_fn=_die_with_parent)  # noqa: PLW1509 (prctl only, before exec)
    try:
        wait_until(reg.process, lambda: _answers(reg), f"docker-registry on {reg.url}/v2/", reg.log_tail,
                   START_TIMEOUT, RegistryError)
    except BaseException:
        reg.kill()
        raise
    return reg


def wait_until(process: subprocess.Popen, answers: Callable[[], bool], what: str, log_tail: Callable[[], str],
               timeout: float, error: type[RuntimeError]) -> None:
    """Poll `answers` until it is true; `error` (with the log's tail) when the server exits or `timeout` passes."""
    deadline = time.monotonic() + timeout
    while not answers():
        if process.poll() is not None:
            raise error(f"{what} exited with {process.returncode}:\n{log_tail()}")
        if time.monotonic() > deadline:
            raise error(f"{what} did not answer in {timeout:.0f}s:\n{log_tail()}")
        time.sleep(0.05)


def start_retried(start: Callable[[], T], error: type[RuntimeError], in_use: str) -> T:
    """`start()`, tried again (twice at most) when the port chosen was taken before the server bound it."""
    for attempt in range(3):
        try:
            return start()
        except error as e:
            if attempt == 2 or in_use not in str(e):
                raise
    raise AssertionError("unreachable")


@contextlib.contextmanager
def run_registry(workdir: Optional[os.PathLike] = None, *, username: Optional[str] = None,
                 password: Optional[str] = None, host: str = "127.0.0.1", delete: bool = True) -> Iterator[Registry]:
    """Start a registry (with htpasswd auth when ``username`` is given), yield it, stop it. ``delete=False``:
    one whose storage refuses deletes (distribution's default: DELETE answers 405 UNSUPPORTED).

    ``workdir`` holds the config, the htpasswd file, the storage and the log (a temporary directory, removed
    afterwards, when None). A port taken between choosing and binding it is retried with another one."""
    if username is not None and password is None:
        raise ValueError("a username needs a password")
    with contextlib.ExitStack() as stack:
        root = Path(workdir) if workdir is not None else Path(stack.enter_context(
            tempfile.TemporaryDirectory(prefix="toolchain-registry-")))
        root.mkdir(parents=True, exist_ok=True)
        reg = start_retried(lambda: _start(root, host, username, password, delete), RegistryError,
                            "address already in use")
        try:
            yield reg
        finally:
            reg.stop()
