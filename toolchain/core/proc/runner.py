"""The one way to run a command: argv lists, an env mapping, output captured to a log.

Layers (after nox): `run()` checks the call, merges the env and logs the command; `_popen()` runs it,
streams or captures output through secret redaction, and escalates Ctrl-C (interrupt, terminate, kill).
A failing command raises `CommandFailed` with the command, the log path and the tail of its output; one that
runs out of time raises `CommandTimeout` (a `CommandFailed`), whatever `check` says. A program that cannot be
started (not found: 127, not executable: 126) raises `CommandFailed` too, or with `check=False` comes back as
a `Completed` with that code, the reason in `stderr` and `started=False`.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shlex
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    import subprocess  # imported when a command runs: a warm no-op build runs none

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


def _checked_argv(argv: Sequence[str], caller: str) -> list[str]:
    """`argv` as a list of strings (paths converted); a string or a mixed list is a programming error."""
    if isinstance(argv, (str, bytes)):
        raise TypeError(f"{caller}() takes an argv list, not a string; did you mean {shlex.split(str(argv))!r}?")
    args = [os.fspath(a) if isinstance(a, os.PathLike) else a for a in argv]
    if not args or not all(isinstance(a, str) for a in args):
        raise TypeError(f"{caller}() takes a non-empty list of strings, got {args!r}")
    return args


def _no_null_bytes(argv: Sequence[str], env: Mapping[str, str]) -> None:
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
    The command runs in a session (and process group) of its own, tracked until it ends (see CHILDREN): a stop
    signal reaches it through the tool, never past it.
    """
    argv = _checked_argv(argv, "run")
    full_env = merge_env(os.environ, {}) if env is None else merge_env({}, env)
    _no_null_bytes(argv, full_env)
    started = time.monotonic()
    log_file = None
    if log is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
        log_file = open(log, "a", encoding="utf-8", errors="replace", buffering=1)  # noqa: SIM115 (closed when the process ends; lines: read while it runs)
        log_file.write(f"$ {redact_text(display(argv), full_env)}\n")
        if cwd is not None:
            log_file.write(f"  (in {cwd})\n")
        log_file.flush()
    try:
        try:
            code, out, err, tail, timed_out = _popen(argv, full_env, cwd, log_file, capture, verbose, timeout,
                                                     stdin)
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
        with open(log, "a", encoding="utf-8") as f:
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
           verbose: bool, timeout: float | None, stdin: bytes | None) -> tuple[int, str, str, str, bool]:
    """(exit code, stdout, stderr, output tail, timed out)."""
    import subprocess

    try:
        proc = subprocess.Popen(
            argv, env=env, cwd=cwd,
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE if capture else subprocess.STDOUT,
            start_new_session=True,
        )
    except FileNotFoundError as exc:
        raise _NotStarted(127, f"{argv[0]}: program not found ({exc.strerror})",
                          f"install {argv[0]!r} or put it on PATH") from None
    except PermissionError as exc:
        raise _NotStarted(126, f"{argv[0]}: {exc.strerror}", None) from None
    child = CHILDREN.add(proc)
    try:
        if capture:
            try:
                out_b, err_b = proc.communicate(stdin, timeout=timeout)
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
        if stdin is not None:
            assert proc.stdin is not None
            proc.stdin.write(stdin)
            proc.stdin.close()
        try:
            proc.wait(timeout=timeout)
            timed_out = False
        except subprocess.TimeoutExpired:
            _stop(proc)
            timed_out = True
        reader.join(timeout=GRACE if timed_out else None)
        return proc.returncode, "", "", "".join(tail), timed_out
    except KeyboardInterrupt:
        child.stop(KILL_GRACE)
        raise
    finally:
        CHILDREN.discard(child)


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


# --------------------------------------------------------------------------------------------- background

