"""Start the server with no oneAPI environment, wait for readiness with a deadline, stop it, keep its log.

The torch XPU wheels carry their own SYCL runtime; a sourced oneAPI beside it gives `backend_mismatch` or
undefined-symbol errors (UPSTREAM.md). So the serve environment drops what setvars.sh adds: its variables
and the oneAPI entries of path lists. The server runs in its own process group so that stopping it also
stops the engine processes it spawned; its output reaches server.log through secret redaction. It runs
through `core.proc.background.start()`, the background half of the one way to run a process.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import requests

from toolchain.core.fs import open_log
from toolchain.core.proc.background import STOP_GRACE, Background, exit_status, start
from toolchain.core.proc.runner import CommandFailed, display
from toolchain.core.record import field, record
from toolchain.core.redact import redact_text
from toolchain.core.serial import Data, meta, rounded, to_table
from toolchain.errors import UsageError

# Variables setvars.sh (and the component vars.sh it calls) set; removed from the serve environment.
ONEAPI_VARS = frozenset({
    "SETVARS_COMPLETED", "SETVARS_CALL", "SETVARS_ARGS", "ONEAPI_ROOT", "CMPLR_ROOT", "MKLROOT", "TBBROOT",
    "DNNLROOT", "CCL_ROOT", "CCL_CONFIGURATION", "CCL_CONFIGURATION_PATH", "I_MPI_ROOT", "DPL_ROOT", "IPPROOT",
    "IPP_TARGET_ARCH", "IPPCRYPTOROOT", "DALROOT", "DAALROOT", "DPCT_BUNDLE_ROOT", "DIAGUTIL_PATH",
    "FI_PROVIDER_PATH", "OCL_ICD_FILENAMES", "INTEL_PYTHONHOME", "GDB_INFO", "VTUNE_PROFILER_DIR",
})
# Path lists from which oneAPI entries are removed (the variable goes when nothing is left).
PATH_LISTS = ("PATH", "LD_LIBRARY_PATH", "LIBRARY_PATH", "CPATH", "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH",
              "CMAKE_PREFIX_PATH", "PKG_CONFIG_PATH", "MANPATH", "INFOPATH", "NLSPATH", "CLASSPATH", "PYTHONPATH")
ONEAPI_PREFIXES = ("/opt/intel/oneapi",)
POLL_SECONDS = 0.5
PROBE_TIMEOUT = 5.0


def strip_oneapi(env: Mapping[str, str]) -> tuple[dict[str, str], tuple[str, ...]]:
    """`env` without the oneAPI environment; also returns the names removed or changed."""
    prefixes = set(ONEAPI_PREFIXES)
    for name in ("ONEAPI_ROOT", "CMPLR_ROOT"):
        if env.get(name, "").startswith("/"):
            prefixes.add(os.path.normpath(env[name]))
    if env.get("CMPLR_ROOT", "").startswith("/"):  # .../compiler/<version>: the whole oneAPI tree
        prefixes.add(os.path.dirname(os.path.dirname(os.path.normpath(env["CMPLR_ROOT"]))))
    prefixes.discard("/")

    def under(value: str) -> bool:
        value = os.path.normpath(value) if value else value
        return any(value == p or value.startswith(p + "/") for p in prefixes)

    out: dict[str, str] = {}
    changed: list[str] = []
    for name, value in env.items():
        if name in ONEAPI_VARS or (name.endswith(("ROOT", "_DIR")) and under(value)):
            changed.append(name)
        elif name in PATH_LISTS:
            kept = [p for p in value.split(os.pathsep) if not under(p)]
            if len(kept) != len(value.split(os.pathsep)):
                changed.append(name)
            if kept and any(kept):
                out[name] = os.pathsep.join(kept)
        else:
            out[name] = value
    return out, tuple(sorted(changed))


@record
class ServeSpec:
    """How to start one server: argv, complete environment, base URL and log file."""
    argv: tuple[str, ...]
    env: Mapping[str, str]          # the complete environment
    base_url: str                   # http://127.0.0.1:8000
    log: Path
    ready_timeout: float
    ready_path: str = "/v1/models"


def ended(code: int) -> str:
    """How the server ended: "exited with exit code 0", "was killed by signal SIGSEGV (11)"."""
    return f"{'was killed by' if code < 0 else 'exited with'} {exit_status(code)}"


@record
class Readiness:
    """Whether the server became ready, after how many seconds, or why not (and its exit code if it died)."""
    ok: bool
    seconds: float = field(metadata=meta(dump=rounded(3)))
    reason: str = ""
    exit_code: int | None = None    # set when the process exited before it was ready (< 0: a signal)

    def to_dict(self) -> dict[str, Data]:
        """The report's table: the fields, and how the process ended, in words."""
        return {**to_table(self), "exit_status": None if self.exit_code is None else exit_status(self.exit_code)}


