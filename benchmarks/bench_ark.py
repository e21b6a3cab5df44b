"""The real ARK through the tool against the same build by hand (issue 50; `nox -s bench-ark`, not in CI), from the
git bundles in ../shared/mirrors laid out as mirrors (tests/support/ark_mirrors.py), side by side in one run:

1. cold: `toolchain build --recipe ark-cpu` (empty wheel and compiler caches) against a raw `pip wheel
   --no-build-isolation --no-deps` of the same patched tree fed the same sources (a hand-written
   CMAKE_TOOLCHAIN_FILE pointing FetchContent at the same checkouts): target ratio <= 1.05;
2. adjacent: the previous `auto_round_extension/ark` change built next with the same compiler cache: target
   <= 15% of cold;
3. bisect: `toolchain bisect` over real ARK history with the compiler cache (the test: does the CPU module
   export ARK_CPU_SDPA_ROUTE_SCALAR, which "Migrate cpu sdpa from NS flash attn" (7402af8) added) against `git
   bisect run` building each step the raw way without a cache: target <= 0.5.

The full CPU half compiles oneDNN (some 2,800 CPU-seconds on two idle cores): `--reduced` builds it with
ARK_CPU_DNNL=0 (bestla, xbyak and pybind11 only; minutes), the configuration CI uses.

    python -m benchmarks.bench_ark [--reduced] [--parts cold,adjacent,bisect] [--good SHA] [--bad SHA] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.support import ark_mirrors
from toolchain.core.proc.runner import run

REPO = Path(__file__).resolve().parents[1]
SUBDIR = "auto_round_extension/ark"
PATCH = REPO / "patches" / "ark" / "0001-setup-ARK_BUILD_XPU-switch.patch"
DEPS = {"pybind11": "pybind/pybind11", "xbyak": "herumi/xbyak", "dnnl": "uxlfoundation/oneDNN"}
GOOD, BAD = "5ce9733", "2ea60e5"  # around 7402af8, which added the CPU SDPA routes (37 first-parent commits)
PROBE = """\
import os, sys, tempfile, zipfile, importlib.util
wheels = [w for w in os.environ.get("TOOLCHAIN_BISECT_WHEELS", "").split(os.pathsep) if w] or sys.argv[1:]
with tempfile.TemporaryDirectory() as d:
    for w in wheels:
        zipfile.ZipFile(w).extractall(d)
    so = [os.path.join(r, f) for r, _, fs in os.walk(d) for f in fs if f.startswith("auto_round_kernel_cpu")]
    if not so:
        sys.exit(125)
    spec = importlib.util.spec_from_file_location("auto_round_kernel_cpu", so[0])
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    sys.exit(1 if hasattr(m, "ARK_CPU_SDPA_ROUTE_SCALAR") else 0)
"""
RAW_STEP = """\
import glob, os, subprocess, sys, tempfile
if subprocess.run(["git", "apply", sys.argv[2]]).returncode != 0:
    sys.exit(125)
try:
    with tempfile.TemporaryDirectory() as out:
        if subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-build-isolation", "--no-deps",
                           "auto_round_extension/ark", "-w", out]).returncode != 0:
            sys.exit(125)
        sys.exit(subprocess.run([sys.executable, sys.argv[1], *glob.glob(out + "/*.whl")]).returncode)
finally:
    subprocess.run(["git", "checkout", "--", "."])
    subprocess.run(["git", "clean", "-fdxq"])
