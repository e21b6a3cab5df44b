"""Bisect benchmark (`nox -s bench-bisect`, issue 5): builds needed and wall time, printed, not a timed test.

A generated stack: `benchkern`, a repository of at least 200 first-parent commits (merged side branches, so
first-parent matters) with a C extension, a known first-bad commit and a few commits that do not compile;
beside it `benchheavy` (a C extension slow to compile) and `benchpy` (pure Python), pinned. Measured in one
run:

1. the builds one bisect needs <= ceil(log2(N+1)) + 1, plus one per skipped commit (N = commits in good..bad);
2. the same bisect again compiles nothing (the wheel cache);
3. its wall time against `git bisect run` with a script that rebuilds every component at each step: <= 1/3.

Builds go through the build spine (`spine_builder`: the `toolchain bisect` builder on a generated recipe).
The wall-time ratio depends on how much heavier the other components are than the bisected one
(`--heavy-functions`).

Then the tool's own cost per step, on a fast pure-Python component (`benchpy`, a pyproject with build
requirements, linear history; the stack is that one component):

4. the step overhead: a step built by the tool (`SpineBuilder.build` of a commit not built before) beside a
   raw `git archive` + `pip wheel` of the same commit, interleaved; the difference, wall and CPU.
                                                                               goal: <= 0.3 s per step
5. the top lines of a cProfile of one step;
6. a cold bisect by the tool against `git bisect run` with a script that exports, builds and tests each
   step, on that component.   goal: ratio <= 1
   With its default --jobs (3) the first build measures how many cores a build keeps busy (one: a setuptools
   build is single-threaded), then the tool keeps idle cores / that builds in flight (at most --jobs), spread
   over the range: with 2 idle cores each step's midpoint builds together with the midpoint of one of its
   halves, which the next step tests half of the time (~1.5 levels per build time). Steps and builds
   needed stay plain bisection's. With --jobs 1 (py_time_ratio_jobs1) nothing is built ahead: the tool's
   own overhead alone. On a loaded machine (fewer idle cores) the default falls back to one build at once.

Then closures from an index (issue 26: resolve once per change):

7. a cold bisect of a pure-Python component whose closure (`packaging`) comes from a PEP 503 index served on
   127.0.0.1 (tests/support/closure.py's CountingIndex), each in an empty cache, interleaved with a plain
   `git bisect run` that builds the same wheel with `pip wheel` (the tool makes pip's one build-backend call
   itself, build/frontend.py: the same wheel bytes); the resolver runs counted (the steps change no requirement:
   one per bisect), then the same bisect again with everything cached and the index stopped (none).
                                                                               goal: ratio <= 1
8. the README's demo bisect rerun with everything cached (`toolchain bisect` as a process, into a new --out)
   beside the same rerun of the demo whose closure comes from an index on 127.0.0.1, interleaved; each
   rerun's resolutions (resolve.log files in its step folders) and index requests counted.
                                                                   goal: no resolution, <= 1.5x the demo's

Then real history (issues 41 and 48; benchmarks/bench_bisect_real.py), skipped with a note when the mirror
is absent (nothing is fetched from GitHub), each round side by side with a clean `git bisect run`:

9. a cold bisect of 204 first-parent commits of intel/auto-round (a recipe naming its GitHub URL, rewritten by
   the recipe's [mirrors] table to the local mirror, --real-mirror; the closure resolved from PyPI; both ends
   checked; the test: the built wheel contains a file added at a known commit);    goal: ratio <= 0.8
10. a cold bisect of 280 first-parent commits that cross eight requirement changes, the test reading the
   wheel's metadata (no step resolves a closure: the named locks are completed off the critical path; what
   each bisect spent is printed), then the same bisect again compiling nothing.    goal: ratio <= 0.9
   Then item 4 on that repository (a step beside a raw `git archive` + `pip wheel`; goal <= 0.3 s) and the
   profile of one step.

    python -m benchmarks.bench_bisect [--work DIR] [--commits 240] [--jobs 3] [--heavy-functions N]
                                      [--py-commits 60] [--step-rounds 5] [--no-kernel] [--no-step]
                                      [--no-index] [--index-rounds 3] [--rerun-rounds 5]
                                      [--no-real] [--real-mirror DIR] [--real-rounds 2]
                                      [--real-ranges real,reqs] [--json]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import resource
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks.measure import Sample, profile_call, side_by_side
from toolchain.bisect.candidates import git_candidates
from toolchain.bisect.core import Bisector
from toolchain.bisect.session import DEFAULT_JOBS
from toolchain.bisect.testers import CommandTester
from toolchain.core.proc.runner import run

KERN = "benchkern"
ANSWER = 42

SETUP_PY = """\
from setuptools import Extension, setup
setup(name={name!r}, version="0.1", packages=[{name!r}],
      ext_modules=[Extension("{name}._ext", ["src/ext.c"])])
