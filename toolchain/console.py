"""Human output (rich, on stderr for progress) and `--json` output (one JSON document on stdout).

Command handlers receive a `UI` and return a `CommandResult`; only `cli.main()` prints the result.
Messages may use rich markup; text that comes from a user (names, paths, error messages) goes through
`literal()` or is printed with `markup=False`, and emoji codes are never expanded (`sys:x:3` stays as is).
Terminal control characters in any text printed (a recipe's `ESC[2J` or OSC title sequence in a component
name, a description, an error) are shown escaped (`\x1b`), in one place: the consoles' rendering
(`_text_escaped`), which every ERROR line, warning, progress line and table goes through; the styles the
tool itself adds are not text and stay.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolchain.core.record import field, record
from toolchain.core.regex import Regex

if TYPE_CHECKING:  # rich is imported on first use: `--json` runs of warm builds never pay for it
    from rich.console import Console
    from rich.progress import Progress
    from rich.table import Table


@record
class Grid:
    """A table that fits any width by wrapping rows, never characters (`render`): each cell whole, a cell's
    lines split at "\n". Where the row does not fit, the first columns that do stay on the row's line and
    each other column follows below it as "  column  value"."""

    title: str
    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    prose: bool = False  # the last column is text: wrapped at spaces to the room the row leaves it (or below)

    def render(self, width: int) -> list[str]:
        """The plain-text lines at `width` columns (a value longer than the whole width stays whole)."""
        cells = [[c.split("\n") if c else ["-"] for c in row] for row in self.rows]
        if self.prose and cells:
            cells = _wrap_last(self.columns, cells, width)
        widths = [max([len(name)] + [len(line) for row in cells for line in row[i]])
                  for i, name in enumerate(self.columns)]
        out = [self.title] if self.title else []
        if sum(widths) + 2 * (len(widths) - 1) <= width:
            out.append(_join([n.ljust(w) for n, w in zip(self.columns, widths, strict=False)]))
            for row in cells:
                for k in range(max(len(c) for c in row)):
                    out.append(_join([(c[k] if k < len(c) else "").ljust(w) for c, w in zip(row, widths, strict=False)]))
            return out
        head = 1  # the columns on the row's own line: one-line cells that fit
        while (head < len(widths) and all(len(row[head]) == 1 for row in cells)
               and sum(widths[:head + 1]) + 2 * head <= width):
            head += 1
        label = max(len(n) for n in self.columns[head:])
        out.append(_join([n.ljust(w) for n, w in zip(self.columns[:head], widths, strict=False)]))
        for row in cells:
            out.append(_join([" / ".join(c).ljust(w) for c, w in zip(row[:head], widths, strict=False)]))
            for name, lines in zip(self.columns[head:], row[head:], strict=False):
                if 4 + label + max(len(line) for line in lines) > width:  # too long beside its label: below it
                    out += [f"  {name}", *(f"    {line}" for line in lines)]
                    continue
                for k, line in enumerate(lines):
                    out.append(f"  {(name if k == 0 else '').ljust(label)}  {line}".rstrip())
        return out


PROSE_MIN = 24  # narrower than this beside the other columns, a text column goes below the row


def _wrap_last(columns: tuple[str, ...], cells: list[list[list[str]]], width: int) -> list[list[list[str]]]:
    """The last column's text wrapped at spaces (never inside a word) to the room beside the other columns,
    else to the width below the row (where Grid puts a column that does not fit)."""
    import textwrap

    others = [max([len(name)] + [len(line) for row in cells for line in row[i]]) for i, name in enumerate(columns[:-1])]
    room = width - sum(others) - 2 * len(others)
    if room < max(PROSE_MIN, len(columns[-1])):
        room = width - 4
    return [[*row[:-1], [w for line in row[-1] for w in textwrap.wrap(line, max(room, 1), break_long_words=False,
                                                                       break_on_hyphens=False) or [""]]]
            for row in cells]


def _join(parts: list[str]) -> str:
    return "  ".join(parts).rstrip()


@record
class CommandResult:
    """What a command handler returns; only `cli.main()` prints it."""

    data: dict[str, Any]            # what --json prints
    exit_code: int = 0              # 0 ok, 1 a build/test failed
    summary: str = ""               # what a person reads (rich markup allowed)
    tables: tuple[Table | Grid, ...] = field(default=())


PROGRESS_INTERVAL = 30.0  # seconds between heartbeats of a running build when stderr is not a terminal


class UI:
    """The console of one command: human output (rich), or JSON only, with verbosity, warnings and progress."""
    def __init__(self, *, json_mode: bool = False, verbose: bool = False, quiet: bool = False,
                 progress_interval: float | None = None) -> None:
        self.json_mode = json_mode
        self.verbose = verbose
        self.quiet = quiet or json_mode
        self.progress_interval = PROGRESS_INTERVAL if progress_interval is None else progress_interval
        self.github = os.environ.get("GITHUB_ACTIONS") == "true"  # workflow commands: ::group::, ::error::
        self.started = time.monotonic()
        self._err: Console | None = None
        self._out: Console | None = None
        self._printing = threading.Lock()

    @property
    def piped(self) -> bool:
        """stderr is a log, not a terminal: one line per event, each stamped with the time since the start."""
        return not self.err.is_terminal

    def stamp(self) -> str:
        """The time since the command started, as [hh:mm:ss]."""
        seconds = int(time.monotonic() - self.started)
        return f"[{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}]"

    def event(self, message: str, *, log: object = None) -> None:
        """A change of state of long work (a build started or ended). Piped: one stamped line; in a terminal
        the log's path goes on a line of its own (never split)."""
        if self.quiet:
            return
        from rich.text import Text

        with self._printing:
            if self.piped:
                self.err.print(Text(f"{self.stamp()} {message}" + (f" (log: {log})" if log else "")),
                               soft_wrap=True, crop=False)
            else:
                self.err.print(Text.assemble(("==>", "bold cyan"), " ", message))
                if log:
                    self.err.print(Text(f"    log: {log}"), soft_wrap=True, crop=False)

    @contextlib.contextmanager
    def heartbeat(self, lines: Callable[[], list[str]]) -> Iterator[None]:
        """While inside, piped and not quiet: every `progress_interval` seconds, each of `lines()` as an event
        (what each running build is doing), so a log never stays silent while work goes on."""
        if self.quiet or not self.piped or self.progress_interval <= 0:
            yield
            return
        stop = threading.Event()

        def beat() -> None:
            while not stop.wait(self.progress_interval):
                try:
                    current = lines()
                except Exception:  # a heartbeat never fails a build
                    continue
                for line in current:
                    self.event(line)

        thread = threading.Thread(target=beat, name="heartbeat", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join(5)

    def github_group(self, title: str, lines: list[str]) -> None:
        """Under GitHub Actions: `lines` folded under `title` in the job's log (printed whole, at once)."""
        if not self.github:
            return
        with self._printing:
            sys.stderr.write(f"::group::{_workflow_escape(title)}\n" + "".join(f"{line}\n" for line in lines)
                             + "::endgroup::\n")
            sys.stderr.flush()

    def github_error(self, message: str, *, file: str = "", line: int = 0, title: str = "") -> None:
        """Under GitHub Actions: an error annotation (on `file` and `line` when known)."""
        if not self.github:
            return
        props = ",".join(f"{k}={_workflow_escape(v, prop=True)}" for k, v in
                         (("file", file), ("line", str(line) if line else ""), ("title", title)) if v)
        with self._printing:
            sys.stderr.write(f"::error{' ' + props if props else ''}::{_workflow_escape(message)}\n")
            sys.stderr.flush()

    @property
    def err(self) -> Console:
        """The console on stderr (made on first use)."""
        if self._err is None:
            self._err = _console(stderr=True)
        return self._err

    @property
    def out(self) -> Console:
        """The console on stdout (made on first use)."""
        if self._out is None:
            self._out = _console(stderr=False)
        return self._out

    def info(self, message: str) -> None:
        """Show a message on stderr unless quiet."""
        if not self.quiet:
            self.err.print(message, soft_wrap=self.piped)

    def warn(self, message: str) -> None:
        """Show a warning on stderr, even when quiet; the message is printed literally (`[cache]` is text, not
        markup), as ERROR lines are."""
        if self._err is None and not _stderr_terminal():  # (a log: the line as rich would write it, without rich)
            with self._printing:
                sys.stderr.write(f"warning: {escape_controls(message)}\n")
                sys.stderr.flush()
            return
        from rich.text import Text

        self.err.print(Text.assemble(("warning:", "yellow"), " ", message), soft_wrap=self.piped)

    def step(self, message: str) -> None:
        """Show the start of a step (==> message) on stderr unless quiet."""
        if not self.quiet:
            self.err.print(f"[bold cyan]==>[/] {message}", soft_wrap=self.piped)

    @contextlib.contextmanager
    def status(self, message: str) -> Iterator[None]:
        """Show a spinner with `message` while the block runs (a plain step line off a terminal)."""
        if self.quiet or not self.err.is_terminal:
            self.step(message)
            yield
            return
        with self.err.status(message):
            yield

    @contextlib.contextmanager
    def progress(self, description: str, total: int | None) -> Iterator[ProgressTask]:
        """A progress bar for the block (a task that shows nothing when quiet)."""
        if self.quiet:
            yield ProgressTask(None, None)
            return
        from rich.progress import (
            BarColumn,
            Progress,
            SpinnerColumn,
            TextColumn,
            TimeElapsedColumn,
        )

        prog = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                        TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn(),
                        console=self.err, transient=not self.err.is_terminal)
        with prog:
            task = prog.add_task(description, total=total)
            yield ProgressTask(prog, task)

    def emit(self, result: CommandResult) -> None:
        """Print a command's result: its JSON document in JSON mode, else its human text."""
        if self.json_mode:
            self.emit_json(result.data)
            return
        for table in result.tables:
            if isinstance(table, Grid):
                self.print_grid(table)
            else:
                self.out.print(table)
        if result.summary:  # piped: each line whole (a log is read, not a terminal)
            self.out.print(result.summary, soft_wrap=not self.out.is_terminal)

    def print_grid(self, grid: Grid) -> None:
        """A Grid at the output's width (a terminal's, else $COLUMNS, else 80): plain text, never wrapped again."""
        from rich.text import Text

        lines = grid.render(self.out.width)
        for i, line in enumerate(lines):
            style = "bold" if self.out.is_terminal and i < (2 if grid.title else 1) else ""
            self.out.print(Text(line, style=style), soft_wrap=True, crop=False)

    def emit_json(self, data: dict[str, Any]) -> None:
        """The one JSON document of a `--json` run (none where the caller closed stdout)."""
        if sys.stdout is None:
            return
        sys.stdout.write(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
        sys.stdout.flush()

    def error(self, message: str, hint: str | None) -> None:
        """ERROR and TIP lines; the message and the hint are printed literally (no markup, no emoji)."""
        from rich.text import Text

        self.err.print(Text.assemble(("ERROR:", "bold red"), " ", message), soft_wrap=True)
        if hint:
            self.err.print(Text.assemble(("TIP:", "bold"), " ", hint), soft_wrap=True)


class GuardedStream:
    """sys.stdout or sys.stderr, whose failed writes (a reader that left: EPIPE; /dev/full: ENOSPC; a closed
    descriptor) end the output and nothing else: the first failure is kept (`failed`), the descriptor is
    pointed at /dev/null (so no later write, nor the interpreter's flush at exit, fails again) and the run goes
    on; `cli.main` turns it into its exit code. Everything else is the wrapped stream's."""

    def __init__(self, stream: Any, name: str) -> None:
        self.stream, self.name = stream, name
        self.failed: OSError | None = None

    def write(self, text: str) -> int:
        """Write `text` (nothing once the stream has failed)."""
        if self.failed is None:
            try:
                return int(self.stream.write(text))
            except OSError as exc:
                self._fail(exc)
        return len(text)

    def flush(self) -> None:
        """Flush the wrapped stream (nothing once it has failed)."""
        if self.failed is None:
            try:
                self.stream.flush()
            except OSError as exc:
                self._fail(exc)

    def _fail(self, exc: OSError) -> None:
        self.failed = exc
        with contextlib.suppress(OSError, ValueError):
            fd = self.stream.fileno()
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, fd)
            os.close(null)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


