"""Start the server with no oneAPI environment, wait for readiness with a deadline, stop it, keep its log.

The torch XPU wheels carry their own SYCL runtime; a sourced oneAPI beside it gives `backend_mismatch` or
undefined-symbol errors (UPSTREAM.md). So the serve environment drops what setvars.sh adds: its variables
and the oneAPI entries of path lists. The server runs in its own process group so that stopping it also
stops the engine processes it spawned; its output reaches server.log through secret redaction. A
long-running server cannot go through `run.run()` (which waits for its command to finish); this module is
the one place that starts one.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import requests

from toolchain.core.proc import display
from toolchain.core.redact import redact_text
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
PUMP_JOIN_SECONDS = 5.0


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


@dataclass(frozen=True)
class ServeSpec:
    argv: tuple[str, ...]
    env: Mapping[str, str]          # the complete environment
    base_url: str                   # http://127.0.0.1:8000
    log: Path
    ready_timeout: float
    ready_path: str = "/v1/models"


@dataclass(frozen=True)
class Readiness:
    ok: bool
    seconds: float
    reason: str = ""
    exit_code: int | None = None    # set when the process exited before it was ready

    def to_dict(self) -> dict:
        return {"ok": self.ok, "seconds": round(self.seconds, 3), "reason": self.reason, "exit_code": self.exit_code}


Launcher = Callable[[Sequence[str], Mapping[str, str]], "tuple[list[str], dict[str, str]]"]


class Server:
    """One server process (restartable). `launch` turns (argv, env) into what runs here (host: itself)."""

    def __init__(self, spec: ServeSpec, launch: Launcher | None = None) -> None:
        self.spec = spec
        self._launch = launch or (lambda argv, env: (list(argv), dict(env)))
        self._proc: subprocess.Popen | None = None
        self._pump: threading.Thread | None = None
        self._stopping = False
        self._exit_logged = False
        self.starts = 0

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        argv, env = self._launch(self.spec.argv, self.spec.env)
        self.spec.log.parent.mkdir(parents=True, exist_ok=True)
        self.starts += 1
        self._write_log(f"### toolchain smoke: start #{self.starts}: {redact_text(display(argv), env)}\n")
        try:
            self._proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                          stderr=subprocess.STDOUT, start_new_session=True)
        except FileNotFoundError:
            raise UsageError(f"serve command not found: {argv[0]}",
                             hint="check --serve-cmd / [smoke] serve-cmd, or --python") from None
        except PermissionError as exc:
            raise UsageError(f"serve command cannot be run: {argv[0]}: {exc.strerror}") from None
        # The server's output goes to the log through secret redaction, line by line.
        self._pump = threading.Thread(target=_copy_redacted, args=(self._proc.stdout, self.spec.log, env),
                                      daemon=True)
        self._pump.start()
        self._stopping = False
        self._exit_logged = False

    def _write_log(self, text: str) -> None:
        with open(self.spec.log, "a", encoding="utf-8") as f:
            f.write(text)

    def wait_ready(self) -> Readiness:
        """Poll until the ready path answers 200, the process exits, or the deadline passes."""
        started = time.monotonic()
        deadline = started + self.spec.ready_timeout
        url = self.spec.base_url + self.spec.ready_path
        while True:
            code = self.exit_code
            if code is not None:
                return Readiness(False, time.monotonic() - started,
                                 f"server exited with code {code} before it was ready", code)
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
        return None if self._proc is None else self._proc.poll()

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    def wait_exit(self, timeout: float) -> int | None:
        """Give a dying process up to `timeout` seconds to exit; its exit code, or None if still running."""
        if self._proc is None:
            return None
        try:
            return self._proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def crashed(self) -> bool:
        """Exited on its own (not stopped by us)."""
        return self._proc is not None and not self._stopping and self._proc.poll() is not None

    def stop(self, grace: float = 10.0) -> int | None:
        """SIGINT, then SIGTERM, then SIGKILL to the whole process group; returns the exit code."""
        proc = self._proc
        if proc is None:
            return None
        if self._exit_logged:
            return proc.returncode
        if proc.poll() is None:
            self._stopping = True
        for sig, wait in ((signal.SIGINT, grace), (signal.SIGTERM, grace / 2), (signal.SIGKILL, grace)):
            if proc.poll() is not None:
                break
            _signal_group(proc.pid, sig)
            try:
                proc.wait(timeout=wait)
            except subprocess.TimeoutExpired:
                continue
        _signal_group(proc.pid, signal.SIGKILL)  # children left behind by a crashed parent
        if self._pump is not None:
            self._pump.join(PUMP_JOIN_SECONDS)
        self._exit_logged = True
        self._write_log(f"### toolchain smoke: server exit code {proc.returncode}\n")
        return proc.returncode

    def restart(self) -> Readiness:
        self.stop()
        self.start()
        return self.wait_ready()

    def log_text(self) -> str:
        try:
            return self.spec.log.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return ""


def _copy_redacted(stream, log: Path, env: Mapping[str, str]) -> None:
    with open(log, "a", encoding="utf-8", errors="replace") as f:
        for raw in iter(stream.readline, b""):
            f.write(redact_text(raw.decode("utf-8", "replace"), env))
            f.flush()
    stream.close()


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
