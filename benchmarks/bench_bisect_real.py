"""Bisect benchmark on real history (`nox -s bench-bisect`, items 9 and 10; issues 41 and 48): intel/auto-round
through a local mirror, skipped with a note when the mirror is absent (nothing is fetched from GitHub).

A recipe names auto-round's GitHub URL, rewritten by its [mirrors] table to the mirror (--real-mirror: a bare
clone of /work/shared/mirrors/intel+auto-round.bundle); the closure comes from PyPI; both ends are checked.
Each round runs, side by side, for each range: a cold bisect by the tool (an empty cache) and a clean
`git bisect run` (`git clean -fdx` + `pip wheel --no-build-isolation --no-deps` + the same test):

9.  `real`: 204 first-parent commits to b9f3d007; the test: the built wheel holds a file added at a known
    commit. No requirement changes on the way.                                     goal: ratio <= 0.8
10. `reqs`: 280 first-parent commits d74f4bc..24e4397 that cross eight changes of the declared requirements
    (triton removed, accelerate restricted then raised, numba removed, numpy<2.0 loosened, tbb removed,
    accelerate loosened, non-essential requirements removed); the test reads the built wheel's metadata:
    bad once `Requires-Dist: numpy` has no `<2` bound (a00fcc60, "remove numpy<2.0 limitation"). The test
    installs no closure, so no step resolves one: the two locks the result names are completed in the
    background and when it ends; `reqs_spent` says what each bisect spent. Then the same bisect again (the
    last round's cache, a new out folder): it compiles nothing and names the same commit.
                                                                                   goal: ratio <= 0.9
Then item 4 on this repository (a step by the tool beside a raw `git archive` + `pip wheel`; goal <= 0.3 s)
and the profile of one step.

The machine may be loaded by other work: the ratios are of runs side by side in one process, each round
interleaved, so both sides meet the same load; the figures say what they were measured under.
"""

from __future__ import annotations

import os
import re
import shutil
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.bench_bisect import BuildCommandClock, SubprocessClock, _cpu, _timed, raw_wheel
from benchmarks.measure import Sample, profile_call, side_by_side
from toolchain.bisect.candidates import git_candidates
from toolchain.bisect.core import Bisector, BisectResult
from toolchain.bisect.session import DEFAULT_JOBS
from toolchain.bisect.testers import CommandTester
from toolchain.core.proc.runner import run

REAL_URL = "https://github.com/intel/auto-round"
REAL_MIRROR = Path("/work/.mirror/intel+auto-round/repo")

HOLDS_FILE_PY = """\
import glob, os, sys, zipfile
wheel_dir = os.environ.get("TOOLCHAIN_BISECT_WHEEL_DIR") or sys.argv[1]
wheels = glob.glob(os.path.join(wheel_dir, "auto_round-*.whl"))
names = [n for w in wheels for n in zipfile.ZipFile(w).namelist()]
sys.exit(2 if not wheels else 1 if {string!r} in names else 0)
"""

NUMPY_BOUND_PY = """\
import glob, os, re, sys, zipfile
wheel_dir = os.environ.get("TOOLCHAIN_BISECT_WHEEL_DIR") or sys.argv[1]
wheels = glob.glob(os.path.join(wheel_dir, "auto_round-*.whl"))
if not wheels:
    sys.exit(2)
z = zipfile.ZipFile(wheels[0])
meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
reqs = [line.split(":", 1)[1].replace(" ", "") for line in z.read(meta).decode().splitlines()
        if line.startswith("Requires-Dist:")]
numpy = [r for r in reqs if re.match(r"numpy([<>=!~;]|$)", r.lower())]
sys.exit(0 if any("<2" in r for r in numpy) else 1)
"""

GIT_STEP_PY = """\
import subprocess, sys, tempfile
clone, test = sys.argv[1], sys.argv[2]
subprocess.run(["git", "-C", clone, "clean", "-q", "-fdx"], check=True)
with tempfile.TemporaryDirectory() as out:
    if subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-build-isolation", "--no-deps", clone,
                       "-w", out], capture_output=True).returncode:
        sys.exit(125)
    sys.exit(subprocess.run([sys.executable, test, out]).returncode)
"""