STOP_GRACE = 10.0      # Background.stop(): seconds after SIGINT before SIGTERM (half that again before SIGKILL)
_GROUP_POLL = 0.05
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
        import subprocess

        try:
            code = self._proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None
        self._noted(code)
        self._pump.join(_DRAIN_SECONDS)
        return code

    def group_alive(self) -> bool:
        """Whether any process of the group (the leader or what it spawned) still runs. Zombies (dead,
        waiting for init to reap them) do not count."""
        if self._child is not None:
            return self._child.alive()
        return self.alive() or _group_alive(self.pid)

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
            time.sleep(_GROUP_POLL)

    def _wait_exit(self) -> None:
        code = self._noted(self._proc.wait())
        if self.log is not None:
            self._pump.join()  # the trailer after the last line of output
            with open(self.log, "a", encoding="utf-8") as f:
                f.write(f"# {exit_status(code)}\n")

    def _copy(self, env: Mapping[str, str], verbose: bool) -> None:
        stream = self._proc.stdout
        assert stream is not None
        log_file = open(self.log, "a", encoding="utf-8", errors="replace") if self.log is not None else None  # noqa: SIM115 (closed below)
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


def _group_alive(pgid: int) -> bool:
    """Whether a process of group `pgid` that is not a zombie still runs."""
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return _group_has_live_member(pgid)


def _group_has_live_member(pgid: int) -> bool:
    """Whether /proc shows a process of group `pgid` that is not a zombie (True where /proc cannot tell)."""
    try:
        entries = [e for e in os.listdir("/proc") if e.isdigit()]
    except OSError:
        return True
    for entry in entries:
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8", errors="replace") as f:
                stat = f.read()
        except OSError:
            continue
        state, _ppid, pgrp = stat[stat.rindex(")") + 2:].split()[:3]
        if int(pgrp) == pgid and state not in ("Z", "X"):
            return True
    return False


def start(argv: Sequence[str], *, env: Mapping[str, str | None] | None = None, cwd: str | Path | None = None,
          log: Path | None = None, verbose: bool = False, hint: str | None = None,
          log_command: bool = True) -> Background:
    """Start `argv` in the background, in a new process group (stop it with `.stop()` or a `with` block).
    `env` is the complete environment (None: inherit os.environ); output is appended to `log`, after a
    `$ command` line unless the caller wrote its own (`log_command=False`)."""
    import subprocess

    args = _checked_argv(argv, "start")
    full_env = merge_env(os.environ, {}) if env is None else merge_env({}, env)
    _no_null_bytes(args, full_env)
    if log is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
        if log_command:
            with open(log, "a", encoding="utf-8") as f:
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


# --------------------------------------------------------------------------------------------- signals

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

STOPPING = threading.Event()
"""Set when a stop signal reached the tool (by `interruptible()`, and by the CLI's handlers): a command that
fails from then on may have failed because the signal reached it too (a Ctrl-C goes to the whole process
group), so its failure is no finding to remember (e.g. a build ahead, in another thread, as unbuildable)."""


class Interrupted(KeyboardInterrupt):
    """A stop request (Ctrl-C, SIGTERM from CI or `timeout`, SIGHUP from a closed terminal), raised where the
    main thread is, so that `finally` and `with` blocks stop what they started. A KeyboardInterrupt, so code
    that handles Ctrl-C handles all three."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        self.signame = signal.Signals(signum).name
        super().__init__(self.signame)

    @property
    def exit_code(self) -> int:
        """The shell's exit code for the signal that stopped the command (128 + the signal number)."""
        return 128 + self.signum

    @classmethod
    def of(cls, exc: KeyboardInterrupt) -> Interrupted:
        """`exc` as an Interrupted: a plain Ctrl-C is SIGINT; another handler's exception keeps its `signum`."""
        return exc if isinstance(exc, Interrupted) else cls(int(getattr(exc, "signum", signal.SIGINT)))


