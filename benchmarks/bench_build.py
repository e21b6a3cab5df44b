"""Build benchmarks, measured side by side in one run (`nox -s bench`). Prints figures, ratios and profiles.

1. cold `toolchain build --recipe demo` (empty cache; the demo repositories already exist, as a network
   remote would) against raw `pip wheel --no-build-isolation` of the same patched sources in the same
   toolchain environment.                                        goal: <= 1.05x
   The tool compiles independent components side by side where the target's cores and memory allow
   (build/schedule.py); the same build with `--builds-at-once 1` shows its fixed costs on a serial build.
   The same on a compiled component (benchmarks/synthetic.py, 40 C++ units), where the compiler's work
   dominates as it does in the kernels: the tool's fixed costs (interpreter, probes, setvars, lock,
   closure resolution) next to a compile; and apart from them, what an empty compiler cache adds (misses).
2. a warm no-op rerun of the same build (a full run: every check made, nothing replayed) against a bare
   interpreter start (`python -c pass`), N runs each, interleaved; medians and ranges of wall and CPU time.
                                                                 goal: <= 0.2 s and <= 3x the bare start
   Interpreters run as an installed tool does, with byte code (under a temporary PYTHONPYCACHEPREFIX).
3. where a warm no-op spends its time: the costliest imports (`-X importtime`) and a cProfile's top lines.
4. checking a pinned commit out of the mirror against a fresh `git clone` + checkout, on a generated
   repository of 2,000 files and 300 commits: a first checkout from the mirror (no prepared tree yet), and
   the prepared tree a build gets when the same commit is built again (after what an in-tree build leaves
   behind: build/, *.egg-info, byte code, a second later), first and later reuses. Two things run beside
   the rest of a build, not timed here: the check a new tree needs once (one `git status` that re-reads
   every file checked out in the index's second, about 25 ms of one core for 2,000 files), made when the
   build that prepared it ends; and deleting what the last build left, moved out of the tree at reuse.
                                                                        goal: >= 2x, and >= 10x on reuse
   The same again on a repository shaped like the real ones by its history (2,000 files, 20,000 commits,
   made with `git fast-import`): vLLM has tens of thousands of commits, and there a fresh clone pays for
   the history while a checkout from the mirror borrows it (`--shared`).

5. the warm no-op of other cases, side by side with the demo's and a bare start (`--component C`, repeatable:
   a partial build of the demo; `--realstack`: the test suite's realstack recipe, three components from local
   repositories).                                                goal: <= 3x the bare start

    python -m benchmarks.bench_build [--rounds 3] [--runs 10] [--skip-cold] [--skip-compiled] [--skip-checkout]
                                     [--skip-resolve] [--component C ...] [--realstack]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.measure import (
    importtime_top,
    installed_like_env,
    profile_command,
    ratio,
    run_timed,
    side_by_side,
    timed,
)
from toolchain.recipe.load import load_recipe
from toolchain.sources.demo import materialize
from toolchain.sources.mirrors import Mirrors, Rewrite
from toolchain.sources.trees import SourceTrees

ROOT = Path(__file__).resolve().parent.parent


def sh(argv: Sequence[str], **kw: Any) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **kw)


def build_argv(cache: Path, out: Path, *extra: str, recipe: str = "demo") -> list[str]:
    return ["-m", "toolchain", "build", "--recipe", recipe, "--cache-dir", str(cache), "--out", str(out), "--json",
            *extra]


def resolve_only(cache: Path, out: Path, *, refresh: bool = False) -> None:
    """The resolution step of a build, in process: the demo's built wheels → the checked closure (`refresh`:
    resolved again, not the kept one)."""
    from toolchain.console import UI
    from toolchain.lock import read_lock
    from toolchain.resolve.run import resolve_built

    lock = read_lock(out / "stack.lock.toml")
    resolve_built(load_recipe("demo", ROOT / "recipes"), lock.target,
                  [(c.name, lock.wheel_path(c), c.built_against) for c in lock.components], cache, out / "logs",
                  UI(quiet=True), refresh=refresh)


def toolchain_build(cache: Path, out: Path, env: dict[str, str], *extra: str,
                    recipe: str = "demo") -> tuple[float, float]:
    return run_timed([sys.executable, *build_argv(cache, out, *extra, recipe=recipe)], cwd=ROOT, env=env)


def check_out_by_hand(repo: Path, commit: str, dest: Path) -> None:
    """What a hand-written script does to get a commit's sources: clone, then check the commit out."""
    sh(["git", "clone", "-q", "--no-checkout", str(repo), str(dest)])
    sh(["git", "-C", str(dest), "checkout", "-q", commit])


