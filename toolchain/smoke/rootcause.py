"""The root cause of a failure, cut out of a log: the exception lines and the Traceback or Error block
nearest the failure, one per process.

vLLM's processes share one output stream: their lines are prefixed `(EngineCore_DP0 pid=4242) ` and carry a
logging header (`ERROR 12-02 10:00:01 [core.py:712] `) on every line, tracebacks included. Both are taken
off, the lines are split by process, and in each process's part of the region the last block is kept: a
traceback (header, last frame, every exception line of the chain) or a run of error lines. The API server's
"EngineDeadError ... See stack trace (above)" then comes with the engine core's real exception.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Literal

from toolchain.core.record import record, replace
from toolchain.core.regex import Regex

MAX_PROCESSES = 3        # excerpts per failure (the processes whose blocks are nearest the end)
MAX_LINES = 12           # lines per excerpt
LINE_CHARS = 600
TAIL_LINES = 8           # when no error block exists: the last lines of the region

_PROCESS = Regex(r"^\((?P<proc>[\w.\-]+(?: pid=\d+)?)\)\s?")
_HEADER = Regex(r"^(?P<level>DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL)\s+\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?"
                r"(?:\s+\[[^\]]*\])?\s?")
_OWN = Regex(r"^(### toolchain smoke: |\$ |# exit code |# signal |  \(in )")
_TRACEBACK = Regex(r"^\s*Traceback \(most recent call last\):")
_CHAIN = Regex(r"^\s*(During handling of the above exception|The above exception was the direct cause)")
_EXCEPTION = Regex(r"^(?:[A-Za-z_][\w.]*\.)?[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt|Fault|Warning|Failure)"
                   r"(?::|$)|^(?:[A-Za-z_][\w.]*\.)?(?:AssertionError|KeyboardInterrupt|StopIteration)\b")
_ERROR_LINE = Regex(r"Fatal Python error|Segmentation fault|Aborted \(core dumped\)|core dumped|"
                    r"terminate called after|\bFATAL\b|^\s*(?:error|Error)\b[:\s]|"
                    r"\b\w*(?:Error|Exception)\b: |\bfailed\b.*\b(?:error|exception)\b", re.IGNORECASE)


@record
class Line:
    """One line of a server log, split into its process prefix, logging level and text."""
    number: int      # 1-based, in the whole log
    process: str     # "EngineCore_DP0 pid=4242", "" for an unprefixed line
    level: str       # the logging level when the line had a header
    text: str        # without the process prefix and logging header


@record
class Excerpt:
    """A block of a log that shows a root cause (a traceback, an error, or the tail) and where it is."""
    source: str                      # the log's name ("server.log")
    process: str
    line: int                        # where the block starts in that log (1-based)
    kind: Literal["traceback", "error", "tail"]
    causes: tuple[str, ...]          # the exception / error lines themselves, first cause first
    lines: tuple[str, ...]

    def render(self) -> str:
        """The excerpt as text: where it is in which log, then its lines indented."""
        where = f"{self.source}:{self.line}" + (f" ({self.process})" if self.process else "")
        return where + ":\n" + "\n".join("    " + ln for ln in self.lines)


def render(excerpts: Sequence[Excerpt]) -> str:
    """The excerpts as text, one block after another."""
    return "\n".join(e.render() for e in excerpts)


def headline(excerpts: Sequence[Excerpt], limit: int = 600) -> str:
    """The exception lines of every excerpt on one line (for a JUnit message or a table cell)."""
    causes = list(dict.fromkeys(c for e in excerpts for c in (e.causes or e.lines[-1:])))
    text = " | ".join(causes)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def server_output(text: str) -> str:
    """The log without the lines the harness wrote (the command line, start and exit markers)."""
    return "".join(ln for ln in text.splitlines(keepends=True) if not _OWN.match(ln))


def parse(text: str, first_line: int = 1) -> list[Line]:
    """The lines of a log, numbered from `first_line`, with progress-bar redraws reduced to what a terminal shows."""
    out = []
    # "\n" only: a progress bar's "\r" does not start a line in an editor or in `grep -n`
    for i, raw in enumerate(text.split("\n")):
        line = raw.rstrip().rsplit("\r", 1)[-1]  # what a terminal shows of a progress bar's line
        process = ""
        m = _PROCESS.match(line)
        if m:
            process, line = m.group("proc"), line[m.end():]
        level = ""
        h = _HEADER.match(line)
        if h:
            level, line = h.group("level"), line[h.end():]
        out.append(Line(first_line + i, process, level, line[:LINE_CHARS]))
    return out


def find(text: str, *, source: str = "server.log", first_line: int = 1, tail: bool = False) -> list[Excerpt]:
    """The root-cause excerpts of `text` (a region of a log starting at line `first_line`), the process whose
    block comes last listed last. With `tail`, a region without any error block gives its last lines."""
    lines = [ln for ln in parse(text, first_line) if ln.text.strip() and not _OWN.match(ln.text)]
    by_process: dict[str, list[Line]] = {}
    for ln in lines:
        by_process.setdefault(ln.process, []).append(ln)
    found = [e for e in (_last_block(source, proc, part) for proc, part in by_process.items()) if e is not None]
    found.sort(key=lambda e: e.line)
    found = found[-MAX_PROCESSES:]
    if not found and tail and lines:
        last = lines[-TAIL_LINES:]
        found = [Excerpt(source, "", last[0].number, kind="tail", causes=(),
                         lines=tuple((f"({ln.process}) " if ln.process else "") + ln.text for ln in last))]
    return found


def _last_block(source: str, process: str, part: list[Line]) -> Excerpt | None:
    """The last traceback or run of error lines in one process's lines."""
    end = len(part) - 1
    while end >= 0 and not _is_error(part[end]):
        end -= 1
    if end < 0:
        return None
    start = _traceback_start(part, end)
    if start is not None:
        return _traceback_excerpt(source, process, part[start:end + 1], part[end + 1:])
    # Error lines logged right after a traceback ("... died unexpectedly"): the traceback, then them.
    last = end
    while last > 0 and end - last < MAX_LINES and _is_error(part[last]) and not _EXCEPTION.match(part[last].text):
        last -= 1
    tb = _traceback_start(part, last) if _EXCEPTION.match(part[last].text) else None
    if tb is not None:
        excerpt = _traceback_excerpt(source, process, part[tb:last + 1], part[last + 1:])
        return replace(excerpt, lines=excerpt.lines + tuple(ln.text for ln in part[last + 1:end + 1]))
    start = end  # a run of error lines (logged errors, a fatal signal) ending at `end`
    while start > 0 and end - start < MAX_LINES - 1 and _is_error(part[start - 1]):
        start -= 1
    block = part[start:end + 1]
    causes = tuple(ln.text.strip() for ln in block if _EXCEPTION.match(ln.text.strip()) or _ERROR_LINE.search(ln.text))
    return Excerpt(source, process, block[0].number, kind="error", causes=causes or (block[-1].text,),
                   lines=tuple(ln.text for ln in block))