@dataclass(frozen=True)
class RealRange:
    """A range of auto-round's first-parent history, its test and the commit the test names."""
    name: str
    good: str
    bad: str
    first_bad: str
    test_py: str
    goal: float  # the tool's median over `git bisect run`'s, at most


REAL = RealRange("real", "253117eb0542c041b8d88ac2cf5d522d37f4d8a0", "b9f3d0079d014c73a1ff009800c597b9bc3f2a36",
                 "126793d50cf87785e599f0d320a319233ae8d778",  # adds the file the test looks for
                 HOLDS_FILE_PY.format(string="auto_round/export/export_to_gguf/hf_checkpoint_restorer.py"), 0.8)
REQS = RealRange("reqs", "d74f4bcf98e128a1d05cd13957350217f54338a1", "24e43976900aa34db2b3901bedb67c3f0f387b66",
                 "a00fcc60088fbabf19d3805927b809bf977830d9",  # remove numpy<2.0 limitation
                 NUMPY_BOUND_PY, 0.9)
RANGES = (REAL, REQS)
# ARK's FetchContent dependencies (auto_round_extension/ark/, from within item 9's range): the root's pip wheel
# never configures ARK's CMake, so never fetches them
ARK_FETCHCONTENT = ("pybind11", "dnnl", "sycl_tla", "xbyak")
ARK_UNUSED = "ARK's (auto_round_extension/ark/), which the root pip wheel never configures"


def real_builder(work: Path, mirror: Path, *, cache: Path | None = None, resolve_steps: bool = True) -> Any:
    """The `toolchain bisect` builder for auto-round at a step: a recipe naming the GitHub URL, rewritten by its
    [mirrors] table to the local mirror (nothing fetched from GitHub), the closure resolved from PyPI (at each
    step when `resolve_steps`, else for the locks the bisect names, as for a test that installs none)."""
    from toolchain.bisect.builder import SpineBuilder
    from toolchain.console import UI
    from toolchain.recipe import load as recipes

    text = "\n".join(['description = "bisect benchmark, real history"', "[toolchain]", 'setvars = ""', "[target]",
                      'runtime = "host"', f"python = {_toml(sys.executable)}", "[mirrors]",
                      f"{_toml(REAL_URL)} = {_toml(str(mirror.resolve()))}", "[components.auto-round]",
                      f"url = {_toml(REAL_URL)}", f'commit = "{REAL.bad}"',
                      "[components.auto-round.fetchcontent-unused]",  # (build/fetchcontent_check.py, issue 50)
                      *(f'{name} = "{ARK_UNUSED}"' for name in ARK_FETCHCONTENT), ""])
    path = work / "recipes" / "real.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    base = recipes.load_recipe(str(path))
    return SpineBuilder(lambda sha: base.with_commit("auto-round", sha), work / "steps", cache or work / "cache", (),
                        UI(quiet=True), component="auto-round", resolve_steps=resolve_steps)


def _toml(text: str) -> str:
    import json

    return json.dumps(text)


def real_git_bisect_run(mirror: Path, work: Path, test: Path, rng: RealRange = REAL) -> tuple[str, int, float, float]:
    """A clean `git bisect run` of the range: `git clean -fdx`, `pip wheel --no-build-isolation --no-deps`,
    the same test. (first bad, steps, wall seconds, CPU seconds)"""
    clone = work / "git-baseline"
    shutil.rmtree(clone, ignore_errors=True)
    run(["git", "clone", "-q", "--no-checkout", str(mirror), str(clone)], capture=True)
    step = work / "git_step.py"
    step.write_text(GIT_STEP_PY)
    git = ["git", "-C", str(clone), "-c", "user.name=bench", "-c", "user.email=bench@example.org"]
    started, cpu = time.monotonic(), _cpu()
    run([*git, "bisect", "start", "--first-parent", rng.bad, rng.good], capture=True)
    done = run([*git, "bisect", "run", sys.executable, str(step), str(clone), str(test)], capture=True, check=False)
    seconds, cpu = time.monotonic() - started, _cpu() - cpu
    found = re.search(r"^([0-9a-f]{40}) is the first bad commit", done.stdout, re.M)
    return found.group(1) if found else "", done.stdout.count("running "), seconds, cpu


