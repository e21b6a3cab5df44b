"""Reporting and publishing a bisect: every event as it happens (terminal and `<out>/bisect.log`, with the
command that resumes an interrupted bisect), then the result: `<out>/result.json`, the last good and first
bad builds (lock + wheels) copied to `<out>/good` and `<out>/bad`, a summary and the tables of steps."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table

from toolchain.bisect.core import (
    BisectHandler,
    BisectResult,
    BisectState,
    Candidate,
    StepRecord,
    Verdict,
    first_line,
    resumable,
    steps_left,
)
from toolchain.bisect.lockdiff import LockBisectResult
from toolchain.bisect.testers import CONTRACT
from toolchain.console import UI
from toolchain.core.fs import atomic_copy, atomic_write_text, open_log
from toolchain.core.owned import OWNED_MARKER, check_ours, mark, replace_ours
from toolchain.core.proc.runner import display
from toolchain.core.record import record
from toolchain.lock import LOCK_NAME, PYLOCK_NAME, read_lock

RESULT_NAME = "result.json"
LOG_NAME = "bisect.log"
ENDS_MARKERS = (OWNED_MARKER, LOCK_NAME)  # a good/ or bad/ the tool wrote (before its marker: a lock of yours)


class Report:
    """Reports every event as it happens (terminal and `<out>/bisect.log`); tells how to resume."""

    def __init__(self, ui: UI, log: Path, resume_argv: Sequence[str]) -> None:
        self.ui, self.log, self.resume_argv = ui, log, tuple(resume_argv)

    def phase(self, name: str) -> PhaseHandler:
        """A handler reporting the progress of the bisect phase `name`."""
        return PhaseHandler(self, name)

    def line(self, text: str, *, warn: bool = False) -> None:
        """Append a time-stamped line to the bisect log and show it on the console (as a warning with `warn`)."""
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open_log(self.log) as f:
            f.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {text}\n")
        (self.ui.warn if warn else self.ui.info)(escape(text))


class PhaseHandler(BisectHandler):
    """Reports the progress of one bisect phase (changes, or commits) to the console as steps complete."""
    def __init__(self, report: Report, phase: str) -> None:
        self.r, self.phase = report, phase

    def started(self, state: BisectState) -> None:
        """Report how many candidates lie between good and bad and about how many steps remain."""
        n, pending = len(state.candidates) - 2, state.pending()
        self.r.line(f"[{self.phase}] {n} candidates between good and bad; {pending} untested, "
                    f"about {steps_left(pending)} steps")

    def building(self, candidate: Candidate) -> None:
        """Report that a candidate is being built for the current step."""
        self.r.line(f"[{self.phase}] building {_name(candidate)}")

    def prefetching(self, candidate: Candidate) -> None:
        """Report that a candidate a later step may need is being built ahead."""
        self.r.line(f"[{self.phase}] building {_name(candidate)} ahead (a possible next step)")

    def testing(self, candidate: Candidate) -> None:
        """Report that a built candidate is being tested."""
        self.r.line(f"[{self.phase}] testing {_name(candidate)}")

    def checked(self, record: StepRecord, state: BisectState) -> None:
        """Report whether a given end tested as it was said to (good as good, bad as bad)."""
        expected = "good" if record.endpoint == "good" else "bad"
        ok = record.verdict.value == expected
        self.r.line(f"[{self.phase}] checking the {record.endpoint} end: {record.key[:12]} is "
                    f"{'unbuildable' if record.build_failed else record.verdict.value} ({record.reason})"
                    + ("" if ok else f": it must test {expected}"), warn=not ok)

    def step(self, record: StepRecord, state: BisectState) -> None:
        """Report one step's verdict, why, where its wheels came from and the steps left."""
        wheels = f", wheels {record.source}" if record.source else ""
        self.r.line(f"[{self.phase}] step {record.number}: {record.key[:12]} is {record.verdict.value} "
                    f"({record.reason}{wheels}){_left(record.remaining)}")

    def skip(self, record: StepRecord, state: BisectState) -> None:
        """Report (as a warning) a candidate skipped because it could not be built or tested."""
        self.r.line(f"[{self.phase}] step {record.number}: skipping {record.key[:12]}: {record.reason}"
                    f"{_left(record.remaining)}", warn=True)

    def finished(self, result: BisectResult) -> None:
        """Report the first bad candidate (or the ones skips leave possible) and the number of steps."""
        what = _name(result.first_bad) if result.first_bad else \
            "one of " + ", ".join(c.short for c in result.possible)
        self.r.line(f"[{self.phase}] done after {len(result.steps)} steps: first bad is {what}")

    def interrupted(self, state: BisectState, error: BaseException) -> None:
        """Report where the bisect stopped and, when the same options can go on, how to resume it."""
        lo, hi = state.bounds()
        why = "interrupted" if isinstance(error, KeyboardInterrupt) else f"stopped ({first_line(error)})"
        if not resumable(error):  # a configuration error: the same options would stop here again
            self.r.line(f"[{self.phase}] bisect {why} after {len(state.steps)} steps: a configuration error, "
                        "so it cannot be resumed; fix it and start the bisect again", warn=True)
            return
        kind = getattr(error, "kind", "")
        self.r.line(f"[{self.phase}] bisect {why}{f' ({kind}: nothing is remembered as unbuildable)' if kind else ''}"
                    f" after {len(state.steps)} steps; the first bad is between "
                    f"{state.candidates[lo].short} (good) and {state.candidates[hi].short} (bad)", warn=True)
        self.r.ui.err.print(f"resume with: {display(self.r.resume_argv)}", markup=False, highlight=False,
                            soft_wrap=True)