Launcher = Callable[[Sequence[str], Mapping[str, str]], "tuple[list[str], dict[str, str]]"]


class Server:
    """One server process (restartable). `launch` turns (argv, env) into what runs here (host: itself).
    The process runs through `core.proc.background.start`: a process group of its own, output to the log."""

    def __init__(self, spec: ServeSpec, launch: Launcher | None = None) -> None:
        self.spec = spec
        self._launch = launch or (lambda argv, env: (list(argv), dict(env)))
        self._proc: Background | None = None
        self._stopping = False
        self._exit_logged = False
        self.starts = 0
        self.start_offsets: list[int] = []   # where each start's output begins in the log

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """Start the server process, its output appended to the log; a UsageError when the command cannot run."""
        argv, env = self._launch(self.spec.argv, self.spec.env)
        self.spec.log.parent.mkdir(parents=True, exist_ok=True)
        self.starts += 1
        self.start_offsets.append(self.log_offset())
        self._write_log(f"### toolchain smoke: start #{self.starts}: {redact_text(display(argv), env)}\n")
        try:
            self._proc = start(argv, env=env, log=self.spec.log, log_command=False,
                               hint="check --serve-cmd / [smoke] serve-cmd, or --python")
        except CommandFailed as exc:
            what = "not found" if exc.returncode == 127 else "cannot be run"
            raise UsageError(f"serve command {what}: {exc.tail}", hint=exc.hint) from None
        self._stopping = False
        self._exit_logged = False

    def _write_log(self, text: str) -> None:
        with open_log(self.spec.log) as f:
            f.write(text)

    def log_offset(self) -> int:
        """The log's length now: where the next output starts (to cut one case's part out of the log)."""
        try:
            return self.spec.log.stat().st_size
        except FileNotFoundError:
            return 0

    def wait_ready(self) -> Readiness:
        """Poll until the ready path answers 200, the process exits, or the deadline passes."""
        started = time.monotonic()
        deadline = started + self.spec.ready_timeout
        url = self.spec.base_url + self.spec.ready_path
        while True:
            code = self.exit_code
            if code is not None:
                return Readiness(False, time.monotonic() - started,
                                 f"server {ended(code)} before it was ready", code)
            try:
                if requests.get(url, timeout=min(PROBE_TIMEOUT, max(0.1, deadline - time.monotonic()))).ok:
                    return Readiness(True, time.monotonic() - started)
            except requests.RequestException:
                pass
            left = deadline - time.monotonic()
            if left <= 0:
                return Readiness(False, time.monotonic() - started,
                                 f"server not ready after {self.spec.ready_timeout:g}s ({url} never answered 200)")
            time.sleep(min(POLL_SECONDS, left))

    @property
    def exit_code(self) -> int | None:
        """The server's exit status once it exited (< 0: the signal that ended it)."""
        return None if self._proc is None else self._proc.returncode

    @property
    def exited_at(self) -> float | None:
        """time.monotonic() when the server process exited, None while it runs."""
        return None if self._proc is None else self._proc.exited_at

    @property
    def pid(self) -> int | None:
        """The server process's id, None before it starts."""
        return None if self._proc is None else self._proc.pid

    def wait_exit(self, timeout: float) -> int | None:
        """Give a dying process up to `timeout` seconds to exit; its exit status, or None if still running."""
        return None if self._proc is None else self._proc.wait(timeout)

    def alive(self) -> bool:
        """Whether the server process is running."""
        return self._proc is not None and self._proc.alive()

    @property
    def crashed(self) -> bool:
        """Exited on its own (not stopped by us)."""
        return self._proc is not None and not self._stopping and not self._proc.alive()

    def stop(self, grace: float = STOP_GRACE) -> int | None:
        """SIGINT, then SIGTERM, then SIGKILL to the whole process group; returns the exit status."""
        proc = self._proc
        if proc is None:
            return None
        if self._exit_logged:
            return proc.returncode
        if proc.alive():
            self._stopping = True
        code = proc.stop(grace)
        self._exit_logged = True
        self._write_log(f"### toolchain smoke: server {exit_status(code)}\n")
        return code

    def restart(self) -> Readiness:
        """Stop the server, start it again and wait until it is ready."""
        self.stop()
        self.start()
        return self.wait_ready()

    def log_text(self, start: int = 0, end: int | None = None) -> str:
        """The log (or the part between two offsets) as text."""
        try:
            with open(self.spec.log, "rb") as f:
                f.seek(start)
                data = f.read() if end is None else f.read(max(0, end - start))
        except FileNotFoundError:
            return ""
        return data.decode("utf-8", "replace")
