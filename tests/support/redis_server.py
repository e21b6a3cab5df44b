"""A real Redis for tests and benchmarks: Debian's `redis-server` on 127.0.0.1, a shared compiler cache's store.

    with run_redis(tmp_path) as store:                       # no password
        store.url                                            # redis://127.0.0.1:PORT
    with run_redis(tmp_path, password="p") as store:         # AUTH required
        store.url                                            # redis://:p@127.0.0.1:PORT

It listens on a free port of 127.0.0.1 only, keeps nothing on disk (no RDB, no AOF), logs to ``store.log``, and
``run_redis`` returns once it answers PING; the process is stopped when the block ends (also on errors and
Ctrl-C) and dies with the test process (PR_SET_PDEATHSIG). ``store.stop()`` stops it early (a store that went
away); ``store.keys()`` counts what it holds.

Needs the apt package `redis-server` (installed without recommends by tests/support/ci_setup.sh);
``redis_available()`` says whether it is here.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from tests.support.registry import ServedProcess, _die_with_parent, _free_port, start_retried, wait_until

REDIS_EXE = "redis-server"
START_TIMEOUT = 20.0


class RedisError(RuntimeError):
    """The server could not be started."""


def redis_available() -> tuple[bool, str]:
    if shutil.which(REDIS_EXE) is None:
        return False, f"{REDIS_EXE} is not installed (apt-get install --no-install-recommends redis-server; " \
                      "tests/support/ci_setup.sh does)"
    return True, "redis-server is installed"


@dataclass
class RedisServer(ServedProcess):
    host: str
    port: int
    log: Path
    password: Optional[str] = None
    process: Optional[subprocess.Popen] = field(default=None, repr=False)

    @property
    def url(self) -> str:
        """The URL a user exports (the password in the redis-cli form `:PASSWORD@`)."""
        return f"redis://{':' + self.password + '@' if self.password else ''}{self.address}"

    @property
    def bare_url(self) -> str:
        return f"redis://{self.address}"

    def command(self, *words: str) -> str:
        """One command's answer line (after AUTH when there is a password)."""
        with socket.create_connection((self.host, self.port), timeout=5) as sock:
            lines = [["AUTH", self.password]] if self.password else []
            lines.append(list(words))
            payload = b"".join(b"*%d\r\n" % len(w) + b"".join(b"$%d\r\n%s\r\n" % (len(x.encode()), x.encode())
                                                               for x in w) for w in lines)
            sock.sendall(payload)
            data = b""
            while data.count(b"\r\n") < len(lines):
                chunk = sock.recv(65536)
                if not chunk:
                    break
                data += chunk
        return data.decode(errors="replace").split("\r\n")[len(lines) - 1]

    def keys(self) -> int:
        """How many keys the store holds (DBSIZE)."""
        answer = self.command("DBSIZE")
        if not answer.startswith(":"):
            raise RedisError(f"DBSIZE answered {answer!r}")
        return int(answer[1:])


def _answers(store: RedisServer) -> bool:
    try:
        return store.command("PING") == "+PONG"
    except OSError:
        return False


def _start(workdir: Path, host: str, password: Optional[str]) -> RedisServer:
    exe = shutil.which(REDIS_EXE)
    if exe is None:
        raise RedisError(redis_available()[1])
    port = _free_port(host)
    log = workdir / "redis.log"
    store = RedisServer(host, port, log, password)
    argv = [exe, "--bind", host, "--port", str(port), "--save", "", "--appendonly", "no", "--dir", str(workdir),
            "--daemonize", "no", "--protected-mode", "no", "--logfile", str(log), "--maxmemory", "512mb",
            "--maxmemory-policy", "allkeys-lru"]
    if password:
        argv += ["--requirepass", password]
    store.process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.STDOUT, start_new_session=True,
                                     preexec_fn=_die_with_parent)  # noqa: PLW1509 (prctl only, before exec)
    try:
        wait_until(store.process, lambda: _answers(store), f"redis-server on {store.address}", store.log_tail,
                   START_TIMEOUT, RedisError)
    except BaseException:
        store.stop()
        raise
    return store


@contextlib.contextmanager
def run_redis(workdir: Optional[os.PathLike] = None, *, password: Optional[str] = None,
              host: str = "127.0.0.1") -> Iterator[RedisServer]:
    """Start a Redis (requiring `password` when given), yield it, stop it. A port taken between choosing and
    binding it is retried with another one."""
    with contextlib.ExitStack() as stack:
        root = Path(workdir) if workdir is not None else Path(stack.enter_context(
            tempfile.TemporaryDirectory(prefix="toolchain-redis-")))
        root.mkdir(parents=True, exist_ok=True)
        store = start_retried(lambda: _start(root, host, password), RedisError, "Address already in use")
        try:
            yield store
        finally:
            store.stop()
