"""What runs INSIDE the target (host or container) around a build: a self-contained script, stdlib only,
sent as `python -c SOURCE ...` (the package is not installed in a container).

    python -c SOURCE resources [ROOT]          print the raw memory/CPU readings (cgroup files, meminfo) as JSON
    python -c SOURCE build RESULT -- ARGV...   run ARGV through the compiler cache and measure it; write RESULT

`build` reads its settings from the environment (set by toolchain.build.ccache):
  TOOLCHAIN_CCACHE            the ccache binary ("" or unset: no compiler cache)
  TOOLCHAIN_CCACHE_REQUIRED   "1": a ccache that does not run is an error (exit 3), else the build runs uncached
  CCACHE_DIR ...              ccache's own settings; CCACHE_DIR must be writable with room to spare, else the build
                              runs uncached (a cache never fails a build)
It puts a directory first on PATH holding ccache under the names of the C/C++ compilers found on PATH (so a
setuptools or Makefile build goes through it) and an `sccache` that runs ccache (or, with no cache, the
compiler itself): sccache does not support Intel's compilers, and vllm-xpu-kernels' setup.py picks sccache
whenever one is on PATH. RESULT (JSON) holds wall and CPU seconds, the peak memory of the whole process tree
(sampled PSS, which counts shared pages once, else RSS; and the cgroup's own peak when the build has the cgroup to itself, as in a fresh container, and raised it),
the ccache version and this build's hits and misses (from a CCACHE_STATSLOG of its own). While the build runs,
RESULT.live holds the peak so far and the counts so far, every 2 s (the tool's heartbeat reads it).
"""

from __future__ import annotations  # the target's python3 may be 3.9: annotations stay unevaluated

import contextlib
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import TypedDict

COMPILERS = ("cc", "c++", "gcc", "g++", "clang", "clang++", "icx", "icpx")
MIN_FREE = 256 * 1024 * 1024  # a cache directory with less room than this counts as full
HITS = ("direct_cache_hit", "preprocessed_cache_hit")
MISSES = ("cache_miss",)
LAUNCHERS = ("CMAKE_C_COMPILER_LAUNCHER", "CMAKE_CXX_COMPILER_LAUNCHER")
LIVE_SUFFIX = ".live"  # RESULT.live: the peak so far and this build's ccache counts, while it runs
LIVE_EVERY = 2.0       # seconds between its updates


# ---- resources ---------------------------------------------------------------------------------------

class Readings(TypedDict):
    """What `gather` prints: raw file texts keyed by path relative to the root, and the usable CPUs."""

    files: dict[str, str]
    cpus: int


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def _ancestors(path: str) -> list[str]:
    parts = [p for p in path.split("/") if p]
    return ["/" + "/".join(parts[:i]) if i else "" for i in range(len(parts), -1, -1)]


def gather(root: str = "/") -> Readings:
    """Raw readings, keyed by path relative to `root`; toolchain.build.jobs parses them."""
    files: dict[str, str] = {}

    def take(rel: str) -> None:
        text = _read(os.path.join(root, rel))
        if text is not None:
            files[rel] = text

    take("proc/meminfo")
    take("proc/self/cgroup")
    for line in (files.get("proc/self/cgroup") or "").splitlines():
        hid, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hid == "0" and not controllers:
            for a in _ancestors(path):
                for name in ("memory.max", "memory.current", "memory.stat", "memory.peak", "cpu.max"):
                    take(f"sys/fs/cgroup{a}/{name}")
        elif "memory" in controllers.split(","):
            for a in _ancestors(path):
                for name in ("memory.limit_in_bytes", "memory.usage_in_bytes", "memory.stat"):
                    take(f"sys/fs/cgroup/memory{a}/{name}")
        elif "cpu" in controllers.split(","):
            mount = "cpu,cpuacct" if os.path.isdir(os.path.join(root, "sys/fs/cgroup/cpu,cpuacct")) else "cpu"
            for a in _ancestors(path):
                for name in ("cpu.cfs_quota_us", "cpu.cfs_period_us"):
                    take(f"sys/fs/cgroup/{mount}{a}/{name}")
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:
        cpus = os.cpu_count() or 1
    return {"files": files, "cpus": cpus}


# ---- the process tree ----------------------------------------------------------------------------------

