"""Build-cost benchmarks (issue 11; `nox -s bench`), measured side by side in one run, printed as ratios.

P5  a synthetic C++ component (`--tus` translation units of template work, commits that change one file
    each) built with `toolchain build`: the build of commit k+1 right after commit k, with the compiler cache
    warm, against the cold build of commit k.                                goal: <= 15 %
    The same pair with --no-compiler-cache.                                  about 100 %
P8  two machines, one shared compiler cache (a real redis-server on 127.0.0.1, tests/support/redis_server.py):
    machine A (CI: read-write) builds commit k; machine B, a fresh --cache-dir (no local compiler cache, no
    wheel cache), builds commit k+1 with the store (read-only), beside B's cold build without it and B's build
    with the store stopped.                       goals: remote hits >= 90 % of the unchanged units;
                                                  wall <= 20 % of B's cold build; stopped: within 10 % of cold,
                                                  one warning
P6  in a podman container whose `--memory` allows 2 jobs at the declared per-job memory (measured: the
    peak of one compile of a memory-heavy C unit, x1.5), the tool sizes the build to 2 jobs and the recorded
    peak stays under the limit; printed beside what the build asks for without the tool's sizing.

Sizes are parameters: run them small while developing (the machine is shared), e.g.
    python -m benchmarks.bench_cost --tus 8 --work 120 --no-p6
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any

from benchmarks.synthetic import Synthetic, make_synthetic, recipe_text

ROOT = Path(__file__).resolve().parent.parent
MiB = 1024 ** 2


def toolchain_build(recipe: Path, out: Path, cache: Path, *extra: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    """`toolchain build`; the synthetic component's lock entry plus the command's own wall seconds and the
    warnings it printed."""
    started = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "toolchain", "build", "--recipe", str(recipe), "--out", str(out),
                        "--cache-dir", str(cache), "--json", *extra], cwd=ROOT, capture_output=True, text=True,
                       env={**os.environ, **(env or {})})
    seconds = time.perf_counter() - started
    if r.returncode != 0:
        raise SystemExit(f"toolchain build failed ({r.returncode}):\n{r.stderr[-3000:]}")
    (comp,) = json.loads(r.stdout)["components"]
    warned = ["warning:" + w for w in " ".join(r.stderr.split()).split("warning:")[1:]]
    return dict(comp, command_seconds=seconds, warnings=warned)


def write_recipe(work: Path, name: str, text: str) -> Path:
    path = work / "recipes" / f"{name}.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def p5(work: Path, synth: Synthetic, k: int) -> dict[str, Any]:
    a, b = synth.commits[k], synth.commits[k + 1]
    on_k, on_next = (write_recipe(work, f"on-{i}", recipe_text(synth, c)) for i, c in ((k, a), (k + 1, b)))
    # interleaved: cold with cache, cold without, then each one's next commit
    cold_on = toolchain_build(on_k, work / "out-on-k", work / "cache-on")
    cold_off = toolchain_build(on_k, work / "out-off-k", work / "cache-off", "--no-compiler-cache")
    warm_on = toolchain_build(on_next, work / "out-on-next", work / "cache-on")
    next_off = toolchain_build(on_next, work / "out-off-next", work / "cache-off", "--no-compiler-cache")

    def wall(c: dict[str, Any]) -> float:
        seconds: float = c["metrics"]["wall-seconds"]
        return seconds

    cc = warm_on["compiler-cache"]
    hits, misses = cc["hits"], cc["misses"]
    return {
        "cold_seconds": wall(cold_on), "warm_next_seconds": wall(warm_on),
        "ratio_cached": wall(warm_on) / wall(cold_on),
        "hit_rate": hits / (hits + misses) if hits + misses else 0.0, "hits": hits, "misses": misses,
        "cold_off_seconds": wall(cold_off), "next_off_seconds": wall(next_off),
        "ratio_uncached": wall(next_off) / wall(cold_off),
        "cold_cpu_seconds": cold_on["metrics"]["cpu-seconds"], "warm_next_cpu_seconds": warm_on["metrics"]["cpu-seconds"],
        "ratio_cached_cpu": warm_on["metrics"]["cpu-seconds"] / cold_on["metrics"]["cpu-seconds"],
        "same_wheel": warm_on["sha256"] == next_off["sha256"],
        "command_seconds": {"cold": cold_on["command_seconds"], "warm_next": warm_on["command_seconds"]},
    }


def single_compile_peak(synth: Synthetic) -> int:
    """Peak RSS of one compile of the first unit (the figure a component's `memory-per-job` declares)."""
    src = synth.path / "src" / ("tu0.cpp" if synth.language == "c++" else "tu0.c")
    with tempfile.TemporaryDirectory() as tmp:
        started = subprocess.run([sys.executable, "-c", (
            "import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True); "
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"),
            "gcc", "-O1", "-c", str(src), "-o", f"{tmp}/x.o"], capture_output=True, text=True, check=True)
    return int(started.stdout.strip()) * 1024


def p6(work: Path, image: str, *, tus: int, work_units: int, run_unsized: bool) -> dict[str, Any]:
    synth = make_synthetic(work / "repo-c", language="c", tus=tus, commits=1, work=work_units, reps=1)
    per_job = int(single_compile_peak(synth) * 1.5)
    limit = int(per_job * 2.5)  # room for 2 jobs (and the pip process around them), not for 3
    target = {"runtime": "podman", "image": image, "python": "python3", "run-args": [f"--memory={limit}"]}
    sized = write_recipe(work, "p6", recipe_text(synth, synth.commits[0], target=target,
                                                 build={"memory-per-job": f"{per_job // 1024}KiB"}))
    plan = json.loads(subprocess.run([sys.executable, "-m", "toolchain", "plan", "--recipe", str(sized), "--json"],
                                     cwd=ROOT, capture_output=True, text=True, check=True).stdout)
    built = toolchain_build(sized, work / "out-p6", work / "cache-p6", "--no-compiler-cache")
    with zipfile.ZipFile(built["path"]) as z:
        used = int(z.read("synthetic/build_jobs.txt"))
    figures: dict[str, Any] = {
        "per_job_bytes": per_job, "limit_bytes": limit, "available_bytes": plan["resources"]["memory-bytes"],
        "cpus": plan["resources"]["cpus"], "jobs": built["jobs"], "used_jobs": used,
        "peak_sampled_bytes": built["metrics"]["peak-sampled-bytes"], "peak_bytes": built["metrics"]["peak-memory-bytes"],
        "peak_source": built["metrics"]["peak-memory-source"],
        "unsized_default_jobs": plan["resources"]["cpus"], "old_recipe_pin": 8,
    }
    if run_unsized:  # the old ark-latest pin, MAX_JOBS = "8": the tool warns and the build asks for 8 jobs
        pinned = write_recipe(work, "p6-pinned", recipe_text(
            synth, synth.commits[0], target=target, build={"memory-per-job": f"{per_job // 1024}KiB", "jobs": 8}))
        try:
            unsized = toolchain_build(pinned, work / "out-p6-8", work / "cache-p6-8", "--no-compiler-cache")
            figures["pinned8_peak_bytes"] = unsized["metrics"]["peak-memory-bytes"]
        except SystemExit as exc:
            lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
            why = [line for line in lines if "signal" in line or "Killed" in line or "killed" in line]
            figures["pinned8_failed"] = (why or lines[-1:] or ["failed"])[0][:200]
    return figures


def p8(work: Path, synth: Synthetic, k: int, reps: int = 2) -> dict[str, Any]:
    """Machine A fills the store; then, `reps` times interleaved, machine B fresh: cold without the store, with
    it, with a store that was stopped (a second server, started and stopped: nothing listens on its port).
    Each figure is the median of its reps (the machine is shared: interleaving spreads the noise)."""
    sys.path.insert(0, str(ROOT))
    from statistics import median

    from tests.support.redis_server import run_redis

    on_k, on_next = (write_recipe(work, f"p8-{i}", recipe_text(synth, synth.commits[i])) for i in (k, k + 1))
    plain = {"TOOLCHAIN_COMPILER_CACHE_REMOTE": "none", "CI": ""}
    with run_redis(work / "p8-gone") as gone:
        down = {"TOOLCHAIN_COMPILER_CACHE_REMOTE": gone.url, "CI": ""}
    runs: dict[str, list[dict[str, Any]]] = {"cold": [], "shared": [], "stopped": []}
    with run_redis(work / "p8-redis") as store:
        shared = {"TOOLCHAIN_COMPILER_CACHE_REMOTE": store.url}
        a = toolchain_build(on_k, work / "p8-out-a", work / "p8-cache-a", env={**shared, "CI": "true"})
        keys = store.keys()
        for rep in range(reps):
            for name, env in (("cold", plain), ("shared", {**shared, "CI": ""}), ("stopped", down)):
                runs[name].append(toolchain_build(on_next, work / f"p8-out-{name}-{rep}",
                                                  work / f"p8-cache-{name}-{rep}", env=env))
        assert store.keys() == keys, "machine B (read-only) wrote to the store"

    def wall(name: str) -> float:
        return float(median(c["metrics"]["wall-seconds"] for c in runs[name]))

    def cpu(name: str) -> float:
        return float(median(c["metrics"]["cpu-seconds"] for c in runs[name]))

    cc = runs["shared"][0]["compiler-cache"]
    unchanged = synth.tus  # commit k+1 changes one unit of tus + 1 (the module's own)
    remote_hits = min(c["compiler-cache"].get("remote-hits", 0) for c in runs["shared"])
    return {
        "reps": reps, "a_seconds": a["metrics"]["wall-seconds"], "a_misses": a["compiler-cache"]["misses"],
        "store_keys": keys, "cold_seconds": wall("cold"), "shared_seconds": wall("shared"),
        "stopped_seconds": wall("stopped"), "walls": {n: [c["metrics"]["wall-seconds"] for c in r] for n, r in runs.items()},
        "remote_hits": remote_hits, "hits": cc["hits"], "misses": cc["misses"], "unchanged": unchanged,
        "remote_hit_share": remote_hits / unchanged,
        "ratio_shared": wall("shared") / wall("cold"), "ratio_stopped": wall("stopped") / wall("cold"),
        "ratio_shared_cpu": cpu("shared") / cpu("cold"), "ratio_stopped_cpu": cpu("stopped") / cpu("cold"),
        "stopped_warnings": runs["stopped"][0]["warnings"],
        "stopped_warning_counts": [len(c["warnings"]) for c in runs["stopped"]],
        "shared_warnings": [w for c in runs["shared"] for w in c["warnings"]],
        "same_wheel": len({c["sha256"] for r in runs.values() for c in r}) == 1,
    }


def p8_ok(r: dict[str, Any]) -> bool:
    return (r["remote_hit_share"] >= 0.9 and r["ratio_shared"] <= 0.2 and r["ratio_stopped"] <= 1.1
            and set(r["stopped_warning_counts"]) == {1} and not r["shared_warnings"] and r["same_wheel"])


def podman_image() -> str:
    sys.path.insert(0, str(ROOT))
    from tests.support.debian_image import configure_containers_conf, ensure_image, podman_available

    configure_containers_conf()
    ok, why = podman_available()
    if not ok:
        raise RuntimeError(why)
    return ensure_image("podman")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.bench_cost", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tus", type=int, default=40, help="translation units of the synthetic component")
    ap.add_argument("--work", type=int, default=800,
                    help="template work per unit (types per instantiation run); 800 x 6: about 1.4 s of CPU per unit")
    ap.add_argument("--reps", type=int, default=6, help="instantiation runs per unit")
    ap.add_argument("--p6-tus", type=int, default=6)
    ap.add_argument("--p6-work", type=int, default=2000, help="P6: table entries per unit / 100")
    ap.add_argument("--p6-unsized", action="store_true", help="P6: also build with the old pin of 8 jobs")
    ap.add_argument("--no-p6", action="store_true", help="skip P6 (needs podman)")
    ap.add_argument("--no-p8", action="store_true", help="skip P8 (needs redis-server)")
    ap.add_argument("--only-p8", action="store_true", help="run P8 alone")
    ap.add_argument("--p8-reps", type=int, default=2, help="P8: interleaved runs of each of B's builds")
    ap.add_argument("--keep", type=Path, help="work here and keep it")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    work = args.keep or Path(tempfile.mkdtemp(prefix="bench-cost-"))
    report: dict[str, Any] = {}
    try:
        synth = make_synthetic(work / "repo", tus=args.tus, commits=3, work=args.work, reps=args.reps)
        if not args.only_p8:
            report["p5"] = p5(work, synth, 1)
        if not args.no_p8:
            from tests.support.redis_server import redis_available

            usable, why = redis_available()
            report["p8"] = p8(work, synth, 1, args.p8_reps) if usable else {"skipped": why}
        if not args.no_p6 and not args.only_p8:
            try:
                image = podman_image()
            except Exception as exc:
                report["p6"] = {"skipped": f"podman unusable: {exc}"}
            else:
                report["p6"] = p6(work, image, tus=args.p6_tus, work_units=args.p6_work,
                                  run_unsized=args.p6_unsized)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    ok = "p5" not in report or (report["p5"]["ratio_cached"] <= 0.15 and report["p5"]["same_wheel"])
    if "hits" in report.get("p8", {}):
        ok = ok and p8_ok(report["p8"])
    if "jobs" in report.get("p6", {}):
        p = report["p6"]
        ok = ok and p["jobs"] == min(2, p["cpus"]) and p["used_jobs"] == p["jobs"] and \
            max(p["peak_bytes"], p["peak_sampled_bytes"]) < p["limit_bytes"]
    if args.json:
        print(json.dumps(report, indent=2))
        return 0 if ok else 1
    print_p5(report, args)
    print_p8(report, args)
    print_p6(report)
    return 0 if ok else 1


def print_p8(report: dict[str, Any], args: argparse.Namespace) -> None:
    r = report.get("p8")
    if not r:
        return
    if "skipped" in r:
        print(f"P8: skipped ({r['skipped']})")
        return
    print(f"P8: two machines, one shared compiler cache (redis-server on 127.0.0.1); {args.tus} units; build wall "
          f"seconds, medians of {r['reps']} interleaved runs")
    print(f"  A (CI, read-write) builds commit k {r['a_seconds']:8.2f} s   ({r['a_misses']} misses; "
          f"{r['store_keys']} keys in the store)")
    print(f"  B cold, no shared cache, k+1      {r['cold_seconds']:8.2f} s   (runs: {r['walls']['cold']})")
    print(f"  B fresh + shared cache, k+1       {r['shared_seconds']:8.2f} s   = {100 * r['ratio_shared']:.1f}% of cold "
          f"(goal <= 20%; CPU {100 * r['ratio_shared_cpu']:.1f}%); remote hits {r['remote_hits']} of {r['unchanged']} "
          f"unchanged units = {100 * r['remote_hit_share']:.0f}% (goal >= 90%); {r['misses']} misses")
    print(f"  B fresh, the store stopped, k+1   {r['stopped_seconds']:8.2f} s   = {100 * r['ratio_stopped']:.1f}% of cold "
          f"(goal <= 110%; CPU {100 * r['ratio_stopped_cpu']:.1f}%); warnings per run {r['stopped_warning_counts']} "
          "(goal: 1)")
    for w in r["stopped_warnings"]:
        print(f"    {w[:220]}")
    print(f"  same wheel in every run           {r['same_wheel']}")


def print_p5(report: dict[str, Any], args: argparse.Namespace) -> None:
    r = report.get("p5")
    if not r:
        return
    print(f"P5: synthetic C++ component, {args.tus} units (work {args.work} x {args.reps}); build wall seconds")
    print(f"  cold build of commit k            {r['cold_seconds']:8.2f} s")
    print(f"  commit k+1 after k, ccache warm   {r['warm_next_seconds']:8.2f} s   = {100 * r['ratio_cached']:.1f}% "
          f"of cold (goal <= 15%); hit rate {100 * r['hit_rate']:.0f}% ({r['hits']} hits, {r['misses']} misses)")
    print(f"  the same in CPU seconds           {r['cold_cpu_seconds']:8.2f} s / {r['warm_next_cpu_seconds']:.2f} s   "
          f"= {100 * r['ratio_cached_cpu']:.1f}%   (wall time is noisy on a shared machine)")
    print(f"  cache off: cold k / next k+1      {r['cold_off_seconds']:8.2f} s / {r['next_off_seconds']:.2f} s   "
          f"= {100 * r['ratio_uncached']:.1f}%")
    print(f"  same wheel with and without cache {r['same_wheel']}")


def print_p6(report: dict[str, Any]) -> None:
    p = report.get("p6")
    if p and "jobs" in p:
        print(f"P6: podman --memory={p['limit_bytes'] // MiB} MiB, {p['per_job_bytes'] // MiB} MiB declared per job, "
              f"{p['cpus']} CPUs")
        print(f"  available as the tool saw it      {p['available_bytes'] // MiB} MiB")
        print(f"  jobs the tool chose               {p['jobs']}; the build compiled with {p['used_jobs']}   (goal: 2)")
        print(f"  recorded peak ({p['peak_source']})     {p['peak_bytes'] // MiB} MiB   "
              f"< limit {p['limit_bytes'] // MiB} MiB: {p['peak_bytes'] < p['limit_bytes']}; the process tree's "
              f"sampled PSS {p['peak_sampled_bytes'] // MiB} MiB")
        print(f"  without the tool's sizing         the build's own default asks for {p['unsized_default_jobs']} "
              f"(one per CPU); the old recipe pinned {p['old_recipe_pin']} "
              f"(= {p['old_recipe_pin'] * p['per_job_bytes'] // MiB} MiB)")
        if "pinned8_peak_bytes" in p:
            print(f"  with the pin of 8                 peak {p['pinned8_peak_bytes'] // MiB} MiB")
        if "pinned8_failed" in p:
            print(f"  with the pin of 8                 the build failed: {p['pinned8_failed']}")
    elif p:
        print(f"P6: skipped ({p['skipped']})")


if __name__ == "__main__":
    raise SystemExit(main())
