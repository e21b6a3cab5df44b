"""Measuring for the benchmarks: commands timed side by side (interleaved, so the drift of a busy machine hits
every side alike), medians and ranges of wall and CPU time, and the top lines of the profiles behind them.

CPU time (user + system of the child) is printed beside wall time: on a shared machine the wall time of a
short command is mostly waiting for a core, its CPU time is what the command itself costs.
"""

from __future__ import annotations

import cProfile
import os
import pstats
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Sample:
    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.wall)

    @property
    def cpu_median(self) -> float:
        return statistics.median(self.cpu) if self.cpu else float("nan")

    def describe(self) -> str:
        text = f"{self.median:7.3f} s  ({min(self.wall):.3f}-{max(self.wall):.3f})"
        if self.cpu:
            text += f"   cpu {self.cpu_median:.3f} s ({min(self.cpu):.3f}-{max(self.cpu):.3f})"
        return text

    def as_dict(self) -> dict[str, float]:
        out = {"median": round(self.median, 4), "min": round(min(self.wall), 4), "max": round(max(self.wall), 4)}
        if self.cpu:
            out.update(cpu_median=round(self.cpu_median, 4), cpu_min=round(min(self.cpu), 4),
                       cpu_max=round(max(self.cpu), 4))
        return out


def installed_like_env(pycache: Path, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of measured interpreters: byte code written and read (under `pycache`, not in the
    source tree), as for an installed tool, even where PYTHONDONTWRITEBYTECODE is set for the session."""
    env = dict(os.environ if base is None else base)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(pycache)
    return env


def run_timed(argv: Sequence[str], *, cwd: Path | None = None, env: Mapping[str, str] | None = None) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the child) of one run; output discarded, failure raises."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(list(argv), cwd=cwd, env=dict(env) if env is not None else None, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def side_by_side(cases: Mapping[str, Callable[[], tuple[float, float] | float]], rounds: int) -> dict[str, Sample]:
    """Each case once per round, in turn. A case returns wall seconds, or (wall, cpu)."""
    out = {name: Sample() for name in cases}
    for _ in range(rounds):
        for name, fn in cases.items():
            got = fn()
            wall, cpu = got if isinstance(got, tuple) else (got, None)
            out[name].wall.append(wall)
            if cpu is not None:
                out[name].cpu.append(cpu)
    return out


def timed(fn: Callable[[], object]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


# ---- profiles ------------------------------------------------------------------------------------------

def importtime_top(argv: Sequence[str], *, cwd: Path | None, env: Mapping[str, str], n: int = 12) -> list[str]:
    """The modules that cost most to import (self time) in `python -X importtime ARGV...`."""
    done = subprocess.run([sys.executable, "-X", "importtime", *argv], cwd=cwd, env=dict(env),
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=True)
    rows = []
    for line in done.stderr.splitlines():
        m = re.match(r"import time:\s+(\d+) \|\s+(\d+) \| (\s*)(\S+)", line)
        if m:
            rows.append((int(m.group(1)), int(m.group(2)), m.group(4)))
    total = sum(r[0] for r in rows)
    lines = [f"{len(rows)} modules, {total / 1000:.1f} ms of imports; the costliest (self, cumulative ms):"]
    lines += [f"{s / 1000:8.1f} {c / 1000:8.1f}  {name}" for s, c, name in sorted(rows, reverse=True)[:n]]
    return lines


def profile_lines(stats: pstats.Stats, n: int = 12, *, root: str = "toolchain") -> list[str]:
    """The top `n` functions of the tool (files under `root/`) by cumulative time, and the top `n` of any
    code by own time: where the time goes, and what it is spent on."""
    raw = stats.stats  # type: ignore[attr-defined]  # {(file, line, name): (cc, nc, tt, ct, callers)}
    total = max((v[3] for v in raw.values()), default=0.0)

    def where(key: tuple[str, int, str]) -> str:
        file, line, name = key
        short = file.split(f"/{root}/", 1)[-1] if f"/{root}/" in file else os.path.basename(file)
        return f"{short}:{line}({name})" if line else name

    own = [(v[3], v[2], v[1], k) for k, v in raw.items() if f"/{root}/" in k[0]]
    lines = [f"profile: {total:.3f} s in all; the tool's functions by cumulative time (cum, self s, calls):"]
    lines += [f"{ct:8.3f} {tt:8.3f} {nc:6d}  {where(k)}" for ct, tt, nc, k in sorted(own, reverse=True)[:n]]
    lines.append("any code by own time (self, cum s, calls):")
    anyc = sorted(((v[2], v[3], v[1], k) for k, v in raw.items()), reverse=True)[:n]
    lines += [f"{tt:8.3f} {ct:8.3f} {nc:6d}  {where(k)}" for tt, ct, nc, k in anyc]
    return lines


def profile_command(argv: Sequence[str], *, cwd: Path | None, env: Mapping[str, str], n: int = 12) -> list[str]:
    """cProfile of `python -m cProfile ARGV...` (a CLI run), as `profile_lines`."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run.prof"
        subprocess.run([sys.executable, "-m", "cProfile", "-o", str(out), *argv], cwd=cwd, env=dict(env),
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        return profile_lines(pstats.Stats(str(out)), n)


def profile_call(fn: Callable[[], object], n: int = 12) -> tuple[object, list[str]]:
    """cProfile of an in-process call, as `profile_lines`."""
    prof = cProfile.Profile()
    result = prof.runcall(fn)
    return result, profile_lines(pstats.Stats(prof), n)


def ratio(a: float, b: float) -> str:
    return f"{a / b:6.2f}x" if b else "   n/a"
