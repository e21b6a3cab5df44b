"""The one way to run a command: argv lists, an env mapping, output captured to a log.

Layers (after nox): `run()` checks the call, merges the env and logs the command; `_popen()` runs it,
streams or captures output through secret redaction, and escalates Ctrl-C (interrupt, terminate, kill).
A failing command raises `CommandFailed` with the command, the log path and the tail of its output.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from toolchain.core.redact import redact_text
from toolchain.errors import BuildError

TAIL_LINES = 40


@dataclass(frozen=True)
class Completed:
    argv: tuple[str, ...]
    returncode: int
    stdout: str  # captured stdout when capture=True, else ""
    stderr: str
    seconds: float
    log: Path | None


class CommandFailed(BuildError):
    def __init__(self, argv: Sequence[str], returncode: int, log: Path | None, tail: str,
                 *, hint: str | None = None) -> None:
        self.argv = tuple(argv)
        self.returncode = returncode
        self.log = log
        self.tail = tail
        where = f"\n  log: {log}" if log else ""
        shown = f"\n  last lines:\n{_indent(tail)}" if tail.strip() else ""
        super().__init__(f"command failed with exit code {returncode}: {display(argv)}{where}{shown}",
                         hint=hint)


def display(argv: Sequence[str]) -> str:
    """How a command is shown to a person (never executed)."""
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
        timeout: float | None = None, stdin: bytes | None = None, success_codes: Sequence[int] = (0,),
        hint: str | None = None) -> Completed:
    """Run `argv`. `env` is the complete environment (None: inherit os.environ).

    capture=True returns stdout/stderr as text (for short queries such as git rev-parse); otherwise the
    merged output is streamed into `log` (and to the terminal when `verbose`). Secrets are masked in logs.
    """
    if isinstance(argv, (str, bytes)):
        raise TypeError(f"run() takes an argv list, not a string; did you mean {shlex.split(str(argv))!r}?")
    argv = [os.fspath(a) if isinstance(a, os.PathLike) else a for a in argv]
    if not argv or not all(isinstance(a, str) for a in argv):
        raise TypeError(f"run() takes a non-empty list of strings, got {argv!r}")
    full_env = merge_env(os.environ, {}) if env is None else merge_env({}, env)
    started = time.monotonic()
    log_file = None
    if log is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
        log_file = open(log, "a", encoding="utf-8", errors="replace")
        log_file.write(f"$ {redact_text(display(argv), full_env)}\n")
        if cwd is not None:
            log_file.write(f"  (in {cwd})\n")
        log_file.flush()
    try:
        code, out, err, tail = _popen(argv, full_env, cwd, log_file, capture, verbose, timeout, stdin)
    finally:
        if log_file is not None:
            log_file.close()
    seconds = time.monotonic() - started
    if log is not None:
        with open(log, "a", encoding="utf-8") as f:
            f.write(f"# exit {code} after {seconds:.1f}s\n")
    if check and code not in success_codes:
        shown = tail if not capture else (err or out)
        raise CommandFailed([redact_text(a, full_env) for a in argv], code, log, _tail(redact_text(shown, full_env)),
                            hint=hint)
    return Completed(tuple(argv), code, out, err, seconds, log)


def _popen(argv, env, cwd, log_file, capture, verbose, timeout, stdin):
    try:
        proc = subprocess.Popen(
            argv, env=env, cwd=cwd,
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE if capture else subprocess.STDOUT,
        )
    except FileNotFoundError as exc:
        raise CommandFailed(argv, 127, None, f"{argv[0]}: program not found ({exc.strerror})",
                            hint=f"install {argv[0]!r} or put it on PATH") from None
    except PermissionError as exc:
        raise CommandFailed(argv, 126, None, f"{argv[0]}: {exc.strerror}") from None
    try:
        if capture:
            out_b, err_b = _communicate(proc, stdin, timeout)
            out = out_b.decode("utf-8", "replace")
            err = err_b.decode("utf-8", "replace")
            if log_file is not None:
                log_file.write(redact_text(out + err, env))
            return proc.returncode, out, err, ""
        tail: list[str] = []
        reader = threading.Thread(target=_pump, args=(proc, env, log_file, verbose, tail), daemon=True)
        reader.start()
        if stdin is not None:
            proc.stdin.write(stdin)
            proc.stdin.close()
        _wait(proc, timeout)
        reader.join()
        return proc.returncode, "", "", "".join(tail)
    except KeyboardInterrupt:
        _stop(proc)
        raise


def _communicate(proc, stdin, timeout):
    try:
        return proc.communicate(stdin, timeout=timeout)
    except subprocess.TimeoutExpired:
        _stop(proc)
        raise BuildError(f"command timed out after {timeout:.0f}s: {display(proc.args)}") from None


def _wait(proc, timeout):
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        _stop(proc)
        raise BuildError(f"command timed out after {timeout:.0f}s: {display(proc.args)}") from None


def _pump(proc, env, log_file, verbose, tail):
    for raw in iter(proc.stdout.readline, b""):
        line = redact_text(raw.decode("utf-8", "replace"), env)
        if log_file is not None:
            log_file.write(line)
        if verbose:
            sys.stderr.write(line)
        tail.append(line)
        if len(tail) > TAIL_LINES * 4:
            del tail[: len(tail) - TAIL_LINES]
    proc.stdout.close()


def _stop(proc: subprocess.Popen) -> None:
    """Ctrl-C escalation: interrupt, then terminate, then kill."""
    for action, grace in ((lambda: proc.send_signal(signal.SIGINT), 3.0), (proc.terminate, 3.0),
                          (proc.kill, None)):
        if proc.poll() is not None:
            return
        try:
            action()
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


def _tail(text: str, n: int = TAIL_LINES) -> str:
    return "\n".join(text.rstrip("\n").splitlines()[-n:])


def _indent(text: str) -> str:
    return "\n".join("    " + line for line in text.splitlines())