"""

KERN_C = """\
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define REVISION {revision}
static PyObject *value(PyObject *self, PyObject *args) {{ return PyLong_FromLong({answer}){broken} }}
static PyObject *revision(PyObject *self, PyObject *args) {{ return PyLong_FromLong(REVISION); }}
static PyMethodDef methods[] = {{{{"value", value, METH_NOARGS, ""}}, {{"revision", revision, METH_NOARGS, ""}},
                                {{NULL, NULL, 0, NULL}}}};
static struct PyModuleDef mod = {{PyModuleDef_HEAD_INIT, "_ext", NULL, -1, methods}};
PyMODINIT_FUNC PyInit__ext(void) {{ return PyModule_Create(&mod); }}
"""

HEAVY_C_HEAD = """\
#define PY_SSIZE_T_CLEAN
#include <Python.h>
"""
HEAVY_FN = "double f{i}(double x) {{ double s = 0; for (int k = 0; k < {i} % 7 + 3; k++) s += x * k / (k + {i}.0); " \
           "return s > 1e9 ? s : s * 1.0001; }}\n"
HEAVY_TAIL = """\
static PyObject *value(PyObject *self, PyObject *args) {{ return PyFloat_FromDouble(f0(1.0) + f{last}(1.0)); }}
static PyMethodDef methods[] = {{{{"value", value, METH_NOARGS, ""}}, {{NULL, NULL, 0, NULL}}}};
static struct PyModuleDef mod = {{PyModuleDef_HEAD_INIT, "_ext", NULL, -1, methods}};
PyMODINIT_FUNC PyInit__ext(void) {{ return PyModule_Create(&mod); }}
"""

TEST_PY = """\
import os, sys, tempfile, zipfile
wheels = [w for w in os.environ["TOOLCHAIN_BISECT_WHEELS"].split(os.pathsep) if w]
with tempfile.TemporaryDirectory() as d:
    for w in wheels:
        zipfile.ZipFile(w).extractall(d)
    sys.path.insert(0, d)
    import benchkern._ext as ext
    sys.exit(0 if ext.value() == {answer} else 1)
"""

# `git bisect run` baseline: every step exports and builds every component, then runs the same test.
BASELINE_STEP_PY = """\
import os, subprocess, sys, tarfile, tempfile, json
others, test = json.loads(sys.argv[1]), sys.argv[2]
with tempfile.TemporaryDirectory() as tmp:
    srcs = []
    for i, (repo, commit) in enumerate([[os.getcwd(), "HEAD"]] + others):
        archive, src = os.path.join(tmp, f"{{i}}.tar"), os.path.join(tmp, f"src{{i}}")
        subprocess.run(["git", "-C", repo, "archive", "--format=tar", "-o", archive, commit], check=True)
        tarfile.open(archive).extractall(src)
        srcs.append(src)
    wheels = os.path.join(tmp, "wheels")
    for src in srcs:
        done = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-build-isolation", "--no-deps",
                               src, "-w", wheels], capture_output=True)
        if done.returncode != 0:
            sys.exit(125)
    env = dict(os.environ, TOOLCHAIN_BISECT_WHEELS=os.pathsep.join(
        os.path.join(wheels, w) for w in sorted(os.listdir(wheels))))
    sys.exit(subprocess.run([sys.executable, test], env=env).returncode)
