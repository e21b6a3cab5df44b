"""What a build cost: wall seconds, CPU seconds (the whole process tree, from the children's rusage) and peak
memory of the whole build process tree: the cgroup's own peak (`memory.peak`, v1 `memory.max_usage_in_bytes`)
when the build has a cgroup to itself (a fresh container), else the peak of a sampler of the tree's PSS
(proportional set size: shared pages count once; RSS where the kernel has no smaps_rollup).

The measuring runs in the target, around the build command (toolchain.build.intarget): this module builds
that command line and reads what it wrote.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from toolchain.build.ccache import CacheReport
from toolchain.core.record import field, record
from toolchain.core.serial import from_data, meta, rounded

RUNNER = "build-runner"            # the Extra name of the in-target script
RESULT = ".toolchain-build.json"   # written by the runner into the output directory
LIVE = RESULT + ".live"             # written by the runner while the build runs (intarget.LIVE_SUFFIX)
RUNNER_FILE = Path(__file__).with_name("intarget.py")


@record
class BuildMetrics:
    """What one build cost: wall and CPU seconds, peak memory and where the peak was read."""

    wall_seconds: float = field(default=0.0, metadata=meta(dump=rounded(3)))
    cpu_seconds: float = field(default=0.0, metadata=meta(dump=rounded(3)))
    peak_memory_bytes: int = 0
    peak_memory_source: str = ""   # "cgroup" | "pss-sampler" | "rss-sampler" | ""
    peak_sampled_bytes: int = 0    # the sampler's figure, always recorded
    cpus: int = field(default=0, metadata=meta(omit_default=True))  # the cores the build was pinned to (its affinity)

    def summary(self) -> str:
        """One line of the build's measurements: wall time, CPU time and peak memory."""
        from toolchain.build.jobs import format_size

        if not self.wall_seconds:
            return ""
        return (f"{self.wall_seconds:.1f} s wall, {self.cpu_seconds:.1f} s CPU, peak "
                f"{format_size(self.peak_memory_bytes)} ({self.peak_memory_source})"
                + (f", on {self.cpus} core(s)" if self.cpus else ""))


def measured_argv(python: str, runner: str, out: str, argv: Sequence[str]) -> list[str]:
    """`argv` run by the in-target runner, which writes its result to `<out>/.toolchain-build.json`."""
    return [python, runner, "build", f"{out}/{RESULT}", "--", *argv]


@record
class RunResult:
    """What the in-target runner wrote for one build (build/intarget.py)."""

    metrics: BuildMetrics
    cache: CacheReport
    error: str = ""   # the runner refused to build (a required ccache that does not run)


@record
class LiveReading:
    """What the runner says of a build while it runs (RESULT.live): the heartbeat's peak and ccache counts."""
    peak_bytes: int
    ccache: bool   # the build goes through ccache (its counts mean something)
    hits: int
    misses: int

    def describe(self) -> str:
        """`peak 31.2 GiB, ccache 812 hits / 391 misses` (no ccache part for a build that uses none)."""
        from toolchain.build.jobs import format_size

        parts = [f"peak {format_size(self.peak_bytes)}"] if self.peak_bytes else []
        if self.ccache:
            parts.append(f"ccache {self.hits} hits / {self.misses} misses")
        return ", ".join(parts)


def read_live(out_dir: Path) -> LiveReading | None:
    """The runner's reading of a build still running in `out_dir` (host-side); None when there is none (not
    yet written, or the build runs where the host cannot see its output: exec into a running container)."""
    try:
        data = json.loads((Path(out_dir) / LIVE).read_text())
        return LiveReading(int(data["peak_bytes"]), bool(data["ccache"]), int(data["hits"]), int(data["misses"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def read_result(out_dir: Path) -> RunResult | None:
    """What the runner wrote into the (host-side) output directory; None when it wrote nothing."""
    path = Path(out_dir) / RESULT
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    finally:
        path.unlink(missing_ok=True)
    if "error" in data:
        return RunResult(BuildMetrics(), CacheReport(), str(data["error"]))
    m, c = data.get("metrics", {}), data.get("compiler_cache", {})
    cgroup, sampled = int(m.get("peak_cgroup_bytes", 0)), int(m.get("peak_sampled_bytes", 0))
    metrics = BuildMetrics(float(m.get("wall_seconds", 0.0)), float(m.get("cpu_seconds", 0.0)),
                           cgroup or sampled, "cgroup" if cgroup else f"{m.get('sampled', 'rss')}-sampler", sampled,
                           int(m.get("cpus", 0)))
    return RunResult(metrics, from_data(CacheReport, c))  # the keys intarget.py writes: CacheReport's field names


__all__ = ["BuildMetrics", "LiveReading", "RunResult", "measured_argv", "read_live", "read_result"]
