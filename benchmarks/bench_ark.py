"""The real ARK through the tool against the same build by hand (issue 50; `nox -s bench-ark`, not in CI), from the
git bundles in ../shared/mirrors laid out as mirrors (tests/support/ark_mirrors.py), side by side in one run:

1. cold: `toolchain build --recipe ark-cpu` (empty wheel and compiler caches) against a raw `pip wheel
   --no-build-isolation --no-deps` of the same patched tree fed the same sources (a hand-written
   CMAKE_TOOLCHAIN_FILE pointing FetchContent at the same checkouts): target ratio <= 1.05;
2. adjacent: the previous `auto_round_extension/ark` change built next with the same compiler cache: target
   <= 15% of cold;
3. bisect: `toolchain bisect` over real ARK history with the compiler cache (the test: does the CPU module
   export ARK_CPU_SDPA_ROUTE_SCALAR, which "Migrate cpu sdpa from NS flash attn" (7402af8) added) against `git
   bisect run` building each step the raw way without a cache: target <= 0.5. Printed beside it: each build
   the tool made (its CPU-seconds, its compiler and link caches' hits and misses, from its build log), the
   tool's CPU-seconds outside them, and how many builds `git bisect run` made.

The full CPU half compiles oneDNN (some 2,800 CPU-seconds on two idle cores): `--reduced` builds it with
ARK_CPU_DNNL=0 (bestla, xbyak and pybind11 only; minutes), the configuration CI uses.

    python -m benchmarks.bench_ark [--reduced] [--parts cold,adjacent,bisect] [--no-raw] [--good SHA] [--bad SHA]
                                   [--json]

Each build's CPU-seconds (its children's user + sys) are printed beside its wall time: on a shared machine the
ratio by CPU is the figure to read. `--no-raw` skips the raw `pip wheel` of the cold part (the tool's cold build
and the adjacent change alone: about half the CPU of the full configuration's run).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.support import ark_mirrors
from toolchain.core.proc.runner import run
from toolchain.core.proc.signals import Interrupted, interruptible

REPO = Path(__file__).resolve().parents[1]
SUBDIR = "auto_round_extension/ark"
COMPONENT = "auto-round-lib"
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


def _cpu() -> float:
    """CPU-seconds (user + sys) of every child process waited for so far, theirs included."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def _timed(argv: list[str], **kwargs: Any) -> tuple[float, float]:
    """Wall and CPU seconds of one command and everything it ran."""
    cpu, started = _cpu(), time.monotonic()
    run(argv, **kwargs)
    return time.monotonic() - started, _cpu() - cpu


def _tool(work: Path, mirrors: Path, cache: Path, *args: object) -> tuple[float, float]:
    return _timed([sys.executable, "-m", "toolchain", *map(str, args), "--cache-dir", str(cache),
                   "--mirror", f"https://github.com/=file://{mirrors}/"], cwd=work, log=work / "bench.log")


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


def cold(work: Path, mirrors: Path, reduced: bool, raw_too: bool = True) -> dict[str, Any]:
    """The tool's cold build against the raw one (unless not `raw_too`)."""
    tool, tool_cpu = _tool(work, mirrors, work / "cache", "build", "--recipe", _recipe(work, reduced),
                           "--no-resolve", "--out", work / "out-cold")
    result: dict[str, Any] = {"tool_cold_s": round(tool, 1), "tool_cold_cpu_s": round(tool_cpu, 1)}
    if not raw_too:
        return result
    tree, pins = _raw_tree(mirrors, work / "raw", ark_mirrors.ARK_COMMIT)
    run(["git", "apply", str(PATCH)], cwd=tree)
    raw, raw_cpu = _timed([sys.executable, "-m", "pip", "wheel", "-q", "--no-build-isolation", "--no-deps",
                           f"{tree}/{SUBDIR}", "-w", str(work / "raw-out")], env=_raw_env(pins, reduced),
                          log=work / "raw.log")
    return {**result, "raw_s": round(raw, 1), "raw_cpu_s": round(raw_cpu, 1), "ratio": round(tool / raw, 3),
            "ratio_cpu": round(tool_cpu / raw_cpu, 3), "target": 1.05}


def adjacent(work: Path, mirrors: Path, reduced: bool, cold: dict[str, Any]) -> dict[str, Any]:
    ark = mirrors / "intel" / "auto-round.git"
    changes = run(["git", "--git-dir", str(ark), "log", "--first-parent", "-2", "--format=%H",
                   ark_mirrors.ARK_COMMIT, "--", SUBDIR], capture=True).stdout.split()
    previous = changes[1]
    took, cpu = _tool(work, mirrors, work / "cache", "build", "--recipe", _recipe(work, reduced, previous),
                      "--no-resolve", "--out", work / "out-adjacent")
    return {"commit": previous, "seconds": round(took, 1), "cpu_s": round(cpu, 1),
            "of_cold": round(took / cold["tool_cold_s"], 3), "of_cold_cpu": round(cpu / cold["tool_cold_cpu_s"], 3),
            "target": 0.15}


