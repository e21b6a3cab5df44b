"""P7, the remote wheel cache (issue 12), measured side by side in one run (`nox -s bench`). Prints figures and
ratios; needs Debian's `docker-registry` (a real registry on 127.0.0.1, started and stopped here).

1. `toolchain build --recipe demo` (3 components) into an EMPTY local cache from a warm remote, against the
   same build from a warm local cache (both into a fresh --out). The demo repositories exist beforehand, as a
   network git remote would (as in bench_build). Also shown: a brand-new cache directory without them (a new
   machine's one-time costs: probing the target, sourcing the toolchain, making the demo repositories).
                                                                          goal: <= 2x
2. A bisect over the synthetic C extension (bench_bisect's generated `benchkern`), every first-parent commit
   prebuilt into the registry beforehand (as the CI prebuild job does), run on a clean machine (new cache):
   every step and every build ahead downloads.                            goal: 0 compiles

    python -m benchmarks.bench_remote [--rounds 5] [--commits 12] [--json]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from toolchain.sources.demo import materialize

ROOT = Path(__file__).resolve().parent.parent


def _registry() -> Any:
    sys.path.insert(0, str(ROOT))
    from tests.support.registry import registry_available, run_registry

    ok, reason = registry_available()
    if not ok:
        raise SystemExit(f"bench_remote: {reason}")
    return run_registry


def build(cache: Path, out: Path, remote: str, *extra: str) -> dict[str, Any]:
    argv = [sys.executable, "-m", "toolchain", "build", "--recipe", "demo", "--cache-dir", str(cache),
            "--out", str(out), "--remote-cache", remote, "--remote-insecure", "--json", *extra]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise SystemExit(f"bench_remote: {' '.join(argv)} failed:\n{done.stdout}\n{done.stderr}")
    data: dict[str, Any] = json.loads(done.stdout)
    return data


def timed(fn: Any) -> tuple[float, Any]:
    started = time.perf_counter()
    value = fn()
    return time.perf_counter() - started, value


def demo_stack(base: Path, remote: str, rounds: int) -> dict[str, Any]:
    demo_cache = base / "demo-cache"
    materialize(demo_cache)
    warm_local = base / "warm-local"
    shutil.copytree(demo_cache / "demo-repos", warm_local / "demo-repos")
    pushed = build(warm_local, base / "out-push", remote, "--push")  # compiles once, fills the remote
    assert all(c["source"] == "built" and c["pushed"] for c in pushed["components"]), pushed
    from_remote, from_local, new_machine = [], [], []
    for r in range(rounds):  # interleaved, so drift hits every side alike
        empty = base / f"empty{r}"
        shutil.copytree(demo_cache / "demo-repos", empty / "demo-repos")
        t, got = timed(lambda: build(empty, base / f"out-remote{r}", remote))
        assert [c["source"] for c in got["components"]] == ["remote-cache"] * 3, got
        from_remote.append(t)
        t, got = timed(lambda: build(warm_local, base / f"out-local{r}", remote))
        assert [c["source"] for c in got["components"]] == ["local-cache"] * 3, got
        from_local.append(t)
        t, got = timed(lambda: build(base / f"new{r}", base / f"out-new{r}", remote))
        assert [c["source"] for c in got["components"]] == ["remote-cache"] * 3, got
        new_machine.append(t)
    rem, loc, new = (statistics.median(x) for x in (from_remote, from_local, new_machine))
    return {"rounds": rounds, "empty_cache_from_remote_s": round(rem, 3), "warm_local_s": round(loc, 3),
            "ratio": round(rem / loc, 3), "new_machine_from_remote_s": round(new, 3),
            "new_machine_ratio": round(new / loc, 3), "ok": rem / loc <= 2.0}


def bisect_from_remote(base: Path, remote: str, commits: int) -> dict[str, Any]:
    from benchmarks.bench_bisect import KERN, TEST_PY, Stack, _Git, make_kernel_repo, spine_builder, tool_bisect

    kern = make_kernel_repo(base / "repos" / KERN, commits=commits, unbuildable=())
    py = _Git(base / "repos" / "benchpy")
    p = py.commit("pure python", {"setup.py": "from setuptools import setup\nsetup(name='benchpy', version='0.1', "
                                              "packages=['benchpy'])\n", "benchpy/__init__.py": "X = 1\n"})
    test = base / "test_step.py"
    test.write_text(TEST_PY.format(answer=42))
    stack = Stack(kern, (("benchpy", py.path, p),), test)
    host, namespace = remote.removeprefix("oci://").split("/", 1)
    table = f'[cache]\nremote = "oci://{host}/{namespace}-bisect"\ninsecure = true\n'

    prebuild = spine_builder(stack, base / "prebuild", extra=table + "push = true\n")
    shas = subprocess.run(["git", "-C", str(kern.path), "rev-list", "--first-parent", kern.bad],  # good is the root
                          capture_output=True, text=True, check=True).stdout.split()
    t_prebuild, outcomes = timed(lambda: [prebuild.build(sha) for sha in shas])
    assert all(o.ok for o in outcomes), [o.reason for o in outcomes if not o.ok]

    clean = spine_builder(stack, base / "clean-machine", extra=table)
    t_bisect, (result, _) = timed(lambda: tool_bisect(stack, clean, base / "clean-machine", 3))
    sources = [s.source for s in result.steps]
    return {"commits": kern.first_parent, "prebuilt": len(shas), "prebuild_s": round(t_prebuild, 2),
            "bisect_s": round(t_bisect, 2), "steps": len(result.steps), "step_sources": sources,
            "builds_compiled": result.builds_compiled,
            "found": bool(result.first_bad and result.first_bad.key == kern.first_bad),
            "ok": result.builds_compiled == 0 and set(sources) == {"downloaded"}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.bench_remote", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--commits", type=int, default=12, help="first-parent commits of the bisected component")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    run_registry = _registry()
    base = Path(tempfile.mkdtemp(prefix="toolchain-bench-remote-"))
    try:
        with run_registry(base / "registry") as reg:
            remote = f"oci://{reg.address}/bench"
            demo = demo_stack(base, remote, args.rounds)
            bis = bisect_from_remote(base, remote, args.commits)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    if args.json:
        print(json.dumps({"ok": demo["ok"] and bis["ok"], "demo": demo, "bisect": bis}, indent=2))
    else:
        print(f"P7 demo stack (3 components), median of {demo['rounds']}:")
        print(f"  empty local cache, warm remote   {demo['empty_cache_from_remote_s']:7.2f} s")
        print(f"  warm local cache                 {demo['warm_local_s']:7.2f} s")
        print(f"  ratio remote/local               {demo['ratio']:7.3f}x   (goal <= 2x)")
        print(f"  new machine (no cache dir at all) {demo['new_machine_from_remote_s']:6.2f} s   "
              f"{demo['new_machine_ratio']:.3f}x of warm local")
        print(f"P7 bisect of {bis['commits']} commits of a C extension, all prebuilt into the registry:")
        print(f"  prebuild ({bis['prebuilt']} commits, pushed)    {bis['prebuild_s']:7.2f} s")
        print(f"  bisect on a clean machine        {bis['bisect_s']:7.2f} s, {bis['steps']} steps, "
              f"wheels {', '.join(sorted(set(bis['step_sources'])))}")
        print(f"  compiles                         {bis['builds_compiled']:7d}     (goal 0)   "
              f"first bad found: {bis['found']}")
    return 0 if demo["ok"] and bis["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
