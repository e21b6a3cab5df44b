"""Which untested candidates a bisect builds next: the one nearest the middle of a range, the middles of
the largest gaps for builds side by side, and how many tests are left at most."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

from toolchain.bisect.model import Verdict


def pick(lo: int, hi: int, marks: Sequence[Verdict | None]) -> int | None:
    """The untested index nearest the middle of (lo, hi); None when only skipped ones are left."""
    untested = [i for i in range(lo + 1, hi) if marks[i] is None]
    if not untested:
        return None
    mid = (lo + hi) / 2
    return min(untested, key=lambda i: (abs(i - mid), i))


def splits(lo: int, hi: int, marks: Sequence[Verdict | None], points: set[int], count: int) -> list[int]:
    """Up to `count` indices to build, one after the other the untested index nearest the middle of the largest
    gap (the most untested indices strictly inside; ties: the lowest) between lo, `points` and hi."""
    edges, new = sorted({lo, hi, *points}), []
    for _ in range(count):
        size, _lowest, a, b = max((sum(1 for i in range(a + 1, b) if marks[i] is None), -a, a, b)
                                  for a, b in itertools.pairwise(edges))
        index = pick(a, b, marks) if size else None
        if index is None:
            break
        new.append(index)
        edges = sorted((*edges, index))
    return new


def steps_left(pending: int) -> int:
    """Tests still needed, at most, to settle `pending` untested candidates (no skips)."""
    return math.ceil(math.log2(pending + 1)) if pending > 0 else 0
