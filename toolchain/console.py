"""Human output (rich, on stderr for progress) and `--json` output (one JSON document on stdout).

Command handlers receive a `UI` and return a `CommandResult`; only `cli.main()` prints the result.
"""

from __future__ import annotations

import contextlib
import json
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
            from rich.console import Console

            self._err = Console(stderr=True, highlight=False)
        return self._err

    @property
    def out(self) -> Console:
        if self._out is None:
            from rich.console import Console

            self._out = Console(highlight=False)
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
            sys.stdout.write(json.dumps(result.data, indent=2, sort_keys=True, default=str) + "\n")
            return
        for table in result.tables:
            self.out.print(table)
        if result.summary:
            self.out.print(result.summary)


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