def raw_pip_wheel(work: Path, demo_repos: Path, base_env: dict[str, str]) -> None:
    """What a hand-written script does: check out, patch, source setvars, pip wheel each component."""
    recipe = load_recipe("demo", ROOT / "recipes")
    setvars = ROOT / "toolchain/demo_src/oneapi-standin/setvars.sh"
    out = work / "wheels"
    for comp in recipe.components:
        repo = demo_repos / comp.url.rsplit("/", 1)[1]
        src = work / comp.name
        check_out_by_hand(repo, comp.commit, src)
        for p in comp.patches:
            sh(["git", "-C", str(src), "apply", str(p.file)])
        env = dict(base_env, **dict(recipe.env), **dict(comp.env))
        for dep in comp.fetchcontent:
            dsrc = work / dep.name
            check_out_by_hand(demo_repos / dep.url.rsplit("/", 1)[1], dep.commit, dsrc)
            env["CMAKE_ARGS"] = f"-D{dep.cmake_var}={dsrc}"
        path = src / comp.subdir if comp.subdir else src
        sh(["bash", "-c", 'source "$1" --force >/dev/null; shift; exec "$@"', "raw", str(setvars),
            sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", str(path), "-w", str(out)],
           env=env)


def make_big_repo(path: Path, files: int = 2000, commits: int = 300) -> str:
    rnd = random.Random(7)
    work = path.with_name(path.name + ".work")
    sh(["git", "init", "-q", "-b", "main", str(work)])
    env = dict(os.environ, GIT_AUTHOR_NAME="b", GIT_AUTHOR_EMAIL="b@x", GIT_COMMITTER_NAME="b",
               GIT_COMMITTER_EMAIL="b@x")
    for i in range(files):
        f = work / f"pkg{i % 40}" / f"mod{i}.py"
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text("".join(f"v{j} = {rnd.random()!r}\n" for j in range(40)))
    sh(["git", "-C", str(work), "add", "-A"])
    sh(["git", "-C", str(work), "commit", "-q", "-m", "import"], env=env)
    for c in range(commits - 1):
        for _ in range(5):
            f = work / f"pkg{rnd.randrange(40)}"
            target = sorted(f.iterdir())[rnd.randrange(50)]
            with open(target, "a") as fh:
                fh.write(f"c{c} = {c}\n")
        sh(["git", "-C", str(work), "commit", "-q", "-am", f"change {c}"], env=env)
    sh(["git", "clone", "-q", "--bare", "--no-local", str(work), str(path)])  # packed, like a real remote
    shutil.rmtree(work)
    return subprocess.run(["git", "--git-dir", str(path), "rev-parse", "main~5"], capture_output=True,
                          text=True, check=True).stdout.strip()


def make_history_repo(path: Path, files: int = 2000, commits: int = 20000) -> str:
    """A bare repository with a long history, written by one `git fast-import` (seconds, not minutes): the
    first commit adds `files` files, each later one rewrites one file. Returns the commit 5 before the tip."""
    rnd = random.Random(11)
    sh(["git", "init", "-q", "--bare", str(path)])
    chunks: list[bytes] = []

    def blob(text: str) -> None:
        data = text.encode()
        chunks.append(b"data %d\n" % len(data) + data + b"\n")

    contents = ["".join(f"v{j} = {rnd.random()!r}\n" for j in range(40)) for _ in range(files)]
    for c in range(commits):
        msg = f"change {c}"
        chunks.append(b"commit refs/heads/main\ncommitter b <b@x> %d +0000\n" % (1_600_000_000 + c))
        blob(msg)  # a later commit to the same branch has the branch's tip as its parent
        changed = range(files) if c == 0 else [rnd.randrange(files)]
        for i in changed:
            if c:
                contents[i] += f"c{c} = {c}\n"
            chunks.append(f"M 100644 inline pkg{i % 40}/mod{i}.py\n".encode())
            blob(contents[i])
    subprocess.run(["git", "--git-dir", str(path), "fast-import", "--quiet"], input=b"".join(chunks), check=True)
    sh(["git", "--git-dir", str(path), "repack", "-adq"])  # packed, like a real remote
    return subprocess.run(["git", "--git-dir", str(path), "rev-parse", "main~5"], capture_output=True,
                          text=True, check=True).stdout.strip()


def cold_and_raw(base: Path, demo_repos: Path, env: dict[str, str], rounds: int) -> tuple[Path, Path]:
    cold, serial, raw = [], [], []
    for r in range(rounds):  # interleaved so drift hits every side alike
        cache, out = base / f"cache{r}", base / f"out{r}"
        shutil.copytree(base / "demo-cache" / "demo-repos", cache / "demo-repos")
        cold.append(toolchain_build(cache, out, env)[0])
        cache1, out1 = base / f"serial-cache{r}", base / f"serial-out{r}"
        shutil.copytree(base / "demo-cache" / "demo-repos", cache1 / "demo-repos")
        serial.append(toolchain_build(cache1, out1, env, "--builds-at-once", "1")[0])
        raw.append(timed(lambda: raw_pip_wheel(base / f"raw{r}", demo_repos, env)))
    c, s1, rw = statistics.median(cold), statistics.median(serial), statistics.median(raw)
    print(f"cold demo build against raw pip wheel (one after another, as a script does), median of {rounds}:")
    print(f"  raw pip wheel (by hand)             {rw:7.2f} s  ({min(raw):.2f}-{max(raw):.2f})")
    print(f"  cold toolchain build                {c:7.2f} s  ({min(cold):.2f}-{max(cold):.2f})   "
          f"{ratio(c, rw)}   (goal <= 1.05x; compiles side by side where cores and memory allow)")
    print(f"  cold toolchain build, one at once   {s1:7.2f} s  ({min(serial):.2f}-{max(serial):.2f})   "
          f"{ratio(s1, rw)}   (--builds-at-once 1: the tool's fixed costs on a serial build)")
    return base / "cache0", base / "out0"


def cold_compiled(base: Path, env: dict[str, str], rounds: int, tus: int = 40) -> None:
    """A cold build of a compiled component (the synthetic C++ extension: the compiler's work dominates, as in
    the kernels) against raw `pip wheel` of the same checkout: the tool's fixed costs next to a compile. Once
    with the compiler cache (empty: every unit a miss, which ccache pays for with a preprocessor pass where
    the build writes no dependency file, as setuptools does), once without, to tell the two apart."""
    from benchmarks.synthetic import make_synthetic, recipe_text

    synth = make_synthetic(base / "synthetic", tus=tus)
    commit = synth.commits[0]
    recipe = base / "synth-recipes" / "synthetic.toml"
    recipe.parent.mkdir(parents=True)
    recipe.write_text(recipe_text(synth, commit))
    times: dict[str, list[float]] = {"cached": [], "uncached": [], "raw": []}
    for r in range(rounds):
        for side, extra in (("cached", ()), ("uncached", ("--no-compiler-cache",))):
            cache, out = base / f"synth-{side}-cache{r}", base / f"synth-{side}-out{r}"  # empty caches each round
            times[side].append(toolchain_build(cache, out, env, *extra, recipe=str(recipe))[0])

        def by_hand(r: int = r) -> None:
            src = base / f"synth-raw{r}"
            check_out_by_hand(synth.path, commit, src)
            sh([sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", str(src), "-w",
                str(src / "dist")], env=env)
        times["raw"].append(timed(by_hand))
    m = {k: statistics.median(v) for k, v in times.items()}
    span = {k: f"({min(v):.2f}-{max(v):.2f})" for k, v in times.items()}
    print(f"cold build of a compiled component ({tus} C++ units) against raw pip wheel, median of {rounds}:")
    print(f"  raw pip wheel (by hand)                 {m['raw']:7.2f} s  {span['raw']}")
    print(f"  toolchain build --no-compiler-cache     {m['uncached']:7.2f} s  {span['uncached']}   "
          f"{ratio(m['uncached'], m['raw'])}   (goal <= 1.05x)")
    print(f"  toolchain build, compiler cache empty   {m['cached']:7.2f} s  {span['cached']}   "
          f"{ratio(m['cached'], m['raw'])}   (every unit a ccache miss: what the next build's hits cost)")


def warm_up(cache: Path, out: Path, env: dict[str, str], *extra: str, recipe: str = "demo") -> None:
    """After a build: byte code written, memo files in place, the logs rewritten as cache hits, the out
    wheels' digests remembered: what every later warm build sees."""
    for _ in range(2):
        toolchain_build(cache, out, env, *extra, recipe=recipe)


def warm_and_bare(cache: Path, out: Path, env: dict[str, str], runs: int) -> None:
    warm_up(cache, out, env)
    samples = side_by_side({
        "warm": lambda: toolchain_build(cache, out, env),
        "bare": lambda: run_timed([sys.executable, "-c", "pass"], env=env),
    }, runs)
    warm, bare = samples["warm"], samples["bare"]
    print(f"warm no-op against a bare interpreter start, {runs} runs each, interleaved: median (range)")
    print(f"  warm no-op build (a full run)                {warm.describe()}   (goal <= 0.2 s)")
    print(f"  python -c pass                               {bare.describe()}")
    print(f"  ratio warm/bare           wall {ratio(warm.median, bare.median)}   cpu "
          f"{ratio(warm.cpu_median, bare.cpu_median)}   (goal <= 3x)")
    print("where a warm no-op spends its time:")
    for line in importtime_top(build_argv(cache, out), cwd=ROOT, env=env, n=10):
        print("  " + line)
    for line in profile_command(build_argv(cache, out), cwd=ROOT, env=env, n=10):
        print("  " + line)


def warm_cases(base: Path, cache: Path, out: Path, env: dict[str, str], runs: int, components: Sequence[str],
               realstack: bool) -> None:
    """The warm no-op of other cases than the one the goal was tuned on, side by side with the demo's full one
    and a bare start: `--component C` of the demo (a partial build into its own --out), and the realstack
    (tests/support/realstack.py: three components from local git repositories, FetchContent pins, a
    subdirectory package, patches, a recipe of the user's own outside the shipped ones; built cold once here)."""
    cases: dict[str, Any] = {"demo, full": lambda: toolchain_build(cache, out, env)}
    for comp in components:
        where = base / f"out-{comp}"
        warm_up(cache, where, env, "--component", comp)
        cases[f"demo --component {comp}"] = lambda where=where, comp=comp: toolchain_build(
            cache, where, env, "--component", comp)
    if realstack:
        from tests.support.realstack import make_realstack

        recipe = str(make_realstack(base / "realstack").stack)
        rs_cache, rs_out = base / "realstack-cache", base / "realstack-out"
        toolchain_build(rs_cache, rs_out, env, recipe=recipe)  # (cold)
        warm_up(rs_cache, rs_out, env, recipe=recipe)
        cases["realstack"] = lambda: toolchain_build(rs_cache, rs_out, env, recipe=recipe)
    cases["bare"] = lambda: run_timed([sys.executable, "-c", "pass"], env=env)
    samples = side_by_side(cases, runs)
    bare = samples.pop("bare")
    print(f"warm no-op of other cases, {runs} runs each, interleaved: median (range); ratio to a bare start")
    for name, s in samples.items():
        print(f"  {name:<32} {s.describe()}   wall {ratio(s.median, bare.median)}   cpu "
              f"{ratio(s.cpu_median, bare.cpu_median)}   (goal <= 3x)")
    print(f"  {'python -c pass':<32} {bare.describe()}")


def resolution(base: Path, cache: Path, out: Path, env: dict[str, str], rounds: int) -> None:
    """Resolve once per change: a recipe whose closure comes from a PEP 503 index served on 127.0.0.1 (the
    demo's dependencies), built once with the index up; then, with the index stopped and every proxy dead
    (the network off), warm builds of it (a no-op in the same --out, and into a new --out, which takes the kept
    closure) side by side with the demo's warm no-op and --no-resolve and a bare interpreter start (ratios
    printed); and what resolving costs when it runs (the demo's closure, `refresh`: uv asked again, in
    process)."""
    from tests.support.closure import CountingIndex, dead_proxy_env, demo_variant, simple_index, wheelhouse

    simple_index(wheelhouse(base / "index-wheels"), base / "index")
    index = CountingIndex(base / "index")
    recipe = str(demo_variant(base / "recipes", "indexed", {"indexes": [f"{index.url}/simple"]}))
    patches = ("--patches-dir", str(ROOT / "patches"))
    try:
        toolchain_build(cache, base / "indexed-out", env, *patches, recipe=recipe)
    finally:
        index.stop()
    asked = index.count()
    offline = env | dead_proxy_env()
    no_resolve = base / "out-no-resolve"  # an out dir of its own: a lock without a closure in `out` would make
    toolchain_build(cache, no_resolve, env, "--no-resolve")  # the demo's next build write its lock again
    warm_up(cache, no_resolve, env, "--no-resolve")
    warm_up(cache, base / "indexed-out", offline, *patches, recipe=recipe)
    warm_up(cache, out, env)
    fresh = iter(range(10_000))
    samples = side_by_side({
        "demo": lambda: toolchain_build(cache, out, env),
        "demo-no-resolve": lambda: toolchain_build(cache, no_resolve, env, "--no-resolve"),
        "indexed": lambda: toolchain_build(cache, base / "indexed-out", offline, *patches, recipe=recipe),
        "indexed-new-out": lambda: toolchain_build(cache, base / f"indexed-out-{next(fresh)}", offline, *patches,
                                                   recipe=recipe),
        "resolve": lambda: timed(lambda: resolve_only(cache, out, refresh=True)),
        "bare": lambda: run_timed([sys.executable, "-c", "pass"], env=env),
    }, rounds)
    print(f"resolve once per change: warm builds, {rounds} runs each, interleaved (the index answered {asked} "
          f"requests for the first build, then was stopped: network off):")
    print(f"  demo warm no-op                              {samples['demo'].describe()}   (goal <= 0.2 s)")
    print(f"  demo warm no-op --no-resolve                 {samples['demo-no-resolve'].describe()}")
    print(f"  index recipe, warm no-op, network off        {samples['indexed'].describe()}   (goal <= 0.3 s)")
    print(f"  index recipe, new --out, network off         {samples['indexed-new-out'].describe()}   "
          f"(goal <= 0.3 s)")
    print(f"  resolving again (uv, demo closure, refresh)  {samples['resolve'].describe()}   "
          f"(what a kept closure saves)")
    print(f"  python -c pass                               {samples['bare'].describe()}")
    bare, demo = samples["bare"], samples["demo"]
    for name in ("indexed", "indexed-new-out"):
        print(f"  ratio {name + '/demo warm no-op':<38} wall {ratio(samples[name].median, demo.median)}   cpu "
              f"{ratio(samples[name].cpu_median, demo.cpu_median)}")
    print(f"  ratio demo warm no-op/bare start             wall {ratio(demo.median, bare.median)}   cpu "
          f"{ratio(demo.cpu_median, bare.cpu_median)}   (goal <= 3x)")


def leave_build_output(tree: Path, files: int = 200) -> None:
    """What an in-tree `pip wheel` leaves in a source tree (build/lib copies, *.egg-info, byte code), a second
    later (a build takes at least that: git re-reads files written in the second its index was)."""
    sources = sorted(p for p in tree.rglob("*.py") if ".git" not in p.parts)[:files] or \
        sorted(p for p in tree.rglob("*") if p.is_file() and ".git" not in p.parts)[:files]
    for src in sources:
        rel = src.relative_to(tree)
        for dest in (tree / "build" / "lib" / rel, tree / rel.parent / "__pycache__" / (rel.name + ".pyc")):
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dest)
    (tree / "bench.egg-info").mkdir(exist_ok=True)
    (tree / "bench.egg-info" / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: bench\n")
    time.sleep(1.1)


def checkouts(base: Path, rounds: int, shape: str = "2,000 files, 300 commits", history: bool = False) -> None:
    remote = base / ("history.git" if history else "big.git")
    commit = make_history_repo(remote) if history else make_big_repo(remote)
    url = f"https://bench.invalid/{remote.name}"
    mirrors = Mirrors(base / "ckcache", (Rewrite(url, f"file://{remote}"),))
    mirrors.ensure(url, commit)
    fresh: list[float] = []
    first: list[float] = []
    again: list[float] = []
    later: list[float] = []
    for r in range(rounds):
        dest = base / f"clone-{remote.stem}{r}"
        fresh.append(timed(lambda: (sh(["git", "clone", "-q", "--no-checkout", f"file://{remote}", str(dest)]),
                                    sh(["git", "-C", str(dest), "checkout", "-q", commit]))))
        shutil.rmtree(dest)
        # a cache of its own each round (the mirror shared): the first checkout of this commit, as a build
        # that has never prepared it meets it; no earlier tree is removed inside the timing
        trees = SourceTrees(base / f"trees-{remote.stem}{r}", mirrors)
        path = trees.root / trees.key(commit, (), "")

        def build(uses: list[float]) -> None:
            """A build's use of the tree: the checkout it waits for (timed), what it leaves in the tree, its
            end; then what runs beside the rest of the build (settling a new tree, deleting the output of
            the last build: not timed, but finished before the next measurement)."""
            cm = trees.tree(url, commit)
            uses.append(timed(cm.__enter__))
            leave_build_output(path)
            cm.__exit__(None, None, None)
            trees.settled()
        for uses in (first, again, later):
            build(uses)
    f, a, b, c = (statistics.median(x) for x in (fresh, first, again, later))
    print(f"checkout of a pinned commit ({shape}), median of {rounds} (ranges in brackets):")
    print(f"  fresh git clone + checkout                   {f:7.3f} s  ({min(fresh):.3f}-{max(fresh):.3f})")
    print(f"  from the mirror, first time                  {a:7.3f} s  ({min(first):.3f}-{max(first):.3f})   "
          f"{ratio(f, a)} faster   (goal >= 2x)")
    print(f"  prepared tree, first reuse after a build     {b:7.3f} s  ({min(again):.3f}-{max(again):.3f})   "
          f"{ratio(f, b)} faster   (goal >= 10x)")
    print(f"  prepared tree, later reuses after a build    {c:7.3f} s  ({min(later):.3f}-{max(later):.3f})   "
          f"{ratio(f, c)} faster   (goal >= 10x)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3, help="cold builds and checkouts: rounds (medians)")
    ap.add_argument("--runs", type=int, default=10, help="warm no-ops and bare interpreter starts: runs each")
    ap.add_argument("--skip-cold", action="store_true", help="warm no-op only (one cold build to warm up)")
    ap.add_argument("--skip-checkout", action="store_true")
    ap.add_argument("--skip-compiled", action="store_true", help="no cold build of the synthetic compiled component")
    ap.add_argument("--skip-resolve", action="store_true")
    ap.add_argument("--component", action="append", default=[], metavar="C",
                    help="also the warm no-op of `--component C` of the demo (repeatable), side by side")
    ap.add_argument("--realstack", action="store_true",
                    help="also the warm no-op of the realstack recipe (tests/support/realstack.py), side by side")
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="toolchain-bench-"))
    env = installed_like_env(base / "pycache")
    try:
        demo_repos = materialize(base / "demo-cache")
        if args.skip_cold:
            cache, out = base / "cache0", base / "out0"
            shutil.copytree(base / "demo-cache" / "demo-repos", cache / "demo-repos")
            toolchain_build(cache, out, env)
        else:
            cache, out = cold_and_raw(base, demo_repos, env, args.rounds)
            if not args.skip_compiled:
                cold_compiled(base, env, max(2, args.rounds - 1))
        warm_and_bare(cache, out, env, args.runs)
        if args.component or args.realstack:
            warm_cases(base, cache, out, env, args.runs, args.component, args.realstack)
        if not args.skip_resolve:
            resolution(base, cache, out, env, max(args.rounds, 5))
        if not args.skip_checkout:
            checkouts(base, args.rounds)
            checkouts(base, args.rounds, "2,000 files, 20,000 commits: a real repository's history", history=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