def _tree_memory(top: int) -> tuple[int, str]:
    """Memory of `top` and all its descendants (from /proc): their PSS, so that the pages they share (the
    compiler's binary, libc) count once; their RSS where PSS cannot be read. (bytes, "pss" | "rss")"""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        stat = _read(f"/proc/{name}/stat")
        if not stat:
            continue
        fields = stat.rsplit(")", 1)[-1].split()
        if len(fields) > 2:
            children.setdefault(int(fields[1]), []).append(int(name))
    page = os.sysconf("SC_PAGE_SIZE")
    total, kind, todo = 0, "pss", [top]
    while todo:
        pid = todo.pop()
        rollup = _read(f"/proc/{pid}/smaps_rollup")
        pss = [line.split()[1] for line in (rollup or "").splitlines() if line.startswith("Pss:")]
        if pss:
            total += int(pss[0]) * 1024
        else:
            statm = _read(f"/proc/{pid}/statm")
            if statm:
                total += int(statm.split()[1]) * page
                kind = "rss"
        todo.extend(children.get(pid, ()))
    return total, kind


def _own_cgroup() -> tuple[str, bool]:
    """(peak file or "", dedicated): the cgroup file holding its peak memory, and whether nothing but this process,
    its ancestors and pid 1 lives in the cgroup (a fresh container), so that its peak is the build's."""
    cg = _read("/proc/self/cgroup") or ""
    procs, peak = "", ""
    for line in cg.splitlines():
        hid, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hid == "0" and not controllers:
            for base in (f"/sys/fs/cgroup{path}", "/sys/fs/cgroup"):
                if os.path.exists(f"{base}/memory.peak"):
                    peak, procs = f"{base}/memory.peak", f"{base}/cgroup.procs"
                    break
        elif "memory" in controllers.split(","):
            for base in (f"/sys/fs/cgroup/memory{path}", "/sys/fs/cgroup/memory"):
                if os.path.exists(f"{base}/memory.max_usage_in_bytes"):
                    peak, procs = f"{base}/memory.max_usage_in_bytes", f"{base}/cgroup.procs"
                    break
        if peak:
            break
    if not peak:
        return "", False
    mine, pid = {1}, os.getpid()
    while pid > 1:
        mine.add(pid)
        stat = _read(f"/proc/{pid}/stat")
        if not stat:
            break
        pid = int(stat.rsplit(")", 1)[-1].split()[1])
    members = {int(p) for p in (_read(procs) or "").split() if p.isdigit()}
    return peak, bool(members) and members <= mine


# ---- the compiler cache -----------------------------------------------------------------------------------