def tool_bisect(rng: RealRange, mirror: Path, work: Path, test: Path, *,
                cache: Path | None = None) -> tuple[BisectResult, float, float]:
    """A bisect of the range by the tool (as `toolchain bisect --test-cmd` runs it, both ends checked): its
    result, wall seconds (a completion left in the background after it is waited for, not timed) and CPU
    seconds (this process's and its children's, that completion's included)."""
    cands = git_candidates(mirror, rng.good, rng.bad, url=REAL_URL)
    tester = CommandTester([sys.executable, str(test)], work / "test-logs")
    bisector = Bisector(cands, real_builder(work, mirror, cache=cache, resolve_steps=tester.needs_closure), tester,
                        jobs=DEFAULT_JOBS, check_ends=True)
    started, cpu = time.monotonic(), _cpu()
    result = bisector.run()
    seconds = time.monotonic() - started
    bisector.wait_background()
    return result, seconds, _cpu() - cpu


def _steps(result: BisectResult) -> list[str]:
    """Where a bisect's wall time went, step by step."""
    return [f"{r.endpoint or f'step {r.number}':>8} {r.key[:12]} waited for its build {r.build_seconds:5.2f} s"
            f"{' (built ahead)' if r.prefetched else ''}, test {r.test_seconds:4.2f} s: {r.verdict.value}"
            for r in (*result.checks, *result.steps)]


