"""The commands the tool started and that have not ended (`CHILDREN`): each a process group and, where one can be
made, a cgroup of its own (core/proc/cgroups.py), so that a stop signal ends them all."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import subprocess  # imported when a command runs: a warm no-op build runs none

from toolchain.core.proc.cgroups import cgroup_for, linger, remove_cgroup, write_control

KILL_GRACE = 3.0   # after a stop signal: seconds between SIGTERM to every child and SIGKILL to what is left
SERVER_GRACE = 8.0  # the same for a server (SIGINT first): its graceful shutdown, in a container too
POLL = 0.05  # how often a stopping group or cgroup is looked at


class Child:
    """A command the tool started: its process group (its pid: each child leads a session of its own) and,
    where one could be made, a cgroup v2 of its own, which holds what escapes the group (setsid, daemons)."""

    def __init__(self, proc: subprocess.Popen[bytes], first: int = signal.SIGTERM) -> None:
        self.proc = proc
        self.pid = proc.pid
        self.first = first  # what a stop signal sends it first (a server: SIGINT, its graceful shutdown; 0: none,
        # it ends by itself once the one who started it has ended its input: `Children.terminate`)
        self.sent: set[int] = set()
        self.cgroup = cgroup_for(proc.pid)

    def signal(self, sig: int) -> None:
        """`sig` to the process group and to each process in the cgroup."""
        self.sent.add(sig)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, sig)
        if self.cgroup is None or sig == signal.SIGINT:
            return  # a server's graceful stop goes to its group: what it started outside (an engine exec whose
            # signals its supervisor forwards) is its own to stop; SIGTERM and SIGKILL reach the whole cgroup
        if sig == signal.SIGKILL and write_control(self.cgroup / "cgroup.kill", "1"):
            return
        for pid in self._cgroup_pids():  # what left the group (one signal each: a second SIGINT is another)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                if os.getpgid(pid) != self.pid:
                    os.kill(pid, sig)

    def _cgroup_pids(self) -> list[int]:
        try:
            return [int(p) for p in (self.cgroup / "cgroup.procs").read_text().split()] if self.cgroup else []
        except (OSError, ValueError):
            return []

    def alive(self) -> bool:
        """Whether anything of it still runs: the leader, its group or (where it has one) its cgroup."""
        if self.proc.poll() is None:
            return True
        if self.cgroup is not None and self._cgroup_pids():
            return True
        return group_alive(self.pid)

    def stop(self, grace: float = KILL_GRACE) -> None:
        """SIGTERM to all of it, SIGKILL after `grace` seconds to what is left; returns when nothing is left
        (or after `grace` more seconds: a process stuck in the kernel)."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            if not self.alive():
                break
            self.signal(sig)
            deadline = time.monotonic() + grace
            while self.alive() and time.monotonic() < deadline:
                time.sleep(POLL)
        self.release()

    def release(self) -> None:
        """Remove its cgroup, or, while it still holds a process (podman's conmon, which watches a detached
        container for as long as it runs, stays in the cgroup of the `podman run` that started it; a daemon
        the command left behind), note it: the next child's start and the tool's exit remove it once empty."""
        if self.cgroup is not None and not remove_cgroup(self.cgroup):
            linger(self.cgroup)


class Children:
    """Every command the tool started and that has not ended yet (`CHILDREN`): what a stop signal stops."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._live: dict[int, Child] = {}

    def add(self, proc: subprocess.Popen[bytes], first: int = signal.SIGTERM) -> Child:
        """Track a started process, to be stopped (first with signal `first`) if the tool is interrupted."""
        child = Child(proc, first)
        with self._lock:
            self._live[child.pid] = child
        return child

    def discard(self, child: Child) -> None:
        """Stop tracking a child that has ended."""
        with self._lock:
            self._live.pop(child.pid, None)
        child.release()

    def live(self) -> list[Child]:
        """The children still tracked."""
        with self._lock:
            return list(self._live.values())

    def terminate(self) -> list[Child]:
        """SIGTERM to every child now (safe in a signal handler: no waiting); returns them. Not to one started
        with no stop signal (`first` 0: an engine's load read from a pipe, which the tool ends by cutting its
        input short, so that it loads nothing and removes what it read; SIGTERM would leave its files behind)."""
        children = [c for c in self.live() if c.first]
        for child in children:
            child.signal(child.first)
        return children

    def stop_all(self, grace: float = KILL_GRACE) -> None:
        """Stop every child (SIGTERM, or SIGINT to a server) and wait until none is left: SIGKILL to what is
        left after `grace` seconds, or after SERVER_GRACE for a server, whose graceful shutdown (forwarded into
        a container by its supervisor, an engine exec away) takes longer than a compiler's end."""
        children = [c for c in self.live() if c.first]  # (`terminate`: one with no stop signal ends by itself)
        for child in children:
            if child.first not in child.sent:  # (not twice: a second SIGINT cuts a server's shutdown short)
                child.signal(child.first)
        started = time.monotonic()
        longest = max((self._grace(c, grace) for c in children), default=grace)
        while time.monotonic() < started + longest + grace:
            alive = [c for c in children if c.alive()]
            if not alive:
                break
            waited = time.monotonic() - started
            for child in alive:
                if waited >= self._grace(child, grace) and signal.SIGKILL not in child.sent:
                    child.signal(signal.SIGKILL)
            time.sleep(POLL)
        for child in children:
            child.release()

    @staticmethod
    def _grace(child: Child, grace: float) -> float:
        return max(grace, SERVER_GRACE) if child.first == signal.SIGINT else grace

    def stop_soon(self, grace: float = KILL_GRACE) -> threading.Thread:
        """`stop_all` in a thread of its own, started now (from a signal handler: the main thread may be
        waiting for a worker whose command ignores SIGTERM)."""
        thread = threading.Thread(target=self.stop_all, args=(grace,), name="stop-children", daemon=True)
        thread.start()
        return thread


CHILDREN = Children()


def group_alive(pgid: int) -> bool:
    """Whether a process of group `pgid` that is not a zombie still runs."""
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return _group_has_live_member(pgid)


def _group_has_live_member(pgid: int) -> bool:
    """Whether /proc shows a process of group `pgid` that is not a zombie (True where /proc cannot tell)."""
    try:
        entries = [e for e in os.listdir("/proc") if e.isdigit()]
    except OSError:
        return True
    for entry in entries:
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8", errors="replace") as f:
                stat = f.read()
        except OSError:
            continue
        state, _ppid, pgrp = stat[stat.rindex(")") + 2:].split()[:3]
        if int(pgrp) == pgid and state not in ("Z", "X"):
            return True
    return False
