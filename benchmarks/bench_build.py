"""Build benchmarks, measured side by side in one run (`nox -s bench`). Prints figures and ratios.

1. cold `toolchain build --recipe demo` (empty cache; the demo repositories already exist, as a network
   remote would) against raw `pip wheel --no-build-isolation` of the same patched sources in the same
   toolchain environment.                                        goal: <= 1.05x
2. a warm no-op rerun of the same build.                         goal: <= 1 s and <= 2 % of cold
3. checking a pinned commit out of the mirror against a fresh `git clone` + checkout, on a generated
   repository of 2,000 files and 300 commits: a first (cold) checkout from the mirror, and the prepared
   tree a build gets when the same commit is built again.         goal: >= 10x
4. resolving the runtime closure of the demo (uv, warm resolver cache): a warm build against the same warm
   build with --no-resolve, and the resolver call alone.         goal: <= 1 s added to a warm build
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
from pathlib import Path

from toolchain.recipe.load import load_recipe
from toolchain.sources.demo import materialize
from toolchain.sources.mirrors import Mirrors, Rewrite
from toolchain.sources.trees import SourceTrees

ROOT = Path(__file__).resolve().parent.parent


def timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def sh(argv, **kw):
    return subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **kw)


def toolchain_build(cache: Path, out: Path, *extra: str) -> None:
    sh([sys.executable, "-m", "toolchain", "build", "--recipe", "demo", "--cache-dir", str(cache),
        "--out", str(out), "--json", *extra], cwd=ROOT)


def resolve_only(cache: Path, out: Path) -> None:
    """The resolution step of a build, in process: the demo's built wheels → the checked closure."""
    from toolchain.console import UI
    from toolchain.lock import read_lock
    from toolchain.resolve.run import resolve_built

    lock = read_lock(out / "stack.lock.toml")
    resolve_built(load_recipe("demo", ROOT / "recipes"), lock.target,
                  [(c.name, lock.wheel_path(c), c.built_against) for c in lock.components], cache, out / "logs",
                  UI(quiet=True))


def raw_pip_wheel(work: Path, demo_repos: Path) -> None:
    """What a hand-written script does: check out, patch, source setvars, pip wheel each component."""
    recipe = load_recipe("demo", ROOT / "recipes")
    setvars = ROOT / "toolchain/demo_src/oneapi-standin/setvars.sh"
    out = work / "wheels"
    for comp in recipe.components:
        repo = demo_repos / comp.url.rsplit("/", 1)[1]
        src = work / comp.name
        sh(["git", "clone", "-q", "--no-checkout", str(repo), str(src)])
        sh(["git", "-C", str(src), "checkout", "-q", comp.commit])
        for p in comp.patches:
            sh(["git", "-C", str(src), "apply", str(p.file)])
        env = dict(os.environ, **dict(recipe.env), **dict(comp.env))
        for dep in comp.fetchcontent:
            dsrc = work / dep.name
            sh(["git", "clone", "-q", str(demo_repos / dep.url.rsplit("/", 1)[1]), str(dsrc)])
            sh(["git", "-C", str(dsrc), "checkout", "-q", dep.commit])
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="toolchain-bench-"))
    try:
        demo_repos = materialize(base / "demo-cache")
        cold, raw, warm, unresolved, alone = [], [], [], [], []
        for r in range(args.rounds):  # interleaved so drift hits both sides alike
            cache, out = base / f"cache{r}", base / f"out{r}"
            shutil.copytree(base / "demo-cache" / "demo-repos", cache / "demo-repos")
            cold.append(timed(lambda: toolchain_build(cache, out)))
            raw.append(timed(lambda: raw_pip_wheel(base / f"raw{r}", demo_repos)))
            warm.append(timed(lambda: toolchain_build(cache, out)))
            unresolved.append(timed(lambda: toolchain_build(cache, out, "--no-resolve")))
            warm.append(timed(lambda: toolchain_build(cache, out)))
            alone.append(timed(lambda: resolve_only(cache, out)))
        c, w, rw = statistics.median(cold), statistics.median(warm), statistics.median(raw)
        print(f"demo build, median of {args.rounds}:")
        print(f"  cold toolchain build      {c:7.2f} s")
        print(f"  raw pip wheel (by hand)   {rw:7.2f} s")
        print(f"  ratio cold/raw            {c / rw:7.3f}x   (goal <= 1.05x)")
        print(f"  warm no-op rerun          {w:7.2f} s   = {100 * w / c:.1f}% of cold   (goal <= 1 s and <= 2%)")
        u, a1 = statistics.median(unresolved), statistics.median(alone)
        print("resolving the demo closure (uv, warm resolver cache), median of", args.rounds)
        print(f"  warm build --no-resolve   {u:7.2f} s")
        print(f"  warm build (resolves)     {w:7.2f} s   added {w - u:+.2f} s   (goal <= 1 s)")
        print(f"  the resolution step alone {a1:7.2f} s")

        remote = base / "big.git"
        commit = make_big_repo(remote)
        mirrors = Mirrors(base / "ckcache", (Rewrite("https://bench.invalid/big.git", f"file://{remote}"),))
        url = "https://bench.invalid/big.git"
        mirrors.ensure(url, commit)
        trees = SourceTrees(base / "ckcache", mirrors)
        fresh, first, again = [], [], []
        for r in range(args.rounds):
            dest = base / f"clone{r}"
            fresh.append(timed(lambda: (sh(["git", "clone", "-q", "--no-checkout", f"file://{remote}", str(dest)]),
                                        sh(["git", "-C", str(dest), "checkout", "-q", commit]))))
            shutil.rmtree(dest)

            def cold_checkout():
                with trees.tree(url, commit, fresh=True):
                    pass

            def reuse():
                with trees.tree(url, commit):
                    pass
            first.append(timed(cold_checkout))
            again.append(timed(reuse))
        f, a, b = statistics.median(fresh), statistics.median(first), statistics.median(again)
        print("checkout of a pinned commit (2,000 files, 300 commits), median of", args.rounds)
        print(f"  fresh git clone + checkout        {f:7.3f} s")
        print(f"  from the mirror, first time       {a:7.3f} s   {f / a:6.1f}x faster")
        print(f"  prepared tree, built again        {b:7.3f} s   {f / b:6.1f}x faster   (goal >= 10x)")
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