@contextlib.contextmanager
def interruptible(signals: Sequence[int] = STOP_SIGNALS) -> Iterator[None]:
    """Inside: each of `signals` raises `Interrupted` in the main thread (once; later ones are ignored while
    the first one unwinds, so clean-up is not cut short). Handlers someone else installed, and signals
    ignored on purpose (nohup), are left alone. Outside the main thread this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    fired: list[int] = []

    def handler(signum: int, _frame: object) -> None:
        if not fired:
            stop_requested(signum)
        fired.append(signum)
        if len(fired) == 1:
            raise Interrupted(signum)

    previous = {}
    for sig in signals:
        old = signal.getsignal(sig)
        if old in (signal.SIG_DFL, signal.default_int_handler):
            previous[sig] = old
            signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
        if fired:  # the stop it noted is over (cli.main clears its own): a later command in this process
            STOPPING.clear()  # (a library caller, a test) must not read it as a stop reaching its child


# --------------------------------------------------------------------------------------------- children

KILL_GRACE = 3.0   # after a stop signal: seconds between SIGTERM to every child and SIGKILL to what is left
SERVER_GRACE = 8.0  # the same for a server (SIGINT first): its graceful shutdown, in a container too
_CGROUP_ROOT: list[Path | None] = []  # [where the tool's children's cgroups go] once looked for ([None]: nowhere)
_LINGERING: set[Path] = set()  # cgroups of ended children that still held a process when released
_LINGER_LOCK = threading.Lock()


class Child:
    """A command the tool started: its process group (its pid: each child leads a session of its own) and,
    where one could be made, a cgroup v2 of its own, which holds what escapes the group (setsid, daemons)."""

    def __init__(self, proc: subprocess.Popen[bytes], first: int = signal.SIGTERM) -> None:
        self.proc = proc
        self.pid = proc.pid
        self.first = first  # what a stop signal sends it first (a server: SIGINT, its graceful shutdown)
        self.sent: set[int] = set()
        self.cgroup = _cgroup_for(proc.pid)

    def signal(self, sig: int) -> None:
        """`sig` to the process group and to each process in the cgroup."""
        self.sent.add(sig)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, sig)
        if self.cgroup is None or sig == signal.SIGINT:
            return  # a server's graceful stop goes to its group: what it started outside (an engine exec whose
            # signals its supervisor forwards) is its own to stop; SIGTERM and SIGKILL reach the whole cgroup
        if sig == signal.SIGKILL and _write(self.cgroup / "cgroup.kill", "1"):
            return
        for pid in self._cgroup_pids():  # what left the group (one signal each: a second SIGINT is another)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                if os.getpgid(pid) != self.pid:
                    os.kill(pid, sig)

    def _cgroup_pids(self) -> list[int]:
        try:
            return [int(p) for p in (self.cgroup / "cgroup.procs").read_text().split()] if self.cgroup else []
        except (OSError, ValueError):
            return []

    def alive(self) -> bool:
        """Whether anything of it still runs: the leader, its group or (where it has one) its cgroup."""
        if self.proc.poll() is None:
            return True
        if self.cgroup is not None and self._cgroup_pids():
            return True
        return _group_alive(self.pid)

    def stop(self, grace: float = KILL_GRACE) -> None:
        """SIGTERM to all of it, SIGKILL after `grace` seconds to what is left; returns when nothing is left
        (or after `grace` more seconds: a process stuck in the kernel)."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            if not self.alive():
                break
            self.signal(sig)
            deadline = time.monotonic() + grace
            while self.alive() and time.monotonic() < deadline:
                time.sleep(_GROUP_POLL)
        self.release()

    def release(self) -> None:
        """Remove its cgroup, or, while it still holds a process (podman's conmon, which watches a detached
        container for as long as it runs, stays in the cgroup of the `podman run` that started it; a daemon
        the command left behind), note it: the next child's start and the tool's exit remove it once empty."""
        if self.cgroup is not None and not _remove_cgroup(self.cgroup):
            with _LINGER_LOCK:
                _LINGERING.add(self.cgroup)