"""


def _recipe(work: Path, reduced: bool, commit: str = "") -> Path:
    lines = ['extends = "ark-cpu"', 'description = "bench-ark"', "[target]", f'python = "{sys.executable}"',
             "[components.auto-round-lib]"]
    if commit:
        lines.append(f'commit = "{commit}"')
    lines.append("[components.auto-round-lib.env]")
    if reduced:
        lines.append('ARK_CPU_DNNL = "0"')
    path = work / f"bench-{commit or 'pin'}.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def _tool(work: Path, mirrors: Path, cache: Path, *args: object) -> float:
    started = time.monotonic()
    run([sys.executable, "-m", "toolchain", *map(str, args), "--cache-dir", str(cache),
         "--mirror", f"https://github.com/=file://{mirrors}/"], cwd=work, log=work / "bench.log")
    return time.monotonic() - started


def _commit_of(mirror: Path, rev: str) -> str:
    return run(["git", "--git-dir", str(mirror), "rev-parse", f"{rev}^{{commit}}"], capture=True).stdout.strip()


def _raw_tree(mirrors: Path, dest: Path, commit: str) -> tuple[Path, Path]:
    """The patched ARK tree at `commit` and a toolchain file pointing FetchContent at plain clones."""
    run(["git", "clone", "-q", str(mirrors / "intel" / "auto-round.git"), str(dest / "ark")])
    run(["git", "checkout", "-q", commit], cwd=dest / "ark")
    lines = ["set(FETCHCONTENT_FULLY_DISCONNECTED ON CACHE BOOL \"\" FORCE)"]
    for name, slug in DEPS.items():
        run(["git", "clone", "-q", str(mirrors / f"{slug}.git"), str(dest / name)])
        lines.append(f'set(FETCHCONTENT_SOURCE_DIR_{name.upper()} "{dest / name}" CACHE PATH "" FORCE)')
    (dest / "pins.cmake").write_text("\n".join(lines) + "\n")
    return dest / "ark", dest / "pins.cmake"


def _raw_env(pins: Path, reduced: bool) -> dict[str, str]:
    env = {**os.environ, "ARK_BUILD_XPU": "0", "BUILD_MODE": "release", "CMAKE_TOOLCHAIN_FILE": str(pins),
           "CCACHE_DISABLE": "1"}
    return {**env, "ARK_CPU_DNNL": "0"} if reduced else env


def cold(work: Path, mirrors: Path, reduced: bool) -> dict[str, Any]:
    """The tool's cold build against the raw one, and then the adjacent change with the tool's cache."""
    tool = _tool(work, mirrors, work / "cache", "build", "--recipe", _recipe(work, reduced), "--no-resolve",
                 "--out", work / "out-cold")
    tree, pins = _raw_tree(mirrors, work / "raw", ark_mirrors.ARK_COMMIT)
    run(["git", "apply", str(PATCH)], cwd=tree)
    started = time.monotonic()
    run([sys.executable, "-m", "pip", "wheel", "-q", "--no-build-isolation", "--no-deps", f"{tree}/{SUBDIR}",
         "-w", str(work / "raw-out")], env=_raw_env(pins, reduced), log=work / "raw.log")
    raw = time.monotonic() - started
    return {"tool_cold_s": round(tool, 1), "raw_s": round(raw, 1), "ratio": round(tool / raw, 3), "target": 1.05}


def adjacent(work: Path, mirrors: Path, reduced: bool, cold_s: float) -> dict[str, Any]:
    ark = mirrors / "intel" / "auto-round.git"
    changes = run(["git", "--git-dir", str(ark), "log", "--first-parent", "-2", "--format=%H",
                   ark_mirrors.ARK_COMMIT, "--", SUBDIR], capture=True).stdout.split()
    previous = changes[1]
    took = _tool(work, mirrors, work / "cache", "build", "--recipe", _recipe(work, reduced, previous), "--no-resolve",
                 "--out", work / "out-adjacent")
    return {"commit": previous, "seconds": round(took, 1), "of_cold": round(took / cold_s, 3), "target": 0.15}


def bisect(work: Path, mirrors: Path, reduced: bool, good: str, bad: str) -> dict[str, Any]:
    ark = mirrors / "intel" / "auto-round.git"
    good, bad = _commit_of(ark, good), _commit_of(ark, bad)
    probe = work / "probe.py"
    probe.write_text(PROBE)
    tool = _tool(work, mirrors, work / "bisect-cache", "bisect", "--recipe", _recipe(work, reduced, bad),
                 "--component", "auto-round-lib", "--good", good, "--bad", bad, "--test-cmd",
                 f"{sys.executable} {probe}", "--no-resolve", "--out", work / "bisect-out", "--json")
    tree, pins = _raw_tree(mirrors, work / "raw-bisect", bad)
    step = work / "step.py"
    step.write_text(RAW_STEP)
    started = time.monotonic()
    run(["git", "bisect", "start", bad, good], cwd=tree)
    done = run(["git", "bisect", "run", sys.executable, str(step), str(probe), str(PATCH)], cwd=tree,
               env=_raw_env(pins, reduced), capture=True, check=False)
    raw = time.monotonic() - started
    found = next((line.split()[0] for line in done.stdout.splitlines() if "is the first bad commit" in line), "")
    return {"good": good, "bad": bad, "tool_s": round(tool, 1), "git_bisect_run_s": round(raw, 1),
            "ratio": round(tool / raw, 3), "target": 0.5, "git_found": found}


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reduced", action="store_true", help="ARK_CPU_DNNL=0: no oneDNN in the CPU extension")
    p.add_argument("--parts", default="cold,adjacent,bisect")
    p.add_argument("--good", default=GOOD)
    p.add_argument("--bad", default=BAD)
    p.add_argument("--json", action="store_true")
    p.add_argument("--keep", action="store_true")
    args = p.parse_args(argv)
    why = ark_mirrors.missing()
    if why:
        print(why, file=sys.stderr)
        return 2
    parts = set(args.parts.split(","))
    work = Path(tempfile.mkdtemp(prefix="bench-ark-"))
    results: dict[str, Any] = {"reduced": args.reduced}
    try:
        mirrors = ark_mirrors.lay_out(work / "mirrors")
        if parts & {"cold", "adjacent"}:
            results["cold"] = cold(work, mirrors, args.reduced)
            print(f"cold: toolchain {results['cold']['tool_cold_s']} s, raw pip wheel {results['cold']['raw_s']} s "
                  f"-> {results['cold']['ratio']}x (target <= 1.05)", flush=True)
        if "adjacent" in parts:
            results["adjacent"] = adjacent(work, mirrors, args.reduced, results["cold"]["tool_cold_s"])
            print(f"adjacent {results['adjacent']['commit'][:12]}: {results['adjacent']['seconds']} s = "
                  f"{results['adjacent']['of_cold']} of cold (target <= 0.15)", flush=True)
        if "bisect" in parts:
            results["bisect"] = bisect(work, mirrors, args.reduced, args.good, args.bad)
            b = results["bisect"]
            print(f"bisect {b['good'][:12]}..{b['bad'][:12]}: toolchain {b['tool_s']} s, git bisect run "
                  f"{b['git_bisect_run_s']} s -> {b['ratio']}x (target <= 0.5); git found {b['git_found'][:12]}",
                  flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"kept {work}")
    if args.json:
        print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
