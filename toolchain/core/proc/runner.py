"""The one way to run a command: argv lists, an env mapping, output captured to a log.

Layers (after nox): `run()` checks the call, merges the env and logs the command; `_popen()` runs it,
streams or captures output through secret redaction, and escalates Ctrl-C (interrupt, terminate, kill).
A failing command raises `CommandFailed` with the command, the log path and the tail of its output; one that
runs out of time raises `CommandTimeout` (a `CommandFailed`), whatever `check` says. A program that cannot be
started (not found: 127, not executable: 126) raises `CommandFailed` too, or with `check=False` comes back as
a `Completed` with that code, the reason in `stderr` and `started=False`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    import subprocess  # imported when a command runs: a warm no-op build runs none

from toolchain.core.fs import open_append
from toolchain.core.proc.children import CHILDREN, KILL_GRACE
from toolchain.core.record import record
from toolchain.core.redact import redact_text
from toolchain.errors import BuildError, UsageError

TAIL_LINES = 40
GRACE = 5.0  # after a timeout: how long the output of a stopped command is still read


@record
class Completed:
    """A finished command: its argv, exit code and (captured) output."""

    argv: tuple[str, ...]
    returncode: int
    stdout: str  # captured stdout when capture=True, else ""
    stderr: str
    seconds: float
    log: Path | None
    started: bool = True  # False: the program could not be started (returncode 127 or 126, reason in stderr)


class CommandFailed(BuildError):
    """A command exited non-zero: its argv, exit code, log file and the output's last lines."""
    def __init__(self, argv: Sequence[str], returncode: int, log: Path | None, tail: str,
                 *, hint: str | None = None, headline: str = "") -> None:
        self.argv = tuple(argv)
        self.returncode = returncode
        self.log = log
        self.tail = tail
        where = f"\n  log: {log}" if log else ""
        shown = f"\n  last lines:\n{_indent(tail)}" if tail.strip() else ""
        head = headline or f"command failed with exit code {returncode}"
        super().__init__(f"{head}: {display(argv)}{where}{shown}", hint=hint)


class CommandTimeout(CommandFailed):
    """The command ran out of time and was stopped (interrupt, terminate, kill); `returncode` is how it
    ended then (negative: the signal)."""

    def __init__(self, argv: Sequence[str], returncode: int, log: Path | None, tail: str, timeout: float,
                 *, hint: str | None = None) -> None:
        self.timeout = timeout
        super().__init__(argv, returncode, log, tail, hint=hint, headline=f"command timed out after {timeout:g}s")


def checked_argv(argv: Sequence[str], caller: str) -> list[str]:
    """`argv` as a list of strings (paths converted); a string or a mixed list is a programming error."""
    if isinstance(argv, (str, bytes)):
        import shlex

        raise TypeError(f"{caller}() takes an argv list, not a string; did you mean {shlex.split(str(argv))!r}?")
    args = [os.fspath(a) if isinstance(a, os.PathLike) else a for a in argv]
    if not args or not all(isinstance(a, str) for a in args):
        raise TypeError(f"{caller}() takes a non-empty list of strings, got {args!r}")
    return args


def no_null_bytes(argv: Sequence[str], env: Mapping[str, str]) -> None:
    """A NUL byte cannot reach a process (execve ends each string there): exit 2 naming the variable or the
    argument, before anything runs (not subprocess's `ValueError: embedded null byte`)."""
    for key, value in env.items():
        if "\x00" in key or "\x00" in value:
            shown = key.replace("\x00", "\\0")
            raise UsageError(f"the environment variable {shown} holds a NUL byte; no command can be given it",
                             hint=f"remove the NUL (\\0) from {shown} where it is set: a recipe's [env], or "
                                  "the environment")
    for i, arg in enumerate(argv):
        if "\x00" in arg:
            raise UsageError(f"argument {i} of `{argv[0].replace(chr(0), '')}` holds a NUL byte (from a recipe, a lock "
                             "or the command line); no command can be given it",
                             hint="remove the NUL (\\0) from the value it came from")


def display(argv: Sequence[str]) -> str:
    """How a command is shown to a person (never executed)."""
    import shlex

    return shlex.join(str(a) for a in argv)