"""


@dataclass(frozen=True)
class BenchRepo:
    path: Path
    good: str
    bad: str
    first_bad: str
    unbuildable: tuple[str, ...]
    first_parent: int   # commits in good..bad on the first-parent line


@dataclass(frozen=True)
class Stack:
    kern: BenchRepo
    others: tuple[tuple[str, Path, str], ...]   # (name, repo, pinned commit)
    test_script: Path


class _Git:
    def __init__(self, path: Path) -> None:
        self.path, self.tick = path, 0
        path.mkdir(parents=True, exist_ok=True)
        self("init", "-q", "-b", "main")

    def __call__(self, *args: str) -> str:
        date = f"{1700000000 + self.tick * 60} +0000"
        env = {**os.environ, "GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "bench@example.org",
               "GIT_COMMITTER_NAME": "bench", "GIT_COMMITTER_EMAIL": "bench@example.org",
               "GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date, "GIT_CONFIG_GLOBAL": os.devnull,
               "GIT_CONFIG_NOSYSTEM": "1"}
        return run(["git", "-C", str(self.path), *args], env=env, capture=True).stdout.strip()

    def commit(self, subject: str, files: dict[str, str]) -> str:
        self.tick += 1
        for name, text in files.items():
            (self.path / name).parent.mkdir(parents=True, exist_ok=True)
            (self.path / name).write_text(text)
        self("add", "-A")
        self("commit", "-q", "-m", subject)
        return self("rev-parse", "HEAD")


def make_kernel_repo(path: Path, *, commits: int = 240, first_bad: int | None = None,
                     unbuildable: tuple[int, ...] | None = None, merge_every: int = 25) -> BenchRepo:
    """`commits` first-parent commits after the good one; every `merge_every`-th is a merge of a two-commit
    side branch. Commit `first_bad` (an index on the first-parent line) makes value() wrong; the
    `unbuildable` ones have a syntax error in the C file (the next commit fixes it)."""
    first_bad = first_bad if first_bad is not None else commits * 7 // 10
    if unbuildable is None:
        wanted = (commits // 4, commits // 4 + 1, commits * 5 // 8, commits - 2)  # 5/8: on the search path
        unbuildable = tuple(sorted({i for i in wanted if 0 < i < commits and abs(i - first_bad) > 1}))
    if not 0 < first_bad <= commits or {first_bad - 1, first_bad} & set(unbuildable):
        raise ValueError("the first bad commit and the one before it must build (else no bisect can name it), "
                         "and it must lie inside the range")
    g = _Git(path)

    def files(i: int) -> dict[str, str]:
        broken = ";" if i not in unbuildable else ""   # a missing ';': error: expected ';' before '}'
        return {"setup.py": SETUP_PY.format(name=KERN), f"{KERN}/__init__.py": "",
                "src/ext.c": KERN_C.format(revision=i, answer=ANSWER - 1 if i >= first_bad else ANSWER,
                                           broken=broken)}

    shas = [g.commit("initial import", files(0))]
    bad_shas = []
    for i in range(1, commits + 1):
        if i % merge_every == 0 and i != first_bad and i not in unbuildable:
            g("checkout", "-q", "-b", f"side{i}")
            g.commit(f"side {i}: notes", {f"docs/side{i}.txt": "a\n"})
            g.commit(f"side {i}: more notes", {f"docs/side{i}.txt": "b\n"})
            g("checkout", "-q", "main")
            g.tick += 1
            g("merge", "-q", "--no-ff", "--no-commit", f"side{i}")
            for name, text in files(i).items():
                (path / name).write_text(text)
            g("add", "-A")
            g("commit", "-q", "-m", f"Merge side {i}")
            shas.append(g("rev-parse", "HEAD"))
        else:
            shas.append(g.commit(f"kernel change {i}", files(i)))
        if i in unbuildable:
            bad_shas.append(shas[-1])
    return BenchRepo(path, shas[0], shas[-1], shas[first_bad], tuple(bad_shas), commits)


def make_stack(work: Path, *, commits: int = 240, heavy_functions: int = 6000) -> Stack:
    kern = make_kernel_repo(work / "repos" / KERN, commits=commits)
    heavy = _Git(work / "repos" / "benchheavy")
    body = HEAVY_C_HEAD + "".join(HEAVY_FN.format(i=i) for i in range(heavy_functions)) + \
        HEAVY_TAIL.format(last=heavy_functions - 1)
    h = heavy.commit("heavy", {"setup.py": SETUP_PY.format(name="benchheavy"), "benchheavy/__init__.py": "",
                               "src/ext.c": body})
    py = _Git(work / "repos" / "benchpy")
    p = py.commit("pure python", {"setup.py": "from setuptools import setup\nsetup(name='benchpy', version='0.1', "
                                              "packages=['benchpy'])\n", "benchpy/__init__.py": "X = 1\n"})
    test = work / "test_step.py"
    test.write_text(TEST_PY.format(answer=ANSWER))
    return Stack(kern, (("benchheavy", heavy.path, h), ("benchpy", py.path, p)), test)


# ---- builders ------------------------------------------------------------------------------------------

def spine_builder(stack: Stack, work: Path, *, extra: str = "", cache: Path | None = None,
                  name: str = KERN) -> Any:
    """The bisect builder through the build spine (as `toolchain bisect` makes it): a recipe for the generated stack (no toolchain, host
    target, this interpreter), `benchkern` pinned per step, the other components from the wheel cache.
    `extra`: more recipe text (a [cache] table); `cache`: the wheel cache (default <work>/cache)."""
    from toolchain.bisect.builder import SpineBuilder
    from toolchain.console import UI
    from toolchain.recipe import load as recipes

    lines = ['description = "bisect benchmark"', "[toolchain]", 'setvars = ""', "[target]", 'runtime = "host"',
             f"python = {json.dumps(sys.executable)}"]
    deps: list[str] = []
    for comp, repo, commit in (*stack.others, (name, stack.kern.path, stack.kern.bad)):
        lines += [f"[components.{comp}]", f"url = {json.dumps(repo.resolve().as_uri())}", f'commit = "{commit}"',
                  f"after = {json.dumps(deps)}"]
        deps = [comp]
    path = work / "recipes" / "bench.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n" + extra)
    base = recipes.load_recipe(str(path))
    return SpineBuilder(lambda sha: base.with_commit(name, sha), work / "steps", cache or work / "cache", (),
                        UI(quiet=True), component=name)


# ---- measuring -----------------------------------------------------------------------------------------

def tool_bisect(stack: Stack, builder: Any, work: Path, jobs: int) -> tuple[Any, float]:
    cands = git_candidates(stack.kern.path, stack.kern.good, stack.kern.bad)
    tester = CommandTester([sys.executable, str(stack.test_script)], work / "test-logs")
    started = time.monotonic()
    result = Bisector(cands, builder, tester, jobs=jobs).run()
    return result, time.monotonic() - started


def git_bisect_run(stack: Stack, work: Path) -> tuple[str, int, float]:
    """`git bisect run` in a fresh clone with a step script that rebuilds every component."""
    clone = work / "baseline"
    shutil.rmtree(clone, ignore_errors=True)
    run(["git", "clone", "-q", str(stack.kern.path), str(clone)], capture=True)
    step = work / "baseline_step.py"
    step.write_text(BASELINE_STEP_PY.format())
    others = json.dumps([[str(repo), commit] for _, repo, commit in stack.others])
    git = ["git", "-C", str(clone), "-c", "user.name=bench", "-c", "user.email=bench@example.org"]
    started = time.monotonic()
    run([*git, "bisect", "start", "--first-parent", stack.kern.bad, stack.kern.good], capture=True)
    done = run([*git, "bisect", "run", sys.executable, str(step), others, str(stack.test_script)], capture=True,
               check=False)
    seconds = time.monotonic() - started
    found = re.search(r"^([0-9a-f]{40}) is the first bad commit", done.stdout, re.M)
    return found.group(1) if found else "", done.stdout.count("running "), seconds


def run_benchmark(work: Path, *, commits: int = 240, jobs: int = 3,
                  heavy_functions: int = 6000, baseline: bool = True) -> dict[str, Any]:
    stack = make_stack(work, commits=commits, heavy_functions=heavy_functions)
    n = stack.kern.first_parent
    first, t_tool = tool_bisect(stack, spine_builder(stack, work), work, jobs)
    again, t_again = tool_bisect(stack, spine_builder(stack, work), work, jobs)
    skips = len(first.skipped)
    bound = math.ceil(math.log2(n + 1)) + 1 + skips
    figures: dict[str, Any] = {
        "commits": n, "jobs": jobs,
        "first_bad_expected": stack.kern.first_bad, "first_bad_found": first.first_bad.key if first.first_bad else None,
        "steps": len(first.steps), "skips": skips, "builds_needed": first.builds_needed, "builds_bound": bound,
        "builds_speculative": first.builds_speculative, "builds_compiled": first.builds_compiled,
        "repeat_builds_compiled": again.builds_compiled, "tool_seconds": round(t_tool, 2),
        "repeat_seconds": round(t_again, 2),
    }
    checks = {"found": figures["first_bad_found"] == stack.kern.first_bad,
              "builds_within_bound": first.builds_needed <= bound,
              "repeat_compiles_nothing": again.builds_compiled == 0}
    if baseline:
        git_first_bad, git_steps, t_git = git_bisect_run(stack, work)
        figures.update(git_first_bad=git_first_bad, git_steps=git_steps, git_seconds=round(t_git, 2),
                       time_ratio=round(t_tool / t_git, 3))
        checks["git_agrees"] = git_first_bad == stack.kern.first_bad
        checks["time_ratio_within_third"] = t_tool <= t_git / 3
    return {"ok": all(checks.values()), "figures": figures, "checks": checks,
            "repo": {k: str(v) if isinstance(v, Path) else v for k, v in asdict(stack.kern).items()}}


# ---- the tool's own cost per step, on a fast pure-Python component -------------------------------------

PY = "benchpy"
PY_PYPROJECT = """\
[build-system]
requires = ["setuptools"]
build-backend = "setuptools.build_meta"
"""
PY_SETUP = """\
from setuptools import setup
setup(name="benchpy", version="0.1", packages=["benchpy"], install_requires={requires!r})
"""
PY_TEST = """\
import os, sys, tempfile, zipfile
wheels = [w for w in os.environ["TOOLCHAIN_BISECT_WHEELS"].split(os.pathsep) if w]
with tempfile.TemporaryDirectory() as d:
    for w in wheels:
        zipfile.ZipFile(w).extractall(d)
    sys.path.insert(0, d)
    import benchpy
    sys.exit(0 if benchpy.VALUE == {answer} else 1)