# ---- the result ----------------------------------------------------------------------------------------

@record
class BisectOutcome:
    """A finished bisect: what `--json` prints (`data`), what a person reads (`summary`, plain text, and
    `tables`); `ok` when the first bad candidate was found."""
    ok: bool
    data: dict[str, Any]
    summary: str
    tables: tuple[Table, ...]


def commit_outcome(result: BisectResult, component: str, out: Path, state_path: Path) -> BisectOutcome:
    """The outcome of a commit bisect of `component`: the lines to print, the end locks published into `out`."""
    locks = publish_ends(result, out)
    lines = []
    if result.first_bad:
        c = result.first_bad
        lines.append(f"first bad commit of {component}: {c.key}\n  {c.subject}\n  {c.date}"
                     + (f"\n  {c.url}" if c.url else ""))
        if c.merge:
            lines.append(f"  it is a merge: bisect its branch with --good {c.short}^1 --bad {c.short}")
    else:
        lines.append("skipped commits hide the first bad commit; it is one of:\n"
                     + "\n".join(f"  {_name(c)}" for c in result.possible))
    wheels = wheel_sources(result)
    lines += _skipped_lines(result) + evidence_lines(result) + [f"{k} lock: {v}" for k, v in locks.items()] \
        + [f"state: {state_path}"]
    lines.append("steps' wheels: " + ", ".join(f"{n} {what}" for what, n in wheels.items()))
    lines += [*closure_lines(result), result.spent.line()]
    data = {"ok": result.found, "mode": "commits", "component": component, "result": result.to_dict(),
            "contract": CONTRACT, "locks": locks, "state": str(state_path), "log": str(out / LOG_NAME),
            "wheels": wheels}
    atomic_write_text(out / RESULT_NAME, _json(data))
    return BisectOutcome(result.found, data, "\n".join(lines), (steps_table(result, "commit"), spent_table(result)))


def wheel_sources(result: BisectResult) -> dict[str, int]:
    """How many steps' wheels were compiled, prebuilt (a per-commit wheel), downloaded or cached."""
    counts = {"compiled": 0, "prebuilt": 0, "downloaded": 0, "cached": 0}
    for s in result.steps:
        if not s.build_failed:
            source = s.source or ("cached" if s.cached else "compiled")
            counts[source] = counts.get(source, 0) + 1
    return counts


def lock_outcome(result: LockBisectResult, out: Path, state_path: Path) -> BisectOutcome:
    """The outcome of a lock-to-lock bisect: the culprit change (or the ones skips hide) and the end locks."""
    final = result.commits or result.changes
    locks = publish_ends(final, out)
    lines = [f"note: {n}" for n in result.notes]
    if result.culprit is None:
        lines.append("skipped steps hide the change; it is one of:\n"
                     + "\n".join(f"  {d.label}" for d in result.possible))
    else:
        lines.append(f"the change that turns good into bad: {result.culprit.label}")
    if result.culprit is not None and result.commits is not None:
        c = result.commits.first_bad
        lines.append(f"first bad commit of {result.culprit.component}: {c.key}  {c.subject}  {c.date}  {c.url}"
                     if c else "skipped commits hide the first bad commit; it is one of: "
                     + ", ".join(x.short for x in result.commits.possible))
    lines += _skipped_lines(final) + evidence_lines(final) + [f"{k} lock: {v}" for k, v in locks.items()] \
        + [f"state: {state_path}"] + closure_lines(final) + [final.spent.line()]
    ok = result.culprit is not None and (result.commits is None or result.commits.found)
    data = {"ok": ok, "mode": "locks", "result": result.to_dict(), "locks": locks, "state": str(state_path),
            "contract": CONTRACT,
            "log": str(out / LOG_NAME)}
    atomic_write_text(out / RESULT_NAME, _json(data))
    tables = [differences_table(result), steps_table(result.changes, "change")]
    if result.commits is not None:
        tables.append(steps_table(result.commits, "commit"))
    tables.append(spent_table(final))
    return BisectOutcome(ok, data, "\n".join(lines), tuple(tables))


def _skipped_lines(result: BisectResult) -> list[str]:
    if not result.skipped:
        return []
    return ["skipped:"] + [f"  {c.short} {c.subject}: {why}" for c, why in result.skipped]