def merge_env(base: Mapping[str, str], *layers: Mapping[str, str | None]) -> dict[str, str]:
    """Later layers win; a value of None removes the variable (as in nox)."""
    env = dict(base)
    for layer in layers:
        for k, v in layer.items():
            if v is None:
                env.pop(k, None)
            else:
                env[k] = str(v)
    return env


def run(argv: Sequence[str], *, env: Mapping[str, str | None] | None = None, cwd: str | Path | None = None,
        log: Path | None = None, check: bool = True, capture: bool = False, verbose: bool = False,
        timeout: float | None = None, stdin: bytes | int | None = None, success_codes: Sequence[int] = (0,),
        hint: str | None = None, stop_signal: int = signal.SIGTERM) -> Completed:
    """Run `argv`. `env` is the complete environment (None: inherit os.environ).

    capture=True returns stdout/stderr as text (for short queries such as git rev-parse); otherwise the
    merged output is streamed into `log` (and to the terminal when `verbose`). Secrets are masked in logs.
    The command runs in a session (and process group) of its own, tracked until it ends (see CHILDREN): a stop
    signal reaches it through the tool, never past it. `stdin`: bytes written to it, or a file descriptor it
    reads (the read end of a pipe another thread writes: the caller closes it once this returns).
    `stop_signal`: what a stop signal sends it first (0: nothing, it is left to end by itself: a load read from
    a pipe, ended by ending its input, `image/deliver.py`).
    """
    argv = checked_argv(argv, "run")
    full_env = merge_env(os.environ, {}) if env is None else merge_env({}, env)
    no_null_bytes(argv, full_env)
    started = time.monotonic()
    log_file = None
    if log is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
        log_file = open(open_append(log), "a", encoding="utf-8", errors="replace", buffering=1)  # noqa: SIM115 (closed when the process ends; lines: read while it runs)
        log_file.write(f"$ {redact_text(display(argv), full_env)}\n")
        if cwd is not None:
            log_file.write(f"  (in {cwd})\n")
        log_file.flush()
    try:
        try:
            code, out, err, tail, timed_out = _popen(argv, full_env, cwd, log_file, capture, verbose, timeout,
                                                     stdin, stop_signal)
        except _NotStarted as exc:
            if log_file is not None:
                log_file.write(exc.reason + "\n")
            if check:
                raise CommandFailed([redact_text(a, full_env) for a in argv], exc.code, log, exc.reason,
                                    hint=hint or exc.hint) from None
            return Completed(tuple(argv), exc.code, "", exc.reason, time.monotonic() - started, log, started=False)
    finally:
        if log_file is not None:
            log_file.close()
    seconds = time.monotonic() - started
    if log is not None:
        with open(open_append(log), "a", encoding="utf-8") as f:
            f.write(f"# timed out after {timeout:g}s, stopped: exit {code} after {seconds:.1f}s\n" if timed_out
                    else f"# exit {code} after {seconds:.1f}s\n")
    shown = tail if not capture else (out + err if timed_out else err or out)
    if timed_out:
        assert timeout is not None
        raise CommandTimeout([redact_text(a, full_env) for a in argv], code, log,
                             _tail(redact_text(shown, full_env)), timeout, hint=hint)
    if check and code not in success_codes:
        raise CommandFailed([redact_text(a, full_env) for a in argv], code, log, _tail(redact_text(shown, full_env)),
                            hint=hint)
    return Completed(tuple(argv), code, out, err, seconds, log)


class _NotStarted(Exception):
    def __init__(self, code: int, reason: str, hint: str | None) -> None:
        self.code, self.reason, self.hint = code, reason, hint