"""


def make_py_stack(work: Path, *, commits: int = 60, modules: int = 40, requires: tuple[str, ...] = ()) -> Stack:
    """`benchpy`: a pure-Python package of `modules` modules, `commits` linear commits after the good one;
    the one at 7/10 makes VALUE wrong. `requires`: its runtime requirements (the same at every commit)."""
    first_bad = commits * 7 // 10
    g = _Git(work / "repos" / PY)
    body = {f"{PY}/m{j}.py": "".join(f"def f{k}(x):\n    return x * {k} + {j}\n" for k in range(30))
            for j in range(modules)}

    def files(i: int) -> dict[str, str]:
        value = ANSWER - 1 if i >= first_bad else ANSWER
        return {"pyproject.toml": PY_PYPROJECT, "setup.py": PY_SETUP.format(requires=list(requires)),
                f"{PY}/__init__.py": f"VALUE = {value}\nREVISION = {i}\n", **(body if i == 0 else {})}

    shas = [g.commit("initial import", files(0))]
    shas += [g.commit(f"change {i}", files(i)) for i in range(1, commits + 1)]
    test = work / "test_py.py"
    test.write_text(PY_TEST.format(answer=ANSWER))
    return Stack(BenchRepo(g.path, shas[0], shas[-1], shas[first_bad], (), commits), (), test)


def _cpu(who: int | None = None) -> float:
    """CPU seconds of this process and its children (or of `who` alone)."""
    total = 0.0
    for w in ((who,) if who is not None else (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)):
        r = resource.getrusage(w)
        total += r.ru_utime + r.ru_stime
    return total


class BuildCommandClock:
    """Times the build command the tool runs on the host (the in-target runner around it: `pip wheel`'s one
    backend call, build/frontend.py), so that a step's own overhead is measured inside the same step: the
    step's time less its build command's (wall, and CPU of the child)."""

    def __init__(self) -> None:
        self.times: list[tuple[float, float]] = []

    def __enter__(self) -> BuildCommandClock:
        from toolchain.target import host

        self._host, self._real = host, run  # what host calls (core.proc.runner's)

        from toolchain.build.metrics import RUNNER_FILE

        def timing_run(argv: Sequence[str], **kw: Any) -> Any:
            if [str(a) for a in argv[1:3]] != [str(RUNNER_FILE), "build"]:
                return self._real(argv, **kw)
            wall, cpu = time.perf_counter(), _cpu(resource.RUSAGE_CHILDREN)
            try:
                return self._real(argv, **kw)
            finally:
                self.times.append((time.perf_counter() - wall, _cpu(resource.RUSAGE_CHILDREN) - cpu))

        setattr(host, "run", timing_run)  # noqa: B010 (host imports run: not its export)
        return self

    def __exit__(self, *exc: object) -> None:
        setattr(self._host, "run", self._real)  # noqa: B010


class SubprocessClock:
    """Each subprocess the tool runs (core/proc/runner.py's one way, `_popen`) with its wall time, in order: where a
    step's time goes outside this process."""

    def __init__(self) -> None:
        self.times: list[tuple[str, float]] = []

    def __enter__(self) -> SubprocessClock:
        from toolchain.core.proc import runner as proc

        self._proc, self._real = proc, proc._popen

        def timed(argv: list[str], *args: Any, **kw: Any) -> Any:
            started = time.perf_counter()
            try:
                return self._real(argv, *args, **kw)
            finally:
                self.times.append((" ".join(Path(a).name if "/" in a else a for a in argv[:4]),
                                   time.perf_counter() - started))

        setattr(proc, "_popen", timed)  # noqa: B010 (run looks it up at each call)
        return self

    def __exit__(self, *exc: object) -> None:
        setattr(self._proc, "_popen", self._real)  # noqa: B010

    def lines(self, total: float) -> list[str]:
        """One line per subprocess, then the rest (the tool's own Python) of `total` seconds."""
        spent = sum(t for _, t in self.times)
        return [f"{t:7.3f} s  {argv}" for argv, t in self.times] + \
            [f"{total - spent:7.3f} s  in the tool's own process (of {total:.3f} s)"]


def _timed(fn: Any) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), _cpu()
    fn()
    return time.perf_counter() - wall, _cpu() - cpu


