"""Hostile sizes (issue 21): a recipe of 10,000 components, planned or refused. Printed, not a timed test.

`python -m benchmarks.bench_hostile` orders 10,000 components whose `after` chain runs against their
declaration order (the worst case), side by side: the dependency order as it was (each step scanned every
pending component: quadratic) and `recipe.validate._order` (Kahn's algorithm over a heap: linear), then
loads and refuses a 10,000-component recipe file the way `toolchain plan` does. Goal: under 2 s.
"""

from __future__ import annotations

import math
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from toolchain.errors import RecipeError
from toolchain.recipe.load import load_recipe
from toolchain.recipe.model import Component
from toolchain.recipe.problems import _Problems
from toolchain.recipe.validate import _order

N = 10_000


def _old_order(comps: dict[str, Component]) -> list[Component]:
    """The order before issue 21 (kept here to measure against)."""
    ordered: list[Component] = []
    placed: set[str] = set()
    pending = list(comps.values())
    while pending:
        ready = [c for c in pending if all(d in placed or d not in comps or d == c.name for d in c.after)]
        if not ready:
            return ordered + pending
        ordered.append(ready[0])
        placed.add(ready[0].name)
        pending.remove(ready[0])
    return ordered


def _chain(n: int) -> dict[str, Component]:
    return {f"c{i}": Component(name=f"c{i}", url="u", commit="a" * 40, after=(f"c{i + 1}",) if i + 1 < n else ())
            for i in range(n)}


def _timed(fn: Callable[..., object], *args: object) -> float:
    t = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t


def main() -> None:
    for n in (1_000, 2_000, N):
        comps = _chain(n)
        new = min(_timed(_order, comps, _Problems(Path("r.toml"))) for _ in range(3))
        old = _timed(_old_order, comps) if n <= 2_000 else float("nan")
        ratio = f"x{old / new:.0f}" if not math.isnan(old) else "(old: not run, quadratic)"
        print(f"order {n:>6} components: old {old:8.3f} s, new {new:8.4f} s {ratio}")
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "recipes" / "big.toml"
        path.parent.mkdir()
        lines = ["[components]"] + [f'c{i} = {{url = "u", commit = "{"a" * 40}", after = ["c{i + 1}"]}}'
                                    for i in range(N)]
        path.write_text("\n".join(lines) + "\n")
        t, cpu = time.perf_counter(), time.process_time()
        try:
            load_recipe(str(path))
        except RecipeError as exc:
            print(f"refused: {str(exc).splitlines()[-1][:100]}")
        print(f"load + validate + refuse {N} components ({path.stat().st_size} bytes): "
              f"{time.perf_counter() - t:.2f} s wall, {time.process_time() - cpu:.2f} s CPU (goal < 2 s)")


if __name__ == "__main__":
    main()
