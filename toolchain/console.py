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
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # rich is imported on first use: `--json` runs of warm builds never pay for it
    from rich.console import Console
    from rich.progress import Progress
    from rich.table import Table


@dataclass(frozen=True)
class CommandResult:
    data: dict[str, Any]            # what --json prints
    exit_code: int = 0              # 0 ok, 1 a build/test failed
    summary: str = ""               # what a person reads (rich markup allowed)
    tables: tuple[Table, ...] = field(default=())


class UI:
    def __init__(self, *, json_mode: bool = False, verbose: bool = False, quiet: bool = False) -> None:
        self.json_mode = json_mode
        self.verbose = verbose
        self.quiet = quiet or json_mode
        self._err: Console | None = None
        self._out: Console | None = None

    @property
    def err(self) -> Console:
        if self._err is None:
            self._err = _console(stderr=True)
        return self._err

    @property
    def out(self) -> Console:
        if self._out is None:
            self._out = _console(stderr=False)
        return self._out

    def info(self, message: str) -> None:
        if not self.quiet:
            self.err.print(message)

    def warn(self, message: str) -> None:
        self.err.print(f"[yellow]warning:[/] {message}")

    def step(self, message: str) -> None:
        if not self.quiet:
            self.err.print(f"[bold cyan]==>[/] {message}")

    @contextlib.contextmanager
    def status(self, message: str) -> Iterator[None]:
        if self.quiet or not self.err.is_terminal:
            self.step(message)
            yield
            return
        with self.err.status(message):
            yield

    @contextlib.contextmanager
    def progress(self, description: str, total: int | None) -> Iterator[ProgressTask]:
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
        if self.json_mode:
            self.emit_json(result.data)
            return
        for table in result.tables:
            self.out.print(table)
        if result.summary:
            self.out.print(result.summary)

    def emit_json(self, data: dict[str, Any]) -> None:
        """The one JSON document of a `--json` run."""
        sys.stdout.write(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
        sys.stdout.flush()

    def error(self, message: str, hint: str | None) -> None:
        """ERROR and TIP lines; the message and the hint are printed literally (no markup, no emoji)."""
        from rich.text import Text

        self.err.print(Text.assemble(("ERROR:", "bold red"), " ", message), soft_wrap=True)
        if hint:
            self.err.print(Text.assemble(("TIP:", "bold"), " ", hint), soft_wrap=True)


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # C0 (but tab and newline), DEL, C1


def escape_controls(text: str) -> str:
    """`text` with terminal control characters shown as escapes: `ESC[2J` prints as `\\x1b[2J`."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text) if _CONTROL.search(text) else text


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


def literal(text: str) -> str:
    """`text` (a name, a path, a message) for a string that rich parses as markup: shown as written."""
    if "[" not in text and not text.endswith("\\"):
        return text  # nothing rich would read as markup: as rich's escape() would return it, without rich
    from rich.markup import escape

    return escape(text)


class ProgressTask:
    def __init__(self, progress: Progress | None, task: Any) -> None:
        self._p, self._t = progress, task

    def update(self, description: str | None = None, advance: float = 0, total: int | None = None) -> None:
        if self._p is None:
            return
        kwargs: dict[str, Any] = {"advance": advance}
        if description is not None:
            kwargs["description"] = description
        if total is not None:
            kwargs["total"] = total
        self._p.update(self._t, **kwargs)