def run_real_benchmark(work: Path, *, mirror: Path = REAL_MIRROR, rounds: int = 2, step_rounds: int = 3,
                       baseline: bool = True, ranges: tuple[RealRange, ...] = RANGES) -> dict[str, Any]:
    """Items 9 and 10 (the module's docstring), then item 4 on this repository and a profile of one step."""
    if not (mirror / "objects").is_dir():
        print(f"real history: no mirror of intel/auto-round at {mirror}; skipped (nothing is fetched from GitHub)")
        return {"ok": True, "figures": {"real_skipped": f"no mirror at {mirror}"}, "checks": {}}
    work.mkdir(parents=True, exist_ok=True)
    tests = {}
    for rng in ranges:
        tests[rng.name] = work / f"{rng.name}_test.py"
        tests[rng.name].write_text(rng.test_py)
    figures: dict[str, Any] = {"real_load_at_start": round(os.getloadavg()[0], 2)}
    checks: dict[str, bool] = {}
    t_tool: dict[str, list[float]] = {rng.name: [] for rng in ranges}
    t_git: dict[str, list[float]] = {rng.name: [] for rng in ranges}
    cpu_tool: dict[str, list[float]] = {rng.name: [] for rng in ranges}
    cpu_git: dict[str, list[float]] = {rng.name: [] for rng in ranges}
    last: dict[str, BisectResult] = {}
    for r in range(rounds):
        for rng in ranges:  # side by side: each range's tool bisect, then its git bisect run
            name = rng.name
            result, seconds, cpu = tool_bisect(rng, mirror, work / f"{name}-cold{r}", tests[name])
            t_tool[name].append(seconds)
            cpu_tool[name].append(cpu)
            last[name] = result
            checks[f"{name}_found"] = checks.get(f"{name}_found", True) and result.first_bad is not None \
                and result.first_bad.key == rng.first_bad and len(result.checks) == 2
            figures.setdefault(f"{name}_builds_compiled", []).append(result.builds_compiled)
            figures.setdefault(f"{name}_spent", []).append(result.spent.line())
            if baseline:
                git_first_bad, git_steps, git_seconds, git_cpu = real_git_bisect_run(mirror, work, tests[name], rng)
                t_git[name].append(git_seconds)
                cpu_git[name].append(git_cpu)
                figures[f"{name}_git_steps"] = git_steps
                checks[f"{name}_git_agrees"] = checks.get(f"{name}_git_agrees", True) and git_first_bad == rng.first_bad
    figures["real_load_at_end"] = round(os.getloadavg()[0], 2)
    for rng in ranges:
        name, result = rng.name, last[rng.name]
        commits = len(git_candidates(mirror, rng.good, rng.bad, url=REAL_URL)) - 1
        figures.update({f"{name}_commits": commits, f"{name}_steps": len(result.steps),
                        f"{name}_tool_seconds": [round(t, 2) for t in t_tool[name]],
                        f"{name}_tool_cpu_seconds": [round(t, 2) for t in cpu_tool[name]],
                        f"{name}_last_bisect": _steps(result)})
        if baseline:
            tool, git = statistics.median(t_tool[name]), statistics.median(t_git[name])
            figures.update({f"{name}_git_seconds": [round(t, 2) for t in t_git[name]],
                            f"{name}_git_cpu_seconds": [round(t, 2) for t in cpu_git[name]],
                            f"{name}_time_ratio": round(tool / git, 3),
                            f"{name}_cpu_ratio": round(statistics.median(cpu_tool[name])
                                                       / statistics.median(cpu_git[name]), 3)})
            checks[f"{name}_within_{rng.goal}x_git"] = tool <= rng.goal * git
        locks = [b for b in (result.good_build, result.bad_build) if b is not None]
        checks[f"{name}_named_locks_pin_closures"] = len(locks) == 2 and all(
            b.ok and not b.deferred and "[[dependencies]]" in Path(str(b.lock_path)).read_text() for b in locks)
    if REQS in ranges:  # the same bisect again: the last round's cache, a new out folder
        again, seconds, _ = tool_bisect(REQS, mirror, work / "reqs-rerun", tests["reqs"],
                                     cache=work / f"reqs-cold{rounds - 1}" / "cache")
        figures.update(reqs_rerun_seconds=round(seconds, 2), reqs_rerun_builds_compiled=again.builds_compiled,
                       reqs_rerun_spent=again.spent.line())
        checks["reqs_rerun_compiles_nothing"] = again.builds_compiled == 0 and again.first_bad is not None \
            and again.first_bad.key == REQS.first_bad
    if step_rounds:
        _step_figures(work, mirror, step_rounds, figures, checks)
    return {"ok": all(checks.values()), "figures": figures, "checks": checks}


def _step_figures(work: Path, mirror: Path, rounds: int, figures: dict[str, Any], checks: dict[str, bool]) -> None:
    """Item 4 on the real repository: the tool's own cost per step beside a raw git archive + pip wheel."""
    shas = [c.key for c in git_candidates(mirror, REAL.good, REAL.bad, url=REAL_URL)]
    builder = real_builder(work / "step", mirror)
    assert builder.build(shas[1]).ok
    picks = iter(shas[2:])
    with BuildCommandClock() as clock:
        samples = side_by_side({"tool": lambda: _timed(lambda: builder.build(next(picks))),
                                "raw": lambda: _timed(lambda: raw_wheel(mirror, REAL.bad, work))}, rounds)
    tool_s, raw = samples["tool"], samples["raw"]
    overhead = Sample([t - b[0] for t, b in zip(tool_s.wall, clock.times, strict=False)],
                      [t - b[1] for t, b in zip(tool_s.cpu, clock.times, strict=False)])
    with SubprocessClock() as subs:
        started = time.perf_counter()
        assert builder.build(next(picks)).ok
        one_step = subs.lines(time.perf_counter() - started)
    outcome, profile = profile_call(lambda: builder.build(next(picks)))
    figures.update(real_step_tool=tool_s.as_dict(), real_step_raw=raw.as_dict(),
                   real_step_overhead=overhead.as_dict(), real_step_subprocesses=one_step,
                   real_step_profile=profile)
    checks.update({"real_step_builds": bool(getattr(outcome, "ok", False)),
                   "real_step_overhead_within_0.3s": overhead.median <= 0.3})