def bisect(work: Path, mirrors: Path, reduced: bool, good: str, bad: str) -> dict[str, Any]:
    ark = mirrors / "intel" / "auto-round.git"
    good, bad = _commit_of(ark, good), _commit_of(ark, bad)
    probe = work / "probe.py"
    probe.write_text(PROBE)
    tool, tool_cpu = _tool(work, mirrors, work / "bisect-cache", "bisect", "--recipe", _recipe(work, reduced, bad),
                 "--component", "auto-round-lib", "--good", good, "--bad", bad, "--test-cmd",
                 f"{sys.executable} {probe}", "--no-resolve", "--out", work / "bisect-out", "--json")
    builds = _step_builds(work / "bisect-out")
    tree, pins = _raw_tree(mirrors, work / "raw-bisect", bad)
    step = work / "step.py"
    step.write_text(RAW_STEP)
    started, cpu = time.monotonic(), _cpu()
    run(["git", "bisect", "start", bad, good], cwd=tree)
    done = run(["git", "bisect", "run", sys.executable, str(step), str(probe), str(PATCH)], cwd=tree,
               env=_raw_env(pins, reduced), capture=True, check=False)
    raw, raw_cpu = time.monotonic() - started, _cpu() - cpu
    found = next((line.split()[0] for line in done.stdout.splitlines() if "is the first bad commit" in line), "")
    said = run(["git", "bisect", "log"], cwd=tree, capture=True).stdout.splitlines()
    git_builds = sum(1 for line in said if line.split()[:3] in (["git", "bisect", w] for w in ("good", "bad", "skip")))
    built_cpu = sum(b["cpu_s"] for b in builds.values())
    return {"good": good, "bad": bad, "tool_s": round(tool, 1), "tool_cpu_s": round(tool_cpu, 1),
            "tool_builds": builds, "tool_builds_cpu_s": round(built_cpu, 1),
            "tool_own_cpu_s": round(tool_cpu - built_cpu, 1), "git_builds": git_builds,
            "git_bisect_run_s": round(raw, 1), "git_bisect_run_cpu_s": round(raw_cpu, 1), "ratio": round(tool / raw, 3),
            "ratio_cpu": round(tool_cpu / raw_cpu, 3), "target": 0.5, "git_found": found}


def _step_builds(out: Path) -> dict[str, dict[str, float]]:
    """Each commit the tool built: its build's wall and CPU seconds and its compiler cache's hits and misses
    (and the link cache's), as its build log's closing lines say them."""
    found: dict[str, dict[str, float]] = {}
    for log in sorted(out.glob(f"steps/*/logs/{COMPONENT}.log")):
        figures: dict[str, float] = {}
        for line in log.read_text(errors="replace").splitlines():
            if line.startswith("# build cost: "):
                words = line.split()
                figures.update(wall_s=float(words[3]), cpu_s=float(words[6]))
            elif line.startswith("# compiler cache: ccache "):  # "N hits[ (M from X)], N misses[; links: ...]"
                pairs = re.findall(r"(\d+) hits(?: \([^)]*\))?, (\d+) misses", line)
                for prefix, (hits, misses) in zip(("", "link_"), pairs, strict=False):
                    figures.update({f"{prefix}hits": int(hits), f"{prefix}misses": int(misses)})
        if "cpu_s" in figures:
            found[log.parents[1].name] = figures
    return found


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reduced", action="store_true", help="ARK_CPU_DNNL=0: no oneDNN in the CPU extension")
    p.add_argument("--parts", default="cold,adjacent,bisect")
    p.add_argument("--good", default=GOOD)
    p.add_argument("--bad", default=BAD)
    p.add_argument("--no-raw", action="store_true", help="skip the raw pip wheel of the cold part")
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
        with interruptible():  # a stop signal (SIGTERM, Ctrl-C) stops the builds it runs, not only this process
            _parts(args, parts, work, results)
    except Interrupted as stop:
        print(f"stopped by {stop.signame}; measured so far: {json.dumps(results)}", file=sys.stderr)
        return stop.exit_code
    if args.json:
        print(json.dumps(results, indent=2))
    return 0


def _parts(args: argparse.Namespace, parts: set[str], work: Path, results: dict[str, Any]) -> None:
    try:
        mirrors = ark_mirrors.lay_out(work / "mirrors")
        if parts & {"cold", "adjacent"}:
            c = results["cold"] = cold(work, mirrors, args.reduced, raw_too=not args.no_raw)
            print(f"cold: toolchain {c['tool_cold_s']} s ({c['tool_cold_cpu_s']} CPU-s)" + (
                  f", raw pip wheel {c['raw_s']} s ({c['raw_cpu_s']} CPU-s) -> {c['ratio']}x wall, "
                  f"{c['ratio_cpu']}x CPU (target <= 1.05)" if "raw_s" in c else ", raw side skipped"), flush=True)
        if "adjacent" in parts:
            a = results["adjacent"] = adjacent(work, mirrors, args.reduced, results["cold"])
            print(f"adjacent {a['commit'][:12]}: {a['seconds']} s ({a['cpu_s']} CPU-s) = {a['of_cold']} of cold "
                  f"wall, {a['of_cold_cpu']} by CPU (target <= 0.15)", flush=True)
        if "bisect" in parts:
            results["bisect"] = bisect(work, mirrors, args.reduced, args.good, args.bad)
            b = results["bisect"]
            print(f"bisect {b['good'][:12]}..{b['bad'][:12]}: toolchain {b['tool_s']} s ({b['tool_cpu_s']} CPU-s), "
                  f"git bisect run {b['git_bisect_run_s']} s ({b['git_bisect_run_cpu_s']} CPU-s) -> {b['ratio']}x "
                  f"wall, {b['ratio_cpu']}x CPU (target <= 0.5); git found {b['git_found'][:12]}", flush=True)
            print(f"  toolchain: {len(b['tool_builds'])} builds, {b['tool_builds_cpu_s']} CPU-s in them, "
                  f"{b['tool_own_cpu_s']} CPU-s besides; git bisect run: {b['git_builds']} builds", flush=True)
            for commit, f in b["tool_builds"].items():
                print(f"  {commit}: {f['wall_s']} s ({f['cpu_s']} CPU-s), ccache {f.get('hits', 0)} hits "
                      f"{f.get('misses', 0)} misses, links {f.get('link_hits', 0)} hits {f.get('link_misses', 0)} "
                      "misses", flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"kept {work}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