class Children:
    """Every command the tool started and that has not ended yet (`CHILDREN`): what a stop signal stops."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._live: dict[int, Child] = {}

    def add(self, proc: subprocess.Popen[bytes], first: int = signal.SIGTERM) -> Child:
        """Track a started process, to be stopped (first with signal `first`) if the tool is interrupted."""
        child = Child(proc, first)
        with self._lock:
            self._live[child.pid] = child
        return child

    def discard(self, child: Child) -> None:
        """Stop tracking a child that has ended."""
        with self._lock:
            self._live.pop(child.pid, None)
        child.release()

    def live(self) -> list[Child]:
        """The children still tracked."""
        with self._lock:
            return list(self._live.values())

    def terminate(self) -> list[Child]:
        """SIGTERM to every child now (safe in a signal handler: no waiting); returns them."""
        children = self.live()
        for child in children:
            child.signal(child.first)
        return children

    def stop_all(self, grace: float = KILL_GRACE) -> None:
        """Stop every child (SIGTERM, or SIGINT to a server) and wait until none is left: SIGKILL to what is
        left after `grace` seconds, or after SERVER_GRACE for a server, whose graceful shutdown (forwarded into
        a container by its supervisor, an engine exec away) takes longer than a compiler's end."""
        children = self.live()
        for child in children:
            if child.first not in child.sent:  # (not twice: a second SIGINT cuts a server's shutdown short)
                child.signal(child.first)
        started = time.monotonic()
        longest = max((self._grace(c, grace) for c in children), default=grace)
        while time.monotonic() < started + longest + grace:
            alive = [c for c in children if c.alive()]
            if not alive:
                break
            waited = time.monotonic() - started
            for child in alive:
                if waited >= self._grace(child, grace) and signal.SIGKILL not in child.sent:
                    child.signal(signal.SIGKILL)
            time.sleep(_GROUP_POLL)
        for child in children:
            child.release()

    @staticmethod
    def _grace(child: Child, grace: float) -> float:
        return max(grace, SERVER_GRACE) if child.first == signal.SIGINT else grace

    def stop_soon(self, grace: float = KILL_GRACE) -> threading.Thread:
        """`stop_all` in a thread of its own, started now (from a signal handler: the main thread may be
        waiting for a worker whose command ignores SIGTERM)."""
        thread = threading.Thread(target=self.stop_all, args=(grace,), name="stop-children", daemon=True)
        thread.start()
        return thread


CHILDREN = Children()

_ON_STOP: list[Callable[[], None]] = []


def on_stop(callback: Callable[[], None]) -> None:
    """Call `callback` (no waiting in it) when a stop signal reaches the tool: a network client drops its
    pending requests there (build/remote.py), so nothing waits out a timeout."""
    _ON_STOP.append(callback)


def stop_requested(signum: int) -> None:
    """What a stop signal does first, in the handler (cli.py, `interruptible`): note it (`STOPPING`), drop
    pending network requests, SIGTERM every child and SIGKILL what is left after KILL_GRACE, in a thread."""
    STOPPING.set()
    for callback in list(_ON_STOP):
        with contextlib.suppress(Exception):
            callback()
    CHILDREN.terminate()  # now, in the handler: the main thread's clean-up then sees what was sent
    CHILDREN.stop_soon()


def _cgroup_for(pid: int) -> Path | None:
    """A new cgroup v2 holding `pid` (moved there as soon as it started, before it could do much), under the
    tool's own cgroup; None where none can be made (no cgroup v2, no right to write it)."""
    if not _CGROUP_ROOT:
        _CGROUP_ROOT.append(_find_cgroup_root())
    root = _CGROUP_ROOT[0]
    if root is None:
        return None
    if _LINGERING:
        sweep_cgroups()
    path = root / f"toolchain-{os.getpid()}-{pid}"
    try:
        path.mkdir()
    except OSError:
        return None
    if _write(path / "cgroup.procs", str(pid)):
        return path
    with contextlib.suppress(OSError):
        path.rmdir()
    return None


