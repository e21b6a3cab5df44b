"""cgroup v2 for the tool's children: one per child under the tool's own cgroup (what escapes the process group
stays in it), removed when empty; what a killed tool left is reaped at the next start."""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import threading
import time
from pathlib import Path

_REAP_GRACE = 3.0  # a killed cgroup's processes: how long they may take to end before it is removed
_POLL = 0.05
_CGROUP_ROOT: list[Path | None] = []  # [where the tool's children's cgroups go] once looked for ([None]: nowhere)
_LINGERING: set[Path] = set()  # cgroups of ended children that still held a process when released
_LINGER_LOCK = threading.Lock()


def cgroup_for(pid: int) -> Path | None:
    """A new cgroup v2 holding `pid` (moved there as soon as it started, before it could do much), under the
    tool's own cgroup; None where none can be made (no cgroup v2, no right to write it)."""
    if not _CGROUP_ROOT:
        _CGROUP_ROOT.append(_find_cgroup_root())
    root = _CGROUP_ROOT[0]
    if root is None:
        return None
    if _LINGERING:
        sweep_cgroups()
    path = root / f"toolchain-{os.getpid()}-{pid}"
    try:
        path.mkdir()
    except OSError:
        return None
    if write_control(path / "cgroup.procs", str(pid)):
        return path
    with contextlib.suppress(OSError):
        path.rmdir()
    return None


def _find_cgroup_root() -> Path | None:
    """The directory of the tool's own cgroup v2 if it may make cgroups there (TOOLCHAIN_NO_CGROUP=1: never)."""
    if os.environ.get("TOOLCHAIN_NO_CGROUP") == "1":
        return None
    try:
        own = next((line[3:] for line in Path("/proc/self/cgroup").read_text().splitlines()
                    if line.startswith("0::")), None)
        mounts = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return None
    if own is None:
        return None
    for line in mounts:
        fields = line.split()
        if " - cgroup2 " in line and len(fields) > 4:
            base = Path(fields[4]) / own.lstrip("/")
            if not os.access(base, os.W_OK):
                return None
            for stale in base.glob("toolchain-*-*"):  # left by a tool that was killed (-9)
                with contextlib.suppress(ValueError, OSError):
                    if not Path(f"/proc/{int(stale.name.split('-')[1])}").exists():
                        _reap_cgroup(stale)
            return base
    return None


def _reap_cgroup(path: Path) -> None:
    """End what still runs in the cgroup of a child of a tool that was killed (a build step nobody waits for
    any more: SIGKILL reaches the tool alone, not its children, which each lead a group of their own) and
    remove the cgroup."""
    if not write_control(path / "cgroup.kill", "1"):  # (Linux < 5.14: each process, and those of its sub-cgroups)
        for procs in [path / "cgroup.procs", *path.rglob("*/cgroup.procs")]:
            with contextlib.suppress(OSError, ValueError):
                for pid in procs.read_text().split():
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(int(pid), signal.SIGKILL)
    deadline = time.monotonic() + _REAP_GRACE
    while not remove_cgroup(path) and time.monotonic() < deadline:  # (a killed process takes a moment)
        time.sleep(_POLL)

def linger(path: Path) -> None:
    """Note the cgroup of an ended child that still holds a process: `sweep_cgroups` removes it once empty."""
    with _LINGER_LOCK:
        _LINGERING.add(path)


def sweep_cgroups() -> None:
    """Remove the cgroups of ended children that have emptied since they were released (at each child's start
    and at the tool's exit); those still holding a process stay noted (and a later tool's start removes them
    once empty, as it does what a killed tool left)."""
    with _LINGER_LOCK:
        lingering = list(_LINGERING)
    for path in lingering:
        if remove_cgroup(path):
            with _LINGER_LOCK:
                _LINGERING.discard(path)


atexit.register(sweep_cgroups)


def remove_cgroup(path: Path) -> bool:
    """Remove cgroup `path` and the cgroups under it (a tool run by the tool makes its own there), deepest
    first; one that still holds a process stays. Whether `path` is gone."""
    with contextlib.suppress(OSError):
        for sub in sorted((p for p in path.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
            with contextlib.suppress(OSError):
                sub.rmdir()
        path.rmdir()
    return not path.exists()


def write_control(path: Path, text: str) -> bool:
    """Write a cgroup control file (`cgroup.procs`, `cgroup.kill`); whether the kernel took it."""
    try:
        with open(path, "w", encoding="ascii") as f:
            f.write(text)
        return True
    except OSError:
        return False
