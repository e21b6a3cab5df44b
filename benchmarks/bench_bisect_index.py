"""Bisect benchmark, closures from an index (`nox -s bench-bisect`, items 7 and 8; issue 26): a cold bisect whose
closure comes from a PEP 503 index on 127.0.0.1 beside a plain `git bisect run`, its resolver runs counted; the
README's demo bisect rerun with everything cached beside the same rerun of the demo whose closure comes from
an index. See benchmarks/bench_bisect.py's docstring for the goals."""

from __future__ import annotations

import functools
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.bench_bisect import PY, git_bisect_run, make_py_stack, spine_builder
from benchmarks.measure import side_by_side
from toolchain.bisect.candidates import git_candidates
from toolchain.bisect.core import Bisector
from toolchain.bisect.session import DEFAULT_JOBS
from toolchain.bisect.testers import CommandTester


class ResolverCounter:
    """Counts the resolver runs (uv) of the builds made in this process: a kept closure (resolve/closure_memo.py) runs
    none."""

    def __init__(self) -> None:
        self.calls = 0

    def __enter__(self) -> ResolverCounter:
        from toolchain.resolve import uvpin

        self._uvpin, self._real = uvpin, uvpin.resolve_closure

        def counted(*args: Any, **kw: Any) -> Any:
            self.calls += 1
            return self._real(*args, **kw)

        uvpin.resolve_closure = counted
        return self

    def __exit__(self, *exc: object) -> None:
        self._uvpin.resolve_closure = self._real


def run_index_benchmark(work: Path, *, commits: int = 60, rounds: int = 3, baseline: bool = True) -> dict[str, Any]:
    """A pure-Python component whose closure (`packaging`) comes from a PEP 503 index served on 127.0.0.1 by
    this process (tests/support/closure.py's CountingIndex, counting its requests): `rounds` cold bisects by
    the tool (each in an empty cache; default --jobs), interleaved with a plain `git bisect run` that exports
    and builds the same wheel at each step (no closure: `pip wheel --no-deps`). Resolutions are counted: the
    steps change no requirement, so one per cold bisect. Then the same bisect again with everything cached and
    the index stopped: no resolution, no request."""
    from tests.support.closure import CountingIndex, simple_index, wheelhouse

    stack = make_py_stack(work, commits=commits, requires=("packaging>=24",))
    simple_index(wheelhouse(work / "index-wheels"), work / "index")
    index = CountingIndex(work / "index")
    extra = f'[resolve]\nindexes = ["{index.url}/simple"]\n'
    cands = git_candidates(stack.kern.path, stack.kern.good, stack.kern.bad)
    t_tool, t_git, resolutions, found = [], [], [], []
    git_first_bad, git_steps = "", 0
    try:
        with ResolverCounter() as uv:
            for r in range(rounds):
                cold = work / f"cold{r}"
                tester = CommandTester([sys.executable, str(stack.test_script)], cold / "test-logs")
                before, started = uv.calls, time.monotonic()
                result = Bisector(cands, spine_builder(stack, cold, name=PY, extra=extra), tester,
                                  jobs=DEFAULT_JOBS).run()
                t_tool.append(time.monotonic() - started)
                resolutions.append(uv.calls - before)
                found.append(result.first_bad is not None and result.first_bad.key == stack.kern.first_bad)
                if baseline:
                    git_first_bad, git_steps, seconds = git_bisect_run(stack, work)
                    t_git.append(seconds)
            asked = index.count()
            index.stop()  # the network off: a rerun must need none
            rerun = work / "rerun"
            tester = CommandTester([sys.executable, str(stack.test_script)], rerun / "test-logs")
            before, started = uv.calls, time.monotonic()
            again = Bisector(cands, spine_builder(stack, rerun, name=PY, extra=extra, cache=work / "cold0" / "cache"),
                             tester, jobs=DEFAULT_JOBS).run()
            t_rerun, rerun_resolutions = time.monotonic() - started, uv.calls - before
    finally:
        index.stop()
    figures: dict[str, Any] = {
        "idx_commits": commits, "idx_steps": len(result.steps),
        "idx_tool_seconds": [round(t, 2) for t in t_tool], "idx_resolutions_per_cold_bisect": resolutions,
        "idx_index_requests": asked, "idx_rerun_seconds": round(t_rerun, 2),
        "idx_rerun_resolutions": rerun_resolutions, "idx_rerun_compiled": again.builds_compiled}
    checks = {"idx_found": all(found) and again.first_bad is not None and again.first_bad.key == stack.kern.first_bad,
              "idx_resolves_once": all(n == 1 for n in resolutions), "idx_rerun_resolves_nothing": rerun_resolutions == 0}
    if baseline:
        tool, git = statistics.median(t_tool), statistics.median(t_git)
        figures.update(idx_git_seconds=[round(t, 2) for t in t_git], idx_git_steps=git_steps,
                       idx_time_ratio=round(tool / git, 3))
        checks.update(idx_git_agrees=git_first_bad == stack.kern.first_bad, idx_no_slower_than_git=tool <= git)
    return {"ok": all(checks.values()), "figures": figures, "checks": checks}


