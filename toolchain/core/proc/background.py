"""A long-running command (a server) in a process group of its own: `start()` and its `Background` handle,
which stops the whole group (SIGINT, SIGTERM, SIGKILL) and keeps the leader's real exit status."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import subprocess  # imported when a command runs: a warm no-op build runs none

from toolchain.core.fs import open_log
from toolchain.core.proc.children import CHILDREN, POLL, Child, group_alive
from toolchain.core.proc.runner import CommandFailed, checked_argv, display, exited_within, merge_env, no_null_bytes
from toolchain.core.redact import redact_text

STOP_GRACE = 10.0      # Background.stop(): seconds after SIGINT before SIGTERM (half that again before SIGKILL)
_DRAIN_SECONDS = 1.0   # Background.wait(): how long the output of an exited process may take to reach the log


def exit_status(returncode: int | None) -> str:
    """How a process ended, as a person reads it: "exit code 1", "signal SIGSEGV (11)", "still running"."""
    if returncode is None:
        return "still running"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = "signal"
        return f"signal {name} ({-returncode})"
    return f"exit code {returncode}"


class Background:
    """A long-running command (a server) in a process group of its own; its merged output goes to `log`
    through secret redaction. `stop()` escalates SIGINT → SIGTERM → SIGKILL to the whole group, so the
    processes the command spawned go with it; the leader's real exit status (code or signal) is kept."""

    def __init__(self, proc: subprocess.Popen[bytes], env: Mapping[str, str], log: Path | None, verbose: bool,
                 child: Child | None = None) -> None:
        self._proc = proc
        self._child = child
        self.argv = tuple(str(a) for a in proc.args)  # type: ignore[union-attr]
        self.pid = proc.pid
        self.log = log
        self.exited_at: float | None = None   # time.monotonic() when the leader exited
        self._stopped = False
        self._pump = threading.Thread(target=self._copy, args=(env, verbose), daemon=True)
        self._pump.start()
        self._watch = threading.Thread(target=self._wait_exit, daemon=True)
        self._watch.start()

    def __enter__(self) -> Background:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def returncode(self) -> int | None:
        """The leader's status once it exited: >= 0 an exit code, < 0 the signal that ended it."""
        return self._noted(self._proc.poll())

    def alive(self) -> bool:
        """Whether the process is still running (no exit code seen yet)."""
        return self.returncode is None

    def _noted(self, code: int | None) -> int | None:
        if code is not None and self.exited_at is None:  # whoever sees the exit first notes its time
            self.exited_at = time.monotonic()
        return code

    def wait(self, timeout: float | None = None) -> int | None:
        """The exit status, waiting up to `timeout` seconds; None while still running. Once it exited, its
        last output is in the log (unless a process it left behind still holds the output open)."""
        if not exited_within(self._proc, timeout):
            return None
        code = self._proc.returncode
        self._noted(code)
        self._pump.join(_DRAIN_SECONDS)
        return code

    def group_alive(self) -> bool:
        """Whether any process of the group (the leader or what it spawned) still runs. Zombies (dead,
        waiting for init to reap them) do not count."""
        if self._child is not None:
            return self._child.alive()
        return self.alive() or group_alive(self.pid)

    def signal(self, sig: int) -> None:
        """Send `sig` to the whole process group (and its cgroup, where it has one)."""
        if self._child is not None:
            self._child.signal(sig)
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, sig)

    def stop(self, grace: float = STOP_GRACE) -> int:
        """Stop the whole group: SIGINT, then SIGTERM after `grace` s, then SIGKILL after grace/2 s; returns the
        leader's exit status (a negative number: the signal). Processes the leader left behind get SIGKILL."""
        if not self._stopped:
            try:
                for sig, wait in ((signal.SIGINT, grace), (signal.SIGTERM, grace / 2)):
                    if not self.group_alive():
                        break
                    if self._child is None or sig not in self._child.sent:  # (a stop signal may have sent it)
                        self.signal(sig)
                    self._wait_group(wait)
            finally:  # also when a second stop request cuts the escalation short: nothing stays behind
                self.signal(signal.SIGKILL)
            self._wait_group(grace)
            self._stopped = True
        code = self._proc.wait()
        self._pump.join(grace)
        self._watch.join(grace)  # its "# exit ..." line is in the log before the caller writes more
        if self._child is not None:
            CHILDREN.discard(self._child)
        return code

    def _wait_group(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while self.group_alive() and time.monotonic() < deadline:
            time.sleep(POLL)

    def _wait_exit(self) -> None:
        code = self._noted(self._proc.wait())
        if self.log is not None:
            self._pump.join()  # the trailer after the last line of output
            with open_log(self.log) as f:
                f.write(f"# {exit_status(code)}\n")

    def _copy(self, env: Mapping[str, str], verbose: bool) -> None:
        stream = self._proc.stdout
        assert stream is not None
        log_file = open_log(self.log) if self.log is not None else None
        try:
            for raw in iter(stream.readline, b""):
                line = redact_text(raw.decode("utf-8", "replace"), env)
                if log_file is not None:
                    log_file.write(line)
                    log_file.flush()
                if verbose:
                    sys.stderr.write(line)
        finally:
            stream.close()
            if log_file is not None:
                log_file.close()


def start(argv: Sequence[str], *, env: Mapping[str, str | None] | None = None, cwd: str | Path | None = None,
          log: Path | None = None, verbose: bool = False, hint: str | None = None,
          log_command: bool = True) -> Background:
    """Start `argv` in the background, in a new process group (stop it with `.stop()` or a `with` block).
    `env` is the complete environment (None: inherit os.environ); output is appended to `log`, after a
    `$ command` line unless the caller wrote its own (`log_command=False`)."""
    import subprocess

    args = checked_argv(argv, "start")
    full_env = merge_env(os.environ, {}) if env is None else merge_env({}, env)
    no_null_bytes(args, full_env)
    if log is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
        if log_command:
            with open_log(log) as f:
                f.write(f"$ {redact_text(display(args), full_env)}\n" + (f"  (in {cwd})\n" if cwd else ""))
    try:
        proc = subprocess.Popen(args, env=full_env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, start_new_session=True)
    except FileNotFoundError as exc:
        raise CommandFailed(args, 127, log, f"{args[0]}: program not found ({exc.strerror})",
                            hint=hint or f"install {args[0]!r} or put it on PATH") from None
    except PermissionError as exc:
        raise CommandFailed(args, 126, log, f"{args[0]}: {exc.strerror}", hint=hint) from None
    return Background(proc, full_env, log, verbose, CHILDREN.add(proc, signal.SIGINT))