def _traceback_start(part: list[Line], end: int) -> int | None:
    """The first "Traceback" header of the (possibly chained) traceback that line `end` ends, or None."""
    i, start = end, None
    while i >= 0 and (_in_traceback(part[i]) or _EXCEPTION.match(part[i].text.strip())):
        if _TRACEBACK.match(part[i].text):
            start = i
        i -= 1
    return start


def _traceback_excerpt(source: str, process: str, block: list[Line], after: list[Line]) -> Excerpt:
    """Header, the last frame, and every exception line of the chain (in order, causes first)."""
    exceptions = [ln for ln in block if not _in_traceback(ln) and _EXCEPTION.match(ln.text.strip())]
    if not exceptions and after:
        exceptions = [after[0]]
    exceptions = list({ln.text.strip(): ln for ln in reversed(exceptions)}.values())[::-1]  # a traceback logged twice
    frames = [i for i, ln in enumerate(block) if ln.text.lstrip().startswith('File "')]
    shown: list[str] = ["Traceback (most recent call last):"]
    if frames:
        last = frames[-1]
        if len(frames) > 1:
            shown.append("  ...")
        shown += [ln.text for ln in block[last:last + 2] if _in_traceback(ln)]
    shown += [ln.text.strip() for ln in exceptions]
    shown = shown[: 1] + shown[1:][-(MAX_LINES - 1):]
    return Excerpt(source, process, block[0].number, kind="traceback",
                   causes=tuple(ln.text.strip() for ln in exceptions), lines=tuple(shown))


def _in_traceback(ln: Line) -> bool:
    t = ln.text
    return bool(_TRACEBACK.match(t) or _CHAIN.match(t) or (t[:1].isspace() and t.strip()) or t.strip() == "^"
                or t.lstrip().startswith(("File \"", "^", "~")))


def _is_error(ln: Line) -> bool:
    t = ln.text.strip()
    if ln.level in ("ERROR", "CRITICAL", "FATAL"):
        return True
    if ln.level in ("DEBUG", "INFO") and not _EXCEPTION.match(t):
        return False
    return bool(_EXCEPTION.match(t) or _TRACEBACK.match(t) or _ERROR_LINE.search(t))