def _writable(folder: str) -> str:
    try:
        os.makedirs(folder, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".probe-", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        return f"cannot write to {folder}: {exc.strerror or exc}"
    free = shutil.disk_usage(folder).free
    if free < MIN_FREE:
        return f"{folder} is full ({free // (1024 * 1024)} MiB free)"
    return ""


def _version(ccache: str, env: dict[str, str]) -> tuple[str | None, str]:
    try:
        out = subprocess.run([ccache, "--version"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             timeout=60, check=False).stdout.decode("utf-8", "replace")
    except (OSError, subprocess.SubprocessError) as exc:
        return None, str(exc)
    first = out.splitlines()[0] if out.strip() else ""
    if not first.startswith("ccache version"):
        return None, first or "no output"
    return first.split()[-1], ""


def _shim_dir(ccache: str, env: dict[str, str]) -> str:
    """A directory for the front of PATH: ccache under the compilers' names, and an `sccache` that runs
    ccache (or the compiler, when `ccache` is empty)."""
    folder = tempfile.mkdtemp(prefix="toolchain-cc-")
    if ccache:
        names = set(COMPILERS)
        import sysconfig

        for var in ("CC", "CXX"):
            word = (sysconfig.get_config_var(var) or "").split()
            if word and "/" not in word[0]:
                names.add(word[0])
        real = os.path.realpath(ccache)
        for name in sorted(names):
            found = shutil.which(name, path=env.get("PATH", ""))
            if found and os.path.realpath(found) != real:
                os.symlink(ccache, os.path.join(folder, name))
    shim = os.path.join(folder, "sccache")
    with open(shim, "w") as f:
        f.write("#!/bin/sh\n# sccache does not support Intel's compilers: the toolchain routes it to ccache\n"
                + (f'exec "{ccache}" "$@"\n' if ccache else 'exec "$@"\n'))
    os.chmod(shim, 0o755)
    return folder


def _count(statslog: str) -> tuple[int, int]:
    hits = misses = 0
    for line in (_read(statslog) or "").splitlines():
        line = line.strip()
        if line in HITS:
            hits += 1
        elif line in MISSES:
            misses += 1
    return hits, misses


def build(result_path: str, argv: list[str]) -> int:
    env = dict(os.environ)
    ccache = env.pop("TOOLCHAIN_CCACHE", "")
    required = env.pop("TOOLCHAIN_CCACHE_REQUIRED", "") == "1"
    report: dict[str, str | int] = {"launcher": "none", "version": "", "hits": 0, "misses": 0, "note": ""}
    if ccache:
        if "/" not in ccache:
            ccache = shutil.which(ccache, path=env.get("PATH", "")) or ""
        version, why = _version(ccache, env) if ccache else (None, "not found on PATH")
        if version is None:
            if required:
                _write(result_path, {"error": f"ccache does not run in the target: {why}"})
                return 3
            report["note"] = f"uncached: ccache does not run ({why})"
            ccache = ""
        else:
            problem = _writable(env.get("CCACHE_DIR") or os.path.expanduser("~/.cache/ccache"))
            if problem:
                report["note"] = f"uncached: {problem}"
                ccache = ""
            else:
                report.update(launcher="ccache", version=version)
    if not ccache:
        for var in LAUNCHERS:
            env.pop(var, None)
        env["CCACHE_DISABLE"] = "1"  # also for a project that calls ccache by itself
    shims = _shim_dir(ccache, env)
    env["PATH"] = shims + os.pathsep + env.get("PATH", "")
    statslog = os.path.join(shims, "stats.log") if ccache else ""
    if statslog:
        env["CCACHE_STATSLOG"] = statslog  # this build's own statistics, whatever else shares the cache
    peak_file, dedicated = _own_cgroup()
    peak_before = _peak(peak_file) if dedicated else 0
    started = time.monotonic()
    child = subprocess.Popen(argv, env=env)
    def forward(sig: int, _frame: object) -> None:
        child.send_signal(sig)

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, forward)
    peak, kind = [0], ["pss"]
    done = threading.Event()
    live = result_path + LIVE_SUFFIX

    def sample() -> None:
        shown = 0.0
        while not done.is_set():
            try:
                now, how = _tree_memory(child.pid)
                peak[0] = max(peak[0], now)
                if how == "rss":
                    kind[0] = "rss"
            except (OSError, ValueError):
                pass
            if time.monotonic() - shown >= LIVE_EVERY:  # for the tool's heartbeat, while the build runs
                shown = time.monotonic()
                hits, misses = _count(statslog) if statslog else (0, 0)
                with contextlib.suppress(OSError):
                    _write(live, {"peak_bytes": peak[0], "ccache": bool(statslog), "hits": hits, "misses": misses})
            done.wait(0.2)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    code = child.wait()
    done.set()
    sampler.join()
    with contextlib.suppress(OSError):
        os.unlink(live)
    wall = time.monotonic() - started
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    if statslog:
        report["hits"], report["misses"] = _count(statslog)
    # The cgroup's peak is the build's only when the build set it: a cgroup outlives builds (exec into a running
    # container, the tool as a container's main process), and its peak may be an earlier build's.
    peak_after = _peak(peak_file) if dedicated else 0
    cgroup_peak = peak_after if peak_after > peak_before else 0
    shutil.rmtree(shims, ignore_errors=True)
    _write(result_path, {
        "compiler_cache": report,
        "metrics": {"wall_seconds": round(wall, 3), "cpu_seconds": round(usage.ru_utime + usage.ru_stime, 3),
                    # a build too short to be sampled still has its largest process's own peak
                    "peak_sampled_bytes": max(peak[0], usage.ru_maxrss * 1024), "sampled": kind[0],
                    "peak_cgroup_bytes": cgroup_peak},
        "returncode": code,
    })
    return code if code >= 0 else 128 - code


def _peak(peak_file: str) -> int:
    try:
        return int((_read(peak_file) or "0").strip())
    except ValueError:
        return 0


def _write(path: str, data: dict[str, object]) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(data, f)
    os.replace(tmp, path)


def main(args: list[str]) -> int:
    if args and args[0] == "resources":
        print(json.dumps(gather(args[1] if len(args) > 1 else "/")))
        return 0
    if len(args) >= 4 and args[0] == "build" and args[2] == "--":
        return build(args[1], args[3:])
    sys.stderr.write("usage: resources [ROOT] | build RESULT -- ARGV...\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