# ---- a bisect rerun with everything cached: the demo, and the demo with its closure from an index ----------

WORD_COUNT_TEST = """\
import glob, os, sys
sys.path[:0] = glob.glob(os.path.join(os.environ["TOOLCHAIN_BISECT_WHEEL_DIR"], "demo_engine-*.whl"))
from demo_engine.text import word_count
sys.exit(0 if word_count("two  words ") == 2 else 1)
"""


def run_rerun_benchmark(work: Path, *, rounds: int = 5) -> dict[str, Any]:
    """The README's demo bisect (engine, v0.3.1..v0.4.0, `toolchain bisect` as a process) run once cold, then
    again into a new --out with everything cached, `rounds` times, interleaved with the same rerun of the demo
    whose closure comes from a PEP 503 index on 127.0.0.1 (a recipe variant; the index counts its requests).
    Each rerun's resolutions are counted (a build that ran the resolver leaves logs/resolve.log in its step
    folder; a kept closure none) and so are the index's requests: a rerun needs neither."""
    from benchmarks.measure import installed_like_env, run_timed
    from tests.support.closure import CountingIndex, demo_variant, simple_index, wheelhouse
    from toolchain.sources.demo import materialize

    root = Path(__file__).resolve().parent.parent
    env = installed_like_env(work / "pycache")
    cache = work / "cache"
    materialize(work / "demo-cache")
    shutil.copytree(work / "demo-cache" / "demo-repos", cache / "demo-repos")
    simple_index(wheelhouse(work / "index-wheels"), work / "index")
    index = CountingIndex(work / "index")
    recipes = {"demo": ["--recipe", "demo"],
               "indexed": ["--recipe", str(demo_variant(work / "recipes", "indexed",
                                                        {"indexes": [f"{index.url}/simple"]})),
                           "--patches-dir", str(root / "patches")]}
    (work / "word-count.py").write_text(WORD_COUNT_TEST)
    outs = iter(range(10_000))
    resolved: dict[str, list[int]] = {"demo": [], "indexed": []}

    def bisect(which: str) -> tuple[float, float]:
        out = work / f"{which}-{next(outs)}"
        argv = [sys.executable, "-m", "toolchain", "bisect", *recipes[which], "--component", "engine",
                "--good", "v0.3.1", "--bad", "v0.4.0", "--test-cmd", f"{sys.executable} word-count.py",
                "--cache-dir", str(cache), "--out", str(out), "--json"]
        timing = run_timed(argv, cwd=work, env=env)
        if not (out / "result.json").is_file():
            raise RuntimeError(f"the {which} bisect wrote no result.json: {' '.join(argv)}")
        resolved[which].append(len(list((out / "steps").glob("*/logs/resolve.log"))))
        return timing

    try:
        cold = {which: bisect(which)[0] for which in recipes}  # compiles the kernels once, resolves each closure
        cold_resolved = {which: resolved[which].pop() for which in recipes}
        asked = index.count()
        samples = side_by_side({which: functools.partial(bisect, which) for which in recipes}, rounds)
        rerun_asked = index.count() - asked
    finally:
        index.stop()
    demo, indexed = samples["demo"], samples["indexed"]
    figures: dict[str, Any] = {
        "rerun_cold_seconds": {k: round(v, 2) for k, v in cold.items()}, "rerun_cold_resolutions": cold_resolved,
        "rerun_demo": demo.as_dict(), "rerun_indexed": indexed.as_dict(),
        "rerun_indexed_over_demo": round(indexed.median / demo.median, 3),
        "rerun_indexed_over_demo_cpu": round(indexed.cpu_median / demo.cpu_median, 3),
        "rerun_resolutions": {k: sum(v) for k, v in resolved.items()}, "rerun_index_requests": rerun_asked}
    checks = {"rerun_resolves_nothing": sum(resolved["indexed"]) == 0 and sum(resolved["demo"]) == 0
              and rerun_asked == 0,
              "rerun_within_1.5x_demo": indexed.median <= 1.5 * demo.median}
    return {"ok": all(checks.values()), "figures": figures, "checks": checks}
