"""The nice values a bisect's background work runs at, per thread (Linux: nice is per thread, and a child
starts with its thread's): a build ahead at AHEAD_NICE, a lock completed in the background at COMPLETE_NICE,
and back to the bisect's own value once the result waits for it."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable
from typing import TypeVar

from toolchain.core.cpu import renice_descendants

AHEAD_NICE = 10  # how much nicer than the bisect a build ahead runs (its thread, so its processes): never the awaited one's rival
COMPLETE_NICE = 15  # and a lock completed in the background (its closure resolved for a lock the result may name)

_T = TypeVar("_T")


def at_nice(increment: int, build: Callable[[str], _T], key: str) -> _T:
    """`build(key)` in this (pool) thread at the bisect's nice value + `increment` (Linux: nice is per thread
    and a child starts with its thread's), the thread's own value restored after where allowed."""
    tid = threading.get_native_id()
    base = os.getpriority(os.PRIO_PROCESS, os.getpid())
    with contextlib.suppress(OSError):  # no per-thread priority here: the build runs at the bisect's
        os.setpriority(os.PRIO_PROCESS, tid, min(19, base + increment))
    try:
        return build(key)
    finally:
        with contextlib.suppress(OSError):  # a pool thread is reused for an awaited build
            os.setpriority(os.PRIO_PROCESS, tid, base)


def hurry(threads: set[int], increment: int = COMPLETE_NICE) -> None:
    """The result waits for the work running in the background `threads` now (completions; the ends' checks,
    `increment` AHEAD_NICE): they and the processes they run (the resolver, a build) go on at the bisect's
    nice value, no longer `increment` more, as its own step would (the wait is the bisect's: a nicer one,
    starved by other work, would hold it up; where lowering a nice value is not allowed, they keep theirs). A
    process they start later inherits its thread's."""
    if not threads:
        return
    base = os.getpriority(os.PRIO_PROCESS, os.getpid())
    for tid in threads:
        with contextlib.suppress(OSError):  # ended, or not allowed
            os.setpriority(os.PRIO_PROCESS, tid, base)
    renice_descendants(os.getpid(), min(19, base + increment), base)
