"""Which of a stack's compiles run at once.

Components do not build against each other: each builds in the target's own environment (`after` orders
the install, not the build), so their compiles may overlap. They start in the plan's order, as many at
once as the memory their compile jobs are budgeted (jobs × memory per job, `build/jobs.py`) fits in what
the target has available, and never more than its cores, nor than `--builds-at-once`. A build that does not
fit waits for running ones to end, and none after it overtakes it; the first always starts (its jobs were
already capped to the memory there is).

What that means in practice: vllm-xpu-kernels budgets 8 GiB per job, as many jobs as memory allows, so on a
workstation it builds alone and nothing changes; two small builds on a machine with memory to spare (the
demo's three pure-Python and C-extension packages on 2 cores) build side by side.

After a failure nothing new starts; the builds running finish (their wheels are cached, so the rerun after
the fix does not pay for them again), then the first failure in the plan's order is raised and the others
are warned about.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

from toolchain.core.record import record

if TYPE_CHECKING:
    from concurrent.futures import Future

T = TypeVar("T")
R = TypeVar("R")


@record
class Budget:
    """What builds running at once may add up to."""
    at_once: int      # builds (at least 1)
    memory: int       # bytes of memory their compile jobs may reserve together

    def admits(self, running: int, reserved: int, memory: int) -> bool:
        """Whether a build needing `memory` may start now: always the first, else while jobs and memory allow it."""
        return running == 0 or (running < self.at_once and reserved + memory <= self.memory)


class _Board:
    """The builds running and what they reserve (guarded by a condition the scheduler waits on)."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.running: dict[int, int] = {}  # index -> memory reserved
        self.failed = False

    def reserved(self) -> int:
        return sum(self.running.values())


def run_at_once(items: Sequence[T], work: Callable[[T], R], budget: Budget, memory: Callable[[T], int], *,
                started: Callable[[T], None] | None = None, ended: Callable[[T], None] | None = None,
                also_failed: Callable[[T, BaseException], None] | None = None) -> list[R]:
    """`work(item)` for each item, in order, overlapping as `budget` admits; the results in the items'
    order. `started`/`ended` are called (in the scheduling thread / the worker) around each item's work."""
    if budget.at_once <= 1 or len(items) <= 1:  # one after another, in this thread
        out = []
        for item in items:
            if started:
                started(item)
            out.append(work(item))
            if ended:
                ended(item)
        return out
    from concurrent.futures import ThreadPoolExecutor  # (not on a warm no-op's path: it imports logging)

    board = _Board()
    futures: list[Future[R]] = []

    def one(index: int, item: T) -> R:
        try:
            result = work(item)
        except BaseException:
            with board.cond:
                board.failed = True
            raise
        finally:
            if ended:
                ended(item)
            with board.cond:
                del board.running[index]
                board.cond.notify_all()
        return result

    with ThreadPoolExecutor(min(budget.at_once, len(items)), thread_name_prefix="build") as pool:
        for index, item in enumerate(items):
            need = memory(item)
            with board.cond:
                while not board.failed and not budget.admits(len(board.running), board.reserved(), need):
                    board.cond.wait(0.5)  # (a timeout: a signal reaches this thread between waits)
                if board.failed:
                    break
                board.running[index] = need
            if started:
                started(item)
            futures.append(pool.submit(one, index, item))
    errors = [(items[i], err) for i, f in enumerate(futures) if (err := f.exception()) is not None]
    if errors:
        for item, err in errors[1:]:
            if also_failed:
                also_failed(item, err)
        raise errors[0][1]
    return [f.result() for f in futures]


__all__ = ["Budget", "run_at_once"]