def raw_wheel(repo: Path, sha: str, work: Path) -> None:
    """What a `git bisect run` step does before its test: export the commit, `pip wheel` it."""
    src, out = work / f"raw-{sha[:12]}", work / f"raw-{sha[:12]}-wheels"
    shutil.rmtree(src, ignore_errors=True)
    src.mkdir(parents=True)
    archive = src.with_suffix(".tar")
    run(["git", "-C", str(repo), "archive", "--format=tar", "-o", str(archive), sha], capture=True)
    run(["tar", "-xf", str(archive), "-C", str(src)], capture=True)
    run([sys.executable, "-m", "pip", "wheel", "-q", "--no-build-isolation", "--no-deps", str(src), "-w", str(out)],
        capture=True)
    shutil.rmtree(src)
    shutil.rmtree(out)
    archive.unlink()


def run_step_benchmark(work: Path, *, commits: int = 60, rounds: int = 5, baseline: bool = True) -> dict[str, Any]:
    stack = make_py_stack(work, commits=commits)
    repo = stack.kern.path
    shas = run(["git", "-C", str(repo), "rev-list", "--reverse", stack.kern.bad], capture=True).stdout.split()
    builder = spine_builder(stack, work / "steps", name=PY)
    assert builder.build(shas[0]).ok  # the mirror fetched, the target probed: what every later step finds
    picks = iter(shas[1:])
    with BuildCommandClock() as clock:
        samples = side_by_side({"tool": lambda: _timed(lambda: builder.build(next(picks))),
                                "raw": lambda: _timed(lambda: raw_wheel(repo, shas[-1], work))}, rounds)
    tool, raw = samples["tool"], samples["raw"]
    if len(clock.times) != rounds:
        raise RuntimeError(f"expected {rounds} timed build commands, saw {len(clock.times)}")
    overhead = Sample([t - b[0] for t, b in zip(tool.wall, clock.times, strict=False)],
                      [t - b[1] for t, b in zip(tool.cpu, clock.times, strict=False)])
    outcome, profile = profile_call(lambda: builder.build(next(picks)))
    figures: dict[str, Any] = {"step_tool": tool.as_dict(), "step_raw_pip_wheel": raw.as_dict(),
                               "step_tool_over_raw": round(tool.median / raw.median, 3),
                               "step_overhead": overhead.as_dict(), "step_profile": profile}
    checks = {"step_builds": bool(getattr(outcome, "ok", False)), "step_overhead_within_0.3s": overhead.median <= 0.3}
    if baseline:
        # cold bisects (each in a cache of its own) with the tool's default jobs and with jobs=1 (no building
        # ahead: the tool's own overhead alone), interleaved with `git bisect run`
        cands = git_candidates(repo, stack.kern.good, stack.kern.bad)
        found, t_tool, steps, t_git = {}, {}, {}, []
        git_first_bad = ""
        for jobs in (DEFAULT_JOBS, 1):
            cold = work / f"cold-jobs{jobs}"
            tester = CommandTester([sys.executable, str(stack.test_script)], cold / "test-logs")
            started = time.monotonic()
            result = Bisector(cands, spine_builder(stack, cold, name=PY), tester, jobs=jobs).run()
            t_tool[jobs] = time.monotonic() - started
            steps[jobs] = len(result.steps)
            found[jobs] = result.first_bad is not None and result.first_bad.key == stack.kern.first_bad
            git_first_bad, git_steps, seconds = git_bisect_run(stack, work)
            t_git.append(seconds)
        g = statistics.median(t_git)
        figures.update(py_commits=commits, py_steps=steps[1], py_git_steps=git_steps,
                       py_git_seconds=[round(t, 2) for t in t_git],
                       py_tool_seconds=round(t_tool[DEFAULT_JOBS], 2), py_time_ratio=round(t_tool[DEFAULT_JOBS] / g, 3),
                       py_tool_seconds_jobs1=round(t_tool[1], 2), py_time_ratio_jobs1=round(t_tool[1] / g, 3))
        checks.update(py_found=all(found.values()), py_git_agrees=git_first_bad == stack.kern.first_bad,
                      py_no_slower_than_git=t_tool[DEFAULT_JOBS] <= g)
    return {"ok": all(checks.values()), "figures": figures, "checks": checks}