def evidence_lines(result: BisectResult) -> list[str]:
    """The verdicts a person checks first, with their evidence (the reason, the log, the test's last lines):
    the first bad candidate's and the first skipped one's (every step's is in result.json and --json)."""
    records = [*result.checks, *result.steps]
    first_bad = next((r for r in reversed(records) if result.first_bad and r.key == result.first_bad.key
                      and r.verdict is Verdict.BAD), None)
    first_skip = next((r for r in result.steps if r.verdict is Verdict.SKIP), None)
    lines = []
    for title, r in (("first bad", first_bad), ("first skip", first_skip)):
        if r is None:
            continue
        lines.append(f"{title} {r.key[:12]}: {r.verdict.value} ({r.reason})" + (f"; log: {r.log}" if r.log else ""))
        lines += [f"  | {line}" for line in r.tail.splitlines()]
    return lines + ([f"test contract: {CONTRACT}"] if lines else [])


def steps_table(result: BisectResult, what: str) -> Table:
    """A console table of every bisect step: candidate, verdict, why, and build and test seconds."""
    table = Table(title=f"bisect steps ({what})")
    for col in ("step", what, "verdict", "why", "build s", "test s"):
        table.add_column(col)
    subjects = {c.key: c.subject for c in (result.last_good, *result.possible)}
    subjects.update({c.key: c.subject for c, _ in result.skipped})
    for s in result.steps:
        build = "failed" if s.build_failed else (s.source or "cached") if s.cached else f"{s.build_seconds:.1f}"
        table.add_row(str(s.number), escape(f"{s.key[:12]} {subjects.get(s.key, '')}".strip()), s.verdict.value,
                      escape(s.reason), build + (" (ahead)" if s.prefetched else ""), f"{s.test_seconds:.1f}")
    return table


def spent_table(result: BisectResult) -> Table:
    """A console table of where the bisect's time went (`Spent`): compile, test, resolve, wait, wall."""
    table = Table(title="bisect spent (seconds)")
    rows = [("compile", result.spent.compile, "every build's wall time, ahead or awaited (not cache hits)"),
            ("test", result.spent.test, "the tests of the ends and the steps"),
            ("resolve", result.spent.resolve, "closures of the locks the result names (most in the background)"),
            ("  waited for", result.spent.resolve_waited, "of which the result waited for"),
            ("wait", result.spent.wait, "waiting for builds (the critical path)"),
            ("wall", result.spent.wall, "the whole bisect")]
    for col in ("spent on", "seconds", "what"):
        table.add_column(col)
    for name, seconds, what in rows:
        table.add_row(name, f"{seconds:.1f}", what)
    return table


def closure_lines(result: BisectResult) -> list[str]:
    """A named lock whose closure could not be resolved (its verdict stands): why."""
    return [f"{name} lock pins no runtime closure: {build.reason}"
            for name, build in (("good", result.good_build), ("bad", result.bad_build))
            if build is not None and build.ok and build.deferred]


def differences_table(result: LockBisectResult) -> Table:
    """A console table of the differences between the two locks, numbered in the order they are applied."""
    table = Table(title="differences between the locks (applied in this order)")
    for col in ("#", "kind", "change"):
        table.add_column(col)
    for i, d in enumerate(result.differences, 1):
        table.add_row(str(i), d.kind, escape(d.label))
    return table


# ---- publishing the ends -------------------------------------------------------------------------------

def publish_ends(result: BisectResult, out: Path) -> dict[str, str]:
    """Copy the last good and first bad builds (lock + wheels) to <out>/good and <out>/bad."""
    done = {}
    for name, build in (("good", result.good_build), ("bad", result.bad_build)):
        if build is not None and build.ok and build.lock_path and Path(build.lock_path).is_file():
            done[name] = str(copy_lock_dir(Path(build.lock_path), out / name) / LOCK_NAME)
    return done


def copy_lock_dir(lock_path: Path, dest: Path) -> Path:
    """The lock, its pylock.toml and its wheels under `dest` (replaced as a whole when the tool made it:
    core/owned.py; else UsageError, `dest` as it was)."""
    lock = read_lock(lock_path)
    check_ours(dest, "a bisect end folder", ENDS_MARKERS)
    tmp = dest.with_name(f".tmp-{dest.name}")
    shutil.rmtree(tmp, ignore_errors=True)
    atomic_copy(lock_path, tmp / LOCK_NAME)
    if (lock_path.parent / PYLOCK_NAME).is_file():
        atomic_copy(lock_path.parent / PYLOCK_NAME, tmp / PYLOCK_NAME)
    for c in lock.components:
        src = lock.wheel_path(c)
        if src.is_file():
            atomic_copy(src, tmp / "wheels" / src.name)
    mark(tmp)
    return replace_ours(tmp, dest, "a bisect end folder", ENDS_MARKERS)


def _left(pending: int) -> str:
    if not pending:
        return ""
    n = steps_left(pending)
    return f"; {pending} left to test, about {n} more step{'s' if n != 1 else ''}"


def _name(cand: Candidate | None) -> str:
    return "" if cand is None else f"{cand.short} {cand.subject}".strip()


def _json(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=2, sort_keys=True, default=str) + "\n"
