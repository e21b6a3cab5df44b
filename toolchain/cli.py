"""toolchain: build vLLM, vllm-xpu-kernels and ARK wheels for Intel Arc Pro B60/B70 from a recipe, record
them in a lock, smoke-test a lock, bisect a regression and check that a build reproduces.

Start with `toolchain recipes`, then `toolchain plan --recipe NAME` and `toolchain build --recipe NAME`.
`toolchain COMMAND --help` describes each command."""

from __future__ import annotations

import argparse
import contextlib
import errno
import functools
import gc
import importlib
import os
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from types import FrameType
from typing import Any, NoReturn

from toolchain import __version__
from toolchain.commands import options
from toolchain.console import UI, CommandResult, GuardedStream
from toolchain.core.proc.children import CHILDREN
from toolchain.core.proc.signals import STOPPING, Interrupted, stop_requested
from toolchain.errors import ToolError, UsageError

EXIT_CODES = """\
exit codes:
  0    success
  1    a build or a test failed (also: no space left on the device; the output could not be written:
       stdout or stderr closed or full)
  141  the reader of the output left (a broken pipe, as `yes | head`: 128 + SIGPIPE), the run otherwise done
  2    bad input or usage: a recipe, a lock, an option, a directory that cannot be used
  130  interrupted by Ctrl-C (SIGINT); 143 by SIGTERM, 129 by SIGHUP (128 + the signal's number):
       the commands the tool started are stopped first"""

# Each module exposes register(subparsers); its parser sets_defaults(handler=fn(args, ui) -> CommandResult).
# Only the module of the command being run is imported (a warm no-op build must start fast).
COMMANDS = {
    "build": "toolchain.commands.build",
    "plan": "toolchain.commands.plan",
    "update": "toolchain.commands.update",
    "recipes": "toolchain.commands.recipes",
    "smoke": "toolchain.commands.smoke",
    "bisect": "toolchain.commands.bisect",
    "verify-repro": "toolchain.commands.verify_repro",
    "cache": "toolchain.commands.cache",
    "lock": "toolchain.commands.lock",
    "image": "toolchain.commands.image",
    "doctor": "toolchain.commands.doctor",
}


def command_of(argv: Sequence[str]) -> str | None:
    """The command of a command line: its first word that is not an option."""
    return next((a for a in argv if not a.startswith("-")), None)


@functools.cache
def _help_width() -> int:
    """The width argparse gives help text when it is not told one (the terminal's, less 2)."""
    import shutil

    return shutil.get_terminal_size().columns - 2


def _closest(word: str, choices: Sequence[str]) -> str | None:
    import difflib

    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return close[0] if close else None


class _Parser(argparse.ArgumentParser):
    def _get_formatter(self) -> argparse.HelpFormatter:
        """argparse's, with the terminal's width asked once a run: argparse makes a formatter for every option
        it adds (to check its metavar), and each asked the terminal again. (Every HelpFormatter takes `width`.)"""
        return self.formatter_class(prog=self.prog, width=_help_width())  # type: ignore[call-arg]

    def error(self, message: str) -> NoReturn:  # usage errors: exit 2, no traceback
        import re

        m = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)$", message)
        guess = _closest(m.group(1), re.findall(r"'([^']*)'", m.group(2))) if m else None
        if guess:
            message += f" (did you mean {guess}?)"
        raise UsageError(f"{self.prog}: {message}", hint=f"see `{self.prog} --help`")