def _find_cgroup_root() -> Path | None:
    """The directory of the tool's own cgroup v2 if it may make cgroups there (TOOLCHAIN_NO_CGROUP=1: never)."""
    if os.environ.get("TOOLCHAIN_NO_CGROUP") == "1":
        return None
    try:
        own = next((line[3:] for line in Path("/proc/self/cgroup").read_text().splitlines()
                    if line.startswith("0::")), None)
        mounts = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return None
    if own is None:
        return None
    for line in mounts:
        fields = line.split()
        if " - cgroup2 " in line and len(fields) > 4:
            base = Path(fields[4]) / own.lstrip("/")
            if not os.access(base, os.W_OK):
                return None
            for stale in base.glob("toolchain-*-*"):  # left by a tool that was killed (-9)
                with contextlib.suppress(ValueError, OSError):
                    if not Path(f"/proc/{int(stale.name.split('-')[1])}").exists():
                        _reap_cgroup(stale)
            return base
    return None


def _reap_cgroup(path: Path) -> None:
    """End what still runs in the cgroup of a child of a tool that was killed (a build step nobody waits for
    any more: SIGKILL reaches the tool alone, not its children, which each lead a group of their own) and
    remove the cgroup."""
    if not _write(path / "cgroup.kill", "1"):  # (Linux < 5.14: each process, and those of its sub-cgroups)
        for procs in [path / "cgroup.procs", *path.rglob("*/cgroup.procs")]:
            with contextlib.suppress(OSError, ValueError):
                for pid in procs.read_text().split():
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(int(pid), signal.SIGKILL)
    deadline = time.monotonic() + KILL_GRACE
    while not _remove_cgroup(path) and time.monotonic() < deadline:  # (a killed process takes a moment)
        time.sleep(_GROUP_POLL)


def owner_token() -> str:
    """This process as `BOOT-ID/PID/START`: what the tool leaves behind (a container) carries it, so that a
    later run can tell whether its owner is gone (killed with SIGKILL), never mistaking a reused pid or a
    process of another boot or machine (a remote engine) for it."""
    return f"{_boot_id()}/{os.getpid()}/{_start_time(os.getpid())}"


def owner_gone(token: str) -> bool:
    """Whether the process `token` (`owner_token()`) names has ended. A token of another boot (or machine) is
    not known to be gone: it may run elsewhere."""
    boot, _, rest = token.partition("/")
    pid, _, start = rest.partition("/")
    if not boot or boot != _boot_id() or not pid.isdigit():
        return False
    return _start_time(int(pid)) != start


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def _start_time(pid: int) -> str:
    """When process `pid` started (clock ticks since boot: /proc/PID/stat field 22), "" when none runs."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    fields = text[text.rindex(")") + 2:].split()
    return fields[19] if len(fields) > 19 else ""


def sweep_cgroups() -> None:
    """Remove the cgroups of ended children that have emptied since they were released (at each child's start
    and at the tool's exit); those still holding a process stay noted (and a later tool's start removes them
    once empty, as it does what a killed tool left)."""
    with _LINGER_LOCK:
        lingering = list(_LINGERING)
    for path in lingering:
        if _remove_cgroup(path):
            with _LINGER_LOCK:
                _LINGERING.discard(path)


atexit.register(sweep_cgroups)


def _remove_cgroup(path: Path) -> bool:
    """Remove cgroup `path` and the cgroups under it (a tool run by the tool makes its own there), deepest
    first; one that still holds a process stays. Whether `path` is gone."""
    with contextlib.suppress(OSError):
        for sub in sorted((p for p in path.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
            with contextlib.suppress(OSError):
                sub.rmdir()
        path.rmdir()
    return not path.exists()


def _write(path: Path, text: str) -> bool:
    try:
        with open(path, "w", encoding="ascii") as f:
            f.write(text)
        return True
    except OSError:
        return False
