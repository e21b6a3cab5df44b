"""Git reads: the git CLI (through toolchain.core.git) against GitPython, measured side by side in one run.

The question it answers: should `core/git.py` read commits through GitPython (one persistent `git cat-file
--batch`) instead of the CLI? On a generated repository (default 200 first-parent commits with merged side
branches, cloned bare like a mirror) it times:

  cli-log          one `git log --first-parent` over the range, parsed (what bisect does)
  cli-show         one `git show -s` per commit (what a build does per component)
  gitpython-walk   Repo.iter_commits(range, first_parent=True): the same metadata
  gitpython-batch  Repo.commit(sha) per commit: one persistent `cat-file --batch`
  import-gitpython what `import git` adds to a process start (a warm no-op build starts a process)

Every figure is the best of --repeat runs; ratios are against cli-log. GitPython is not a dependency of the
tool (this benchmark is why): `pip install gitpython` to run its half.

    python -m benchmarks.bench_git [--commits 200] [--repeat 5] [--json]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.bench_bisect import make_kernel_repo
from toolchain.core.git import git

FORMAT = "%H%x00%P%x00%s%x00%cI"


def cli_log(repo: Path, good: str, bad: str) -> list[tuple[str, int, str, str]]:
    out = git(["log", f"--format={FORMAT}", "--first-parent", "--reverse", f"{good}..{bad}"], cwd=repo).stdout
    rows = []
    for line in out.splitlines():
        sha, parents, subject, date = line.split("\x00")
        rows.append((sha, len(parents.split()), subject, date))
    return rows


def cli_show(repo: Path, shas: list[str]) -> list[tuple[str, int, str, str]]:
    rows = []
    for sha in shas:
        line = git(["show", "-s", f"--format={FORMAT}", sha], cwd=repo).stdout.rstrip("\n")
        sha_, parents, subject, date = line.split("\x00")
        rows.append((sha_, len(parents.split()), subject, date))
    return rows


def gitpython_walk(repo: Path, good: str, bad: str) -> list[tuple[str, int, str, str]]:
    import git as gitpython

    r = gitpython.Repo(repo)
    try:
        return [(c.hexsha, len(c.parents), str(c.summary), c.committed_datetime.isoformat())
                for c in r.iter_commits(f"{good}..{bad}", first_parent=True, reverse=True)]
    finally:
        r.close()


def gitpython_batch(repo: Path, shas: list[str]) -> list[tuple[str, int, str, str]]:
    import git as gitpython

    r = gitpython.Repo(repo)
    try:
        rows = []
        for sha in shas:
            c = r.commit(sha)
            rows.append((c.hexsha, len(c.parents), str(c.summary), c.committed_datetime.isoformat()))
        return rows
    finally:
        r.close()


def import_cost(module: str, repeat: int) -> float:
    """Seconds `import MODULE` adds to a fresh interpreter (best of `repeat`, minus a bare start)."""
    def start(code: str) -> float:
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True)
        return time.perf_counter() - t

    bare = min(start("pass") for _ in range(repeat))
    return max(0.0, min(start(f"import {module}") for _ in range(repeat)) - bare)


def best(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    times, result = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t)
    return min(times), result


def run_benchmark(work: Path, *, commits: int = 200, repeat: int = 5) -> dict[str, Any]:
    src = make_kernel_repo(work / "src", commits=commits)
    mirror = work / "mirror.git"
    git(["clone", "--quiet", "--bare", "--no-local", str(src.path), str(mirror)])  # packed, like a fetched mirror
    shas = [row[0] for row in cli_log(mirror, src.good, src.bad)]
    figures: dict[str, float] = {}
    results = {}
    readers: list[tuple[str, Callable[[], Any]]] = [("cli-log", lambda: cli_log(mirror, src.good, src.bad)),
                                                    ("cli-show", lambda: cli_show(mirror, shas))]
    if importlib.util.find_spec("git") is not None:
        readers += [("gitpython-walk", lambda: gitpython_walk(mirror, src.good, src.bad)),
                    ("gitpython-batch", lambda: gitpython_batch(mirror, shas))]
    for name, fn in readers:
        figures[name], results[name] = best(fn, repeat)
    same = all(r == results["cli-log"] for r in results.values())
    if "gitpython-walk" in figures:
        figures["import-gitpython"] = import_cost("git", repeat)
    figures["import-toolchain.cli"] = import_cost("toolchain.cli", repeat)
    base = figures["cli-log"]
    return {"commits": len(shas), "same_metadata": same,
            "seconds": {k: round(v, 4) for k, v in figures.items()},
            "ratio_to_cli_log": {k: round(v / base, 1) for k, v in figures.items()}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.bench_git", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--commits", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-git-") as tmp:
        report = run_benchmark(Path(tmp), commits=args.commits, repeat=args.repeat)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(f"{report['commits']} first-parent commits; same metadata from every reader: {report['same_metadata']}")
        if "gitpython-walk" not in report["seconds"]:
            print("GitPython is not installed: only the CLI was measured (pip install gitpython)")
        for k, v in report["seconds"].items():
            print(f"{k:>22}: {v * 1000:9.1f} ms  ({report['ratio_to_cli_log'][k]:g} x cli-log)")
    return 0 if report["same_metadata"] else 1


if __name__ == "__main__":
    sys.exit(main())
