"""How many cores are idle right now: the machine's answer to "may another build start?" (bisect's builds
ahead use it; any stage deciding how much to run at once may)."""

from __future__ import annotations

import os
import time


def idle_cores(sample: float = 0.2) -> float:
    """Cores idle right now: /proc/stat sampled over `sample` seconds (the load average as a fallback)."""
    ncpu = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:
        before = _cpu_times()
        time.sleep(sample)
        after = _cpu_times()
        total = sum(after) - sum(before)
        idle = (after[3] + after[4]) - (before[3] + before[4])
        return ncpu * idle / total if total > 0 else float(ncpu)
    except (OSError, IndexError, ValueError):
        try:
            return max(0.0, ncpu - os.getloadavg()[0])
        except OSError:
            return 0.0

def _cpu_times() -> list[int]:
    with open("/proc/stat", encoding="ascii") as f:
        return [int(x) for x in f.readline().split()[1:]]