class _TopParser(_Parser):
    """`toolchain`: merges the global options and finalizes the shared ones after parsing; an unknown
    option gets a suggestion from the options of the command it was given to."""

    commands: dict[str, argparse.ArgumentParser]

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        ns, extras = super().parse_known_args(args, namespace)
        return options.finish(ns), extras

    def parse_args(self, args: Any = None, namespace: Any = None) -> Any:
        ns, extras = self.parse_known_args(args, namespace)
        if extras:
            where = self.commands.get(getattr(ns, "command", None) or "", self)
            known = options.option_strings([where])
            unknown = [e for e in extras if e.startswith("-")]
            close = {e: g for e in unknown if (g := _closest(e.split("=", 1)[0], known))}
            guesses = [g if len(unknown) == 1 else f"{g} for {e}" for e, g in close.items()]
            raise UsageError(f"{where.prog}: unrecognized arguments: {' '.join(extras)}"
                             + (f" (did you mean {', '.join(guesses)}?)" if guesses else ""),
                             hint=f"see `{where.prog} --help`")
        return ns


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    parser = _TopParser(prog="toolchain", description=__doc__, epilog=EXIT_CODES,
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    options.add_global(parser, command=False)
    parser.add_argument("--version", action="version", version=f"toolchain {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in dict.fromkeys((COMMANDS[only],) if only in COMMANDS else COMMANDS.values()):
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name and (name == exc.name or name.startswith(exc.name + ".")):
                continue  # a command not shipped in this build
            raise
        module.register(sub)
    parser.commands = dict(sub.choices)
    for command in parser.commands.values():
        options.add_global(command, command=True)
        command.epilog = command.epilog or EXIT_CODES
        command.formatter_class = argparse.RawDescriptionHelpFormatter
    return parser


def main(argv: list[str] | None = None) -> int:
    args_list = sys.argv[1:] if argv is None else argv
    _fill_closed_std_fds()
    from toolchain.core.trust import keep_writes_private

    keep_writes_private()  # (a umask of 002 would make the cache's own folders ones it may not trust)
    with _guarded_std_streams() as streams:
        try:
            code = _main(args_list)
        except SystemExit as exc:  # argparse's --help, --version and usage errors: their output is checked too
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
        return _output_failed(streams, code)


def _main(args_list: list[str]) -> int:
    ui = UI(json_mode="--json" in args_list)
    try:
        with _stop_on_signals(), _stdout_kept_for_json(ui.json_mode):
            parser = _build_parser_frozen(command_of(args_list))
            args = parser.parse_args(args_list)
            ui = UI(json_mode=args.json, verbose=args.verbose, progress_interval=args.progress_interval)
            if not getattr(args, "handler", None):
                if not ui.json_mode:
                    parser.print_help(sys.stderr)
                raise UsageError("no command given", hint="see `toolchain --help` for the commands")
            handler: Callable[[argparse.Namespace, UI], CommandResult] = args.handler
            result = handler(args, ui)
        _late_warnings(ui)
        ui.emit(result)
        return result.exit_code
    except ToolError as err:
        _late_warnings(ui)
        _report(ui, err)
        return err.return_code
    except Interrupted as exc:
        CHILDREN.stop_all()  # (the handler started it: this waits until nothing the tool started is left)
        _report(ui, ToolError(f"interrupted by {exc.signame}"), code=exc.exit_code)
        return exc.exit_code
    except KeyboardInterrupt:
        CHILDREN.stop_all()
        _report(ui, ToolError("interrupted by SIGINT (Ctrl-C)"), code=130)
        return 130
    except OSError as exc:
        problem = _environment_error(exc)
        if problem is None:
            raise
        _report(ui, problem)
        return problem.return_code
    finally:  # the stop it noted is over: a later call in this process (a library caller, a test) is not
        STOPPING.clear()  # stopping, and talks to a registry again (sharing/transport.py refuses while it is set)


def _late_warnings(ui: UI) -> None:
    """What a layer without the console noted for the user: build records not read back (`lock.buildrecord.read_record`)."""
    lock = sys.modules.get("toolchain.lock.buildrecord")  # (not imported by this run: nothing to say)
    said = getattr(lock, "record_warnings", None)  # (None too while a thread still imports it: nothing read yet)
    if said is not None:
        for warning in said():
            ui.warn(warning)


def _build_parser_frozen(first: str | None) -> argparse.ArgumentParser:
    """build_parser (which imports the command's modules) with the cyclic collector off, then, once per
    process, what exists (modules, classes, functions, the parser: alive until the process ends) moved out of
    its sight (`gc.freeze`). Imports make almost no cyclic garbage, yet the collector ran ~24 times over their
    objects; and every full collection of the run, and the ones the interpreter makes at exit, walked the
    ~19,000 objects of the imports (a warm build's exit took 24-50 ms, 7 ms frozen). Reference counting still
    frees what is frozen; what becomes cyclic garbage among it stays until the process ends."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return build_parser(first)
    finally:
        if not gc.get_freeze_count():
            gc.freeze()
        if enabled:
            gc.enable()


def _report(ui: UI, err: ToolError, code: int | None = None) -> None:
    code = err.return_code if code is None else code
    if ui.json_mode:
        payload: dict[str, Any] = {"ok": False, "error": str(err), "hint": err.hint, "exit_code": code,
                                   "kind": type(err).__name__ if code < 128 else "Interrupted"}
        problems = getattr(err, "problems", None)
        if problems:
            payload["problems"] = problems
        ui.emit_json(payload)
    ui.error(str(err), err.hint)
    if ui.github:  # a workflow annotation: on the recipe's line where a problem names one
        from toolchain.console import recipe_locations

        located = recipe_locations(list(getattr(err, "problems", None) or [str(err)]), err.hint or "")
        for file, line, problem in located:
            ui.github_error(problem, file=file, line=line, title=type(err).__name__)
        if not located:
            ui.github_error(str(err) + (f"\nTIP: {err.hint}" if err.hint else ""), title=type(err).__name__)


# ---- the environment: full disks, read-only mounts ---------------------------------------------------------

NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
CANNOT_WRITE = (errno.EROFS, errno.EACCES, errno.ENOTDIR)


def _environment_error(exc: OSError) -> ToolError | None:
    """A full disk (exit 1), a place that cannot be written (exit 2) or a lock of the cache's another user holds
    (exit 2: core/fs `file_lock` does not wait for them) as one line, not a traceback."""
    from toolchain.core.fs import LockWait

    if isinstance(exc, LockWait):
        if not exc.foreign:
            return ToolError(str(exc), hint="wait for it to finish, then run again")
        return UsageError(f"{exc}: another user holds this lock of the tool's; the run does not wait for them",
                          hint=f"ask them to stop it, or use a cache of your own (--cache-dir); a user who can "
                               f"read {exc.path} can hold it (chmod o-rx on the cache folder prevents that)")
    where = f" ({exc.filename})" if exc.filename else ""
    if exc.errno in NO_SPACE:
        return ToolError(f"no space left on the device{where}: {os.strerror(exc.errno)}",
                         hint="free space there, or pass --out / --cache-dir on another file system")
    if exc.errno in CANNOT_WRITE:
        return UsageError(f"cannot write{where}: {os.strerror(exc.errno)}",
                          hint="pass --out / --cache-dir as directories you can write to")
    return None


# ---- output errors -----------------------------------------------------------------------------------------

BROKEN_PIPE = 128 + signal.SIGPIPE  # 141: what a shell reports of `yes | head`'s writer


@contextlib.contextmanager
def _guarded_std_streams() -> Iterator[list[GuardedStream]]:
    """sys.stdout and sys.stderr as `GuardedStream`s for the run: a failed write to either ends that output,
    not the command, and is never taken for a problem of the disk the build writes (`_output_failed`)."""
    saved = sys.stdout, sys.stderr
    streams = [GuardedStream(s, name) for s, name in ((saved[0], "stdout"), (saved[1], "stderr")) if s is not None]
    for guard in streams:
        setattr(sys, guard.name, guard)
    try:
        yield streams
    finally:
        for guard in streams:
            guard.flush()
        sys.stdout, sys.stderr = saved


def _output_failed(streams: list[GuardedStream], code: int) -> int:
    """The run's exit code once its output is written: `code`, unless it is 0 and writing the output failed:
    then 141 when the reader left (a broken pipe, silent as `yes | head` is), else 1 with an ERROR line on
    stderr naming the stream and its error (the command itself finished: its files are written)."""
    for guard in streams:
        guard.flush()  # (what is still buffered: its failure counts too)
    failed = [g for g in streams if g.failed is not None]
    if not failed or code != 0:
        return code
    if any(g.failed is not None and g.failed.errno == errno.EPIPE for g in failed):
        return BROKEN_PIPE
    with contextlib.suppress(OSError, ValueError):
        for guard in failed:
            sys.stderr.write(f"ERROR: the command finished, but its output could not be written to {guard.name}: "
                             f"{guard.failed.strerror if guard.failed else ''}\n")
        sys.stderr.flush()
    return 1


# ---- signals and stdout ------------------------------------------------------------------------------------

@contextlib.contextmanager
def _stop_on_signals() -> Iterator[None]:
    """SIGTERM and SIGHUP raise `Interrupted`; SIGINT raises KeyboardInterrupt as Python's default does (once:
    later ones are ignored while the first unwinds, as in `proc.interruptible`). Each first stops what the
    tool started (`proc.stop_requested`): every child runs in a process group of its own, so a signal sent to
    the tool's PID alone, or to its group, reaches them only through the tool, whether it leads its group or
    not (started from a script)."""
    def raise_interrupted(signum: int, frame: FrameType | None) -> None:
        if not STOPPING.is_set():
            stop_requested(signum)
        raise Interrupted(signum)

    def ctrl_c(signum: int, frame: FrameType | None) -> None:
        if not STOPPING.is_set():  # a second Ctrl-C does not cut short the clean-up of the first
            stop_requested(signum)
            raise KeyboardInterrupt

    STOPPING.clear()
    saved = {}
    try:
        for sig in (signal.SIGTERM, signal.SIGHUP):
            saved[sig] = signal.signal(sig, raise_interrupted)
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # not when ignored (a background job)
            saved[signal.SIGINT] = signal.signal(signal.SIGINT, ctrl_c)
    except ValueError:  # not the main thread: leave the signals alone
        pass
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


def _fill_closed_std_fds() -> None:
    """A standard stream closed by the caller (`>&-`) is /dev/null for the run: otherwise the next file the tool
    opens would take its number, and a child writing to its stdout would write into it. Its output is lost,
    as the caller asked (sys.stdout stays None: nothing is printed, the exit code is the run's)."""
    for fd, flags in ((0, os.O_RDONLY), (1, os.O_WRONLY), (2, os.O_WRONLY)):
        try:
            os.fstat(fd)
        except OSError:
            opened = os.open(os.devnull, flags)
            if opened != fd:
                os.dup2(opened, fd)
                os.close(opened)


@contextlib.contextmanager
def _stdout_kept_for_json(json_mode: bool) -> Iterator[None]:
    """While a `--json` command runs, file descriptor 1 and sys.stdout go to stderr, so that nothing (a
    child process, a stray print) adds to the one JSON document written afterwards."""
    if not json_mode or sys.stdout is None or sys.stderr is None:  # (no stdout: nothing to keep apart)
        yield
        return
    try:
        sys.stdout.flush()
        saved = os.dup(1)
        os.dup2(2, 1)
    except (OSError, ValueError):  # no usable stdout or stderr: nothing to keep apart
        yield
        return
    old = sys.stdout
    sys.stdout = sys.stderr
    try:
        yield
    finally:
        sys.stderr.flush()
        sys.stdout = old
        os.dup2(saved, 1)
        os.close(saved)
