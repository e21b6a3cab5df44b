"""Bisect with the compiler cache (issue 11; run by `nox -s bench-bisect` after bench_bisect): a bisect over
`--commits` commits of the synthetic C++ component (each commit changes one translation unit), measured
side by side in one run:

1. `toolchain` bisect with the compiler cache: compile seconds (the builds' own wall and CPU seconds, from the
   step locks) and the bisect's wall time;
2. the same bisect with `[build] compiler-cache = "none"`;
3. `git bisect run` with a script that builds the checkout with `pip wheel --no-build-isolation` (no cache).

    python -m benchmarks.bench_ccache_bisect [--commits 30] [--tus 40] [--work 800] [--reps 6] [--json]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.synthetic import Synthetic, changes_at, make_synthetic, recipe_text
from toolchain.core.proc.runner import run

TEST_PY = """\
import os, sys, tempfile, zipfile
wheels = [w for w in os.environ.get("TOOLCHAIN_BISECT_WHEELS", "").split(os.pathsep) if w] or sys.argv[1:]
with tempfile.TemporaryDirectory() as d:
    for w in wheels:
        zipfile.ZipFile(w).extractall(d)
    sys.path.insert(0, d)
    import synthetic._synth as s
    sys.exit(1 if s.changes() >= {threshold} else 0)
"""

STEP_PY = """\
import glob, subprocess, sys, tempfile
with tempfile.TemporaryDirectory() as out:
    if subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-build-isolation", "--no-deps", ".",
                       "-w", out]).returncode != 0:
        sys.exit(125)
    sys.exit(subprocess.run([sys.executable, sys.argv[1], *glob.glob(out + "/*.whl")]).returncode)
"""


class Counting:
    """A builder that sums the compile seconds of the steps it really built (from their locks)."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.wall, self.cpu, self.builds, self.hits, self.misses = inner, 0.0, 0.0, 0, 0, 0

    def build(self, key: str) -> Any:
        from toolchain.lock import read_lock

        outcome = self.inner.build(key)
        if outcome.ok and not outcome.cached and outcome.lock_path:
            (comp,) = read_lock(outcome.lock_path).components
            self.wall += comp.metrics.wall_seconds
            self.cpu += comp.metrics.cpu_seconds
            self.builds += 1
            self.hits += comp.compiler_cache.hits
            self.misses += comp.compiler_cache.misses
        return outcome

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def tool_bisect(synth: Synthetic, work: Path, test: Path, *, cache_on: bool) -> dict[str, Any]:
    from toolchain.bisect.builder import SpineBuilder
    from toolchain.bisect.candidates import git_candidates
    from toolchain.bisect.core import Bisector
    from toolchain.bisect.testers import CommandTester
    from toolchain.console import UI
    from toolchain.recipe import load as recipes

    name = "on" if cache_on else "off"
    path = work / "recipes" / f"bisect-{name}.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(recipe_text(synth, synth.commits[-1], build=None if cache_on else {"compiler-cache": "none"}))
    base = recipes.load_recipe(str(path))
    spine = SpineBuilder(lambda sha: base.with_commit("synthetic", sha), work / f"steps-{name}",
                         work / f"cache-{name}", (), UI(quiet=True), component="synthetic")
    builder = Counting(spine)
    cands = git_candidates(synth.path, synth.commits[0], synth.commits[-1])
    started = time.monotonic()
    result = Bisector(cands, builder, CommandTester([sys.executable, str(test)], work / f"test-logs-{name}"),
                      jobs=1).run()
    return {"first_bad": result.first_bad.key if result.first_bad else None, "seconds": time.monotonic() - started,
            "compile_wall": builder.wall, "compile_cpu": builder.cpu, "builds": builder.builds,
            "hits": builder.hits, "misses": builder.misses}


def git_bisect(synth: Synthetic, work: Path, test: Path) -> dict[str, Any]:
    clone = work / "git-bisect"
    run(["git", "clone", "-q", str(synth.path), str(clone)], capture=True)
    step = work / "step.py"
    step.write_text(STEP_PY)
    git = ["git", "-C", str(clone), "-c", "user.name=bench", "-c", "user.email=bench@example.org"]
    started = time.monotonic()
    run([*git, "bisect", "start", synth.commits[-1], synth.commits[0]], capture=True)
    done = run([*git, "bisect", "run", sys.executable, str(step), str(test)], capture=True, check=False)
    seconds = time.monotonic() - started
    first = next((line.split()[0] for line in done.stdout.splitlines() if "is the first bad commit" in line), None)
    return {"first_bad": first, "seconds": seconds, "steps": done.stdout.count("running ")}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.bench_ccache_bisect", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--commits", type=int, default=30)
    ap.add_argument("--tus", type=int, default=40)
    ap.add_argument("--work", type=int, default=800)
    ap.add_argument("--reps", type=int, default=6)
    ap.add_argument("--keep", type=Path)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    work = args.keep or Path(tempfile.mkdtemp(prefix="bench-ccache-bisect-"))
    try:
        synth = make_synthetic(work / "repo", tus=args.tus, commits=args.commits + 1, work=args.work,
                               reps=args.reps)
        bad = args.commits * 2 // 3
        test = work / "test.py"
        test.write_text(TEST_PY.format(threshold=changes_at(bad, args.tus)))
        report = {"commits": args.commits, "expected": synth.commits[bad],
                  "cache": tool_bisect(synth, work, test, cache_on=True),
                  "no_cache": tool_bisect(synth, work, test, cache_on=False),
                  "git_bisect_run": git_bisect(synth, work, test)}
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    on, off, gb = report["cache"], report["no_cache"], report["git_bisect_run"]
    ok = on["first_bad"] == off["first_bad"] == gb["first_bad"] == report["expected"]
    if args.json:
        print(json.dumps(report, indent=2))
        return 0 if ok else 1
    print(f"bisect over {args.commits} commits of a {args.tus}-unit C++ component (one unit changed per commit)")
    print(f"  toolchain, compiler cache on   compile {on['compile_wall']:7.1f} s wall / {on['compile_cpu']:7.1f} s CPU "
          f"in {on['builds']} builds ({on['hits']} hits, {on['misses']} misses); bisect {on['seconds']:.1f} s")
    print(f"  toolchain, compiler cache off  compile {off['compile_wall']:7.1f} s wall / {off['compile_cpu']:7.1f} s CPU "
          f"in {off['builds']} builds; bisect {off['seconds']:.1f} s")
    print(f"  git bisect run (pip wheel)     {gb['seconds']:7.1f} s in {gb['steps']} steps")
    print(f"  compile seconds, cache on/off  {on['compile_wall'] / off['compile_wall']:.3f} (wall), "
          f"{on['compile_cpu'] / off['compile_cpu']:.3f} (CPU)")
    print(f"  bisect seconds vs git bisect   {on['seconds'] / gb['seconds']:.3f} (cache on), "
          f"{off['seconds'] / gb['seconds']:.3f} (cache off)")
    print(f"  first bad commit found by all  {ok}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