def _popen(argv: list[str], env: dict[str, str], cwd: str | Path | None, log_file: IO[str] | None, capture: bool,
           verbose: bool, timeout: float | None, stdin: bytes | int | None,
           stop_signal: int = signal.SIGTERM) -> tuple[int, str, str, str, bool]:
    """(exit code, stdout, stderr, output tail, timed out)."""
    import subprocess

    try:
        proc = subprocess.Popen(
            argv, env=env, cwd=cwd,
            stdin=subprocess.PIPE if isinstance(stdin, bytes) else subprocess.DEVNULL if stdin is None else stdin,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE if capture else subprocess.STDOUT,
            start_new_session=True,
        )
    except FileNotFoundError as exc:
        raise _NotStarted(127, f"{argv[0]}: program not found ({exc.strerror})",
                          f"install {argv[0]!r} or put it on PATH") from None
    except PermissionError as exc:
        raise _NotStarted(126, f"{argv[0]}: {exc.strerror}", None) from None
    child = CHILDREN.add(proc, stop_signal)
    try:
        if capture:
            try:
                out_b, err_b = proc.communicate(stdin if isinstance(stdin, bytes) else None, timeout=timeout)
                timed_out = False
            except subprocess.TimeoutExpired:
                _stop(proc)
                timed_out = True
                try:  # what it wrote before it was stopped (unless a child of its own still holds the pipes)
                    out_b, err_b = proc.communicate(timeout=GRACE)
                except subprocess.TimeoutExpired:
                    out_b, err_b = b"", b""
            out = out_b.decode("utf-8", "replace")
            err = err_b.decode("utf-8", "replace")
            if log_file is not None:
                log_file.write(redact_text(out + err, env))
            return proc.returncode, out, err, "", timed_out
        tail: list[str] = []
        reader = threading.Thread(target=_pump, args=(proc, env, log_file, verbose, tail), daemon=True)
        reader.start()
        if isinstance(stdin, bytes):
            assert proc.stdin is not None
            proc.stdin.write(stdin)
            proc.stdin.close()
        timed_out = not exited_within(proc, timeout)
        if timed_out:
            _stop(proc)
        reader.join(timeout=GRACE if timed_out else None)
        return proc.returncode, "", "", "".join(tail), timed_out
    except KeyboardInterrupt:
        child.stop(KILL_GRACE)
        raise
    finally:
        CHILDREN.discard(child)


_POLL_MS_MAX = 1 << 30  # poll's timeout is a C int of milliseconds


def exited_within(proc: subprocess.Popen[bytes], timeout: float | None) -> bool:
    """Wait for `proc` to exit, at most `timeout` seconds; whether it did (reaped). Told by the kernel through a
    pidfd where there is one: CPython's `wait(timeout=)` sleeps in a loop, up to 50 ms a turn, so a command
    of a second ended up to 50 ms before anyone noticed (each build of a bisect's steps)."""
    import subprocess

    if timeout is None:
        proc.wait()
        return True
    try:
        fd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):  # (no pidfd: Linux before 5.3, or not Linux)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return False
        return True
    import select

    try:
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        deadline = time.monotonic() + timeout
        while not poller.poll(min(_POLL_MS_MAX, max(0, int((deadline - time.monotonic()) * 1000) + 1))):
            if time.monotonic() >= deadline:
                return proc.poll() is not None
    finally:
        os.close(fd)
    proc.wait()
    return True


def _pump(proc: subprocess.Popen[bytes], env: Mapping[str, str], log_file: IO[str] | None, verbose: bool,
          tail: list[str]) -> None:
    assert proc.stdout is not None  # started with stdout=PIPE
    for raw in iter(proc.stdout.readline, b""):
        line = redact_text(raw.decode("utf-8", "replace"), env)
        if log_file is not None and not log_file.closed:  # closed: run() gave up waiting after a timeout
            log_file.write(line)
        if verbose:
            sys.stderr.write(line)
        tail.append(line)
        if len(tail) > TAIL_LINES * 4:
            del tail[: len(tail) - TAIL_LINES]
    proc.stdout.close()


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """A command that ran out of time: interrupt, then terminate, then kill (its whole process group)."""
    import subprocess

    for sig, grace in ((signal.SIGINT, 3.0), (signal.SIGTERM, 3.0), (signal.SIGKILL, None)):
        if proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


def _tail(text: str, n: int = TAIL_LINES) -> str:
    return "\n".join(text.rstrip("\n").splitlines()[-n:])


def _indent(text: str) -> str:
    return "\n".join("    " + line for line in text.splitlines())