def print_report(report: dict[str, Any]) -> None:
    for k, v in report["figures"].items():
        if isinstance(v, list):
            print(f"{k:>22}:")
            for line in v:
                print(f"{'':>24}{line}")
        else:
            print(f"{k:>22}: {v}")
    for k, v in report["checks"].items():
        print(f"{k:>22}: {'ok' if v else 'FAILED'}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.bench_bisect", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", type=Path, help="working directory (default: a temporary one, removed)")
    ap.add_argument("--commits", type=int, default=240)
    ap.add_argument("--jobs", type=int, default=3)
    ap.add_argument("--heavy-functions", type=int, default=6000, help="size of the slow-to-compile component")
    ap.add_argument("--no-baseline", action="store_true", help="skip the `git bisect run` comparisons")
    ap.add_argument("--py-commits", type=int, default=60, help="commits of the pure-Python component")
    ap.add_argument("--step-rounds", type=int, default=5, help="steps measured beside a raw pip wheel")
    ap.add_argument("--no-kernel", action="store_true", help="skip the C-extension stack bisect (1-3)")
    ap.add_argument("--no-step", action="store_true", help="skip the pure-Python step figures (4-6)")
    ap.add_argument("--no-index", action="store_true", help="skip the bisects of closures from an index (7-8)")
    ap.add_argument("--index-rounds", type=int, default=3, help="cold bisects from an index beside git (7)")
    ap.add_argument("--rerun-rounds", type=int, default=5, help="cached demo bisect reruns each (8)")
    ap.add_argument("--real-mirror", type=Path, default=Path("/work/.mirror/intel+auto-round/repo"),
                    help="bare mirror of intel/auto-round for the real-history bisects (9, 10); absent: skipped")
    ap.add_argument("--real-rounds", type=int, default=2, help="real-history bisects beside git bisect run (9, 10)")
    ap.add_argument("--real-ranges", default="real,reqs",
                    help="which real ranges (9: real, 10: reqs), comma-separated")
    ap.add_argument("--no-real", action="store_true", help="skip the real-history bisects (9, 10)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    reports = []
    with tempfile.TemporaryDirectory(prefix="bench-bisect-") as tmp:
        work = args.work or Path(tmp)
        if not args.no_kernel:
            reports.append(run_benchmark(work / "kernel", commits=args.commits, jobs=args.jobs,
                                         heavy_functions=args.heavy_functions, baseline=not args.no_baseline))
            if not args.json:
                print_report(reports[-1])
        if not args.no_step:
            reports.append(run_step_benchmark(work / "step", commits=args.py_commits, rounds=args.step_rounds,
                                              baseline=not args.no_baseline))
            if not args.json:
                print_report(reports[-1])
        if not args.no_index:
            from benchmarks.bench_bisect_index import run_index_benchmark, run_rerun_benchmark

            reports.append(run_index_benchmark(work / "index", commits=args.py_commits, rounds=args.index_rounds,
                                               baseline=not args.no_baseline))
            if not args.json:
                print_report(reports[-1])
            reports.append(run_rerun_benchmark(work / "rerun", rounds=args.rerun_rounds))
            if not args.json:
                print_report(reports[-1])
        if not args.no_real:
            from benchmarks.bench_bisect_real import RANGES, run_real_benchmark

            ranges = tuple(r for r in RANGES if r.name in args.real_ranges.split(","))
            reports.append(run_real_benchmark(work / "real", mirror=args.real_mirror, rounds=args.real_rounds,
                                              step_rounds=0 if args.no_step else args.step_rounds,
                                              baseline=not args.no_baseline, ranges=ranges))
            if not args.json:
                print_report(reports[-1])
    report = {"ok": all(r["ok"] for r in reports), "figures": {k: v for r in reports for k, v in r["figures"].items()},
              "checks": {k: v for r in reports for k, v in r["checks"].items()}}
    if args.json:
        print(json.dumps(report, indent=2))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
