"""How many cores the other processes leave idle: the machine's answer to "may another build start?" (bisect's
builds ahead use it; any stage deciding how much to run at once may)."""

from __future__ import annotations

import contextlib
import os
import resource
import threading
import time

from toolchain.core.record import record


@record
class _Reading:
    at: float           # time.monotonic()
    stat: list[int]     # /proc/stat's first line (jiffies per state, all cores)
    own: float          # CPU seconds of this process, the children it waited for and its live descendants
    cores: float = -1.0  # what the reading that took this snapshot returned (-1: none yet)


_lock = threading.Lock()
_last: _Reading | None = None


def idle_cores(sample: float = 0.2) -> float:
    """Cores the other processes left idle since the previous call, without waiting: /proc/stat's idle time
    plus this process's own CPU time (its threads, the children it waited for, and its descendants still
    running, as a build it started is: what it runs is its own to schedule, expected load, not another
    user's), per second of wall time. A call less than `sample` seconds after the previous one repeats
    that one's figure; only the first call of a process, when the module was imported less than `sample`
    seconds ago, waits for the rest of it. The load average is the fallback where /proc/stat is missing."""
    global _last  # noqa: PLW0603 (one reading per process, the previous call's)
    ncpu = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:
        with _lock:
            before = _last or _snapshot()
            now = _snapshot()
            if now.at - before.at < sample:
                if before.cores >= 0:
                    return before.cores
                time.sleep(sample - (now.at - before.at))
                now = _snapshot()
            total = sum(now.stat) - sum(before.stat)
            idle = (now.stat[3] + now.stat[4]) - (before.stat[3] + before.stat[4])
            cores = ncpu * idle / total if total > 0 else float(ncpu)
            cores = min(float(ncpu), cores + (now.own - before.own) / (now.at - before.at))
            _last = _Reading(now.at, now.stat, now.own, cores)
            return cores
    except (OSError, IndexError, ValueError):
        try:
            return max(0.0, ncpu - os.getloadavg()[0])
        except OSError:
            return 0.0


def _snapshot() -> _Reading:
    with open("/proc/stat", encoding="ascii") as f:
        stat = [int(x) for x in f.readline().split()[1:]]
    own = sum(r.ru_utime + r.ru_stime for r in (resource.getrusage(resource.RUSAGE_SELF),
                                                resource.getrusage(resource.RUSAGE_CHILDREN)))
    return _Reading(time.monotonic(), stat, own + descendants_cpu(os.getpid()))


_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def descendants_cpu(pid: int) -> float:
    """CPU seconds of the live descendants of `pid` (each one's own time and that of the children it waited
    for: utime + stime + cutime + cstime of /proc/PID/stat). Continuous with RUSAGE_CHILDREN: a child this
    process waits for moves its whole time there. 0.0 where /proc is missing."""
    # utime stime cutime cstime (stat fields 14-17)
    return sum(sum(int(x) for x in fields[11:15]) for _, fields in _descendants(pid)) / _TICK


def renice_descendants(pid: int, nice: int, to: int) -> list[int]:
    """Set the nice value of the live descendants of `pid` whose nice is `nice` to `to` (lowering it needs the
    privilege to: where it is refused, the process keeps its own); the pids changed."""
    changed = []
    for child, fields in _descendants(pid):
        if int(fields[16]) == nice:  # stat field 19: nice
            with contextlib.suppress(OSError):  # gone, or not ours to renice
                os.setpriority(os.PRIO_PROCESS, child, to)
                changed.append(child)
    return changed


def _descendants(pid: int) -> list[tuple[int, list[bytes]]]:
    """The live descendants of `pid`, each with the fields of its /proc/PID/stat after the command (field 3
    on); none where /proc is missing."""
    children: dict[int, list[int]] = {}
    stats: dict[int, list[bytes]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for name in entries:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone since the listing, or not ours to read
        child = int(name)
        children.setdefault(int(fields[1]), []).append(child)  # fields[1]: the parent's pid
        stats[child] = fields
    found, todo = [], list(children.get(pid, ()))
    while todo:
        child = todo.pop()
        if child in stats:
            found.append((child, stats[child]))
        todo += children.get(child, ())
    return found


with contextlib.suppress(OSError, IndexError, ValueError):  # the first call measures from here
    _last = _snapshot()