_CONTROL = Regex(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # C0 (but tab and newline), DEL, C1


def escape_controls(text: str) -> str:
    """`text` with terminal control characters shown as escapes: `ESC[2J` prints as `\\x1b[2J`."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text) if _CONTROL.search(text) else text


def _stderr_terminal() -> bool:
    """Whether rich would take stderr for a terminal (TTY_COMPATIBLE, FORCE_COLOR, else isatty), decided
    without importing rich."""
    tty = os.environ.get("TTY_COMPATIBLE", "")
    if tty in ("0", "1"):
        return tty == "1"
    if "FORCE_COLOR" in os.environ:
        return os.environ["FORCE_COLOR"] != ""
    try:
        return sys.stderr.isatty()
    except (ValueError, AttributeError):
        return False


def _console(*, stderr: bool) -> Console:
    """A rich Console whose text (never its own styles and cursor controls) has control characters escaped."""
    from rich.console import Console
    from rich.segment import Segment

    class _TextEscaped(Console):
        def _render_buffer(self, buffer: Any) -> str:
            return super()._render_buffer(_text_escaped(buffer, Segment))

    return _TextEscaped(stderr=stderr, highlight=False, emoji=False)


def _text_escaped(buffer: Any, segment: Any) -> Iterator[Any]:
    for seg in buffer:
        if seg.control or not _CONTROL.search(seg.text):
            yield seg
        else:
            yield segment(escape_controls(seg.text), seg.style, seg.control)


_WHERE = Regex(r"^(?P<file>[^\s:]+\.toml): (?:(?P<key>[A-Za-z0-9_\-]+(?:\.[A-Za-z0-9_\-]+)*): )?")
_HEADER = Regex(r"^\s*\[\[?\s*([^\]]+?)\s*\]\]?")


def recipe_locations(problems: list[str], hint: str = "") -> list[tuple[str, int, str]]:
    """(file, line, problem) for each problem that starts `FILE.toml: dotted.key: ...` (what RecipeError says):
    the file as found (as written, or a path the hint names that ends with it, or under ./recipes), the line of
    the key in it (0: not found). A problem that names no file is left out."""
    out = []
    for problem in problems:
        m = _WHERE.match(problem)
        if m is None:
            continue
        name = m.group("file")
        paths = [Path(name), *(Path(t) for t in re.findall(r"(/\S+?\.toml)\b", hint) if t.endswith("/" + name)),
                 Path("recipes") / name]
        found = next((q.resolve() for q in paths if q.is_file()), None)
        line = _key_line(found, m.group("key") or "") if found else 0
        shown = str(found.relative_to(Path.cwd())) if found and found.is_relative_to(Path.cwd()) else str(found or name)
        out.append((shown, line, problem))  # (GitHub matches a path relative to the workspace)
    return out


def _key_line(path: Path, key: str) -> int:
    """The 1-based line where dotted `key` is set (or its table starts) in TOML file `path`; 0 if not found."""
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return 0
    parts = key.split(".") if key else []
    table = ""
    best = 0
    for number, text in enumerate(lines, 1):
        header = _HEADER.match(text)
        if header:
            table = header.group(1).replace('"', "").replace(" ", "")
            if table == key:
                best = best or number
            continue
        name = text.split("=", 1)[0].strip().strip('"') if "=" in text else ""
        if name and ".".join(filter(None, [table, name])) == key:
            return number
        if name and key.startswith(".".join(filter(None, [table, name])) + ".") and not best:
            best = number  # an inline table holds it
    return best if parts else 0


def _workflow_escape(text: str, *, prop: bool = False) -> str:
    """A GitHub Actions workflow command's data (or property value), escaped as the runner reads it."""
    text = text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return text.replace(":", "%3A").replace(",", "%2C") if prop else text


def literal(text: str) -> str:
    """`text` (a name, a path, a message) for a string that rich parses as markup: shown as written."""
    if "[" not in text and not text.endswith("\\"):
        return text  # nothing rich would read as markup: as rich's escape() would return it, without rich
    from rich.markup import escape

    return escape(text)


class ProgressTask:
    """One task line of a progress display; updating it does nothing when no display is shown."""
    def __init__(self, progress: Progress | None, task: Any) -> None:
        self._p, self._t = progress, task

    def update(self, description: str | None = None, advance: float = 0, total: int | None = None) -> None:
        """Change the task's description, advance it, or set its total."""
        if self._p is None:
            return
        kwargs: dict[str, Any] = {"advance": advance}
        if description is not None:
            kwargs["description"] = description
        if total is not None:
            kwargs["total"] = total
        self._p.update(self._t, **kwargs)
