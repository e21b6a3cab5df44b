"""What runs INSIDE the target (host or container) around a build: a self-contained script, stdlib only,
sent as `python -c SOURCE ...` (the package is not installed in a container).

    python -c SOURCE resources [ROOT]          print the raw memory/CPU readings (cgroup files, meminfo) as JSON
    python -c SOURCE build RESULT -- ARGV...   run ARGV through the compiler cache and measure it; write RESULT
(the recipe's default command as pip makes its one build call, without pip: build/pep517call.py, run as
ARGV of `build`)

`build` reads its settings from the environment (set by toolchain.build.ccache):
  TOOLCHAIN_CCACHE            the ccache binary ("" or unset: no compiler cache)
  TOOLCHAIN_CCACHE_REQUIRED   "1": a ccache that does not run is an error (exit 3), else the build runs uncached
  TOOLCHAIN_CCACHE_REMOTE     HOST:PORT of the shared compiler cache given in CCACHE_REMOTE_STORAGE: connected to
                              once (REMOTE_PROBE seconds at most) before the build; one that cannot be reached
                              from here is left out (the build uses the local cache; RESULT says why)
  CCACHE_DIR ...              ccache's own settings; CCACHE_DIR must be writable with room to spare, else the build
                              runs uncached (a cache never fails a build)
  TOOLCHAIN_LINK_CACHE        the link cache's folder, TOOLCHAIN_LINK_SCRIPT its script (linkcache.py): with ccache
                              in use and the folder writable, CMake's links go through it (CMAKE_<LANG>_LINKER_LAUNCHER,
                              unless the build sets its own); RESULT counts its link_hits and link_misses
It puts a directory first on PATH holding ccache under the names of the C/C++ compilers found on PATH (so a
setuptools or Makefile build goes through it) and an `sccache` that runs ccache (or, with no cache, the
compiler itself): sccache does not support Intel's compilers, and vllm-xpu-kernels' setup.py picks sccache
whenever one is on PATH. RESULT (JSON) holds wall and CPU seconds, the peak memory of the whole process tree
(sampled PSS, which counts shared pages once, else RSS; and the cgroup's own peak when the build has the cgroup to itself, as in a fresh container, and raised it),
the ccache version and this build's hits (local and remote) and misses (from a CCACHE_STATSLOG of its own). While the build runs,
RESULT.live holds the peak so far and the counts so far, every 2 s (the tool's heartbeat reads it).
"""

from __future__ import annotations  # the target's python3 may be 3.9: annotations stay unevaluated

import contextlib
import json
import os
import resource
import shutil
import signal
import sys
import threading
import time
from typing import TypedDict

COMPILERS = ("cc", "c++", "gcc", "g++", "clang", "clang++", "icx", "icpx")
MIN_FREE = 256 * 1024 * 1024  # a cache directory with less room than this counts as full
HITS = ("direct_cache_hit", "preprocessed_cache_hit")
MISSES = ("cache_miss",)
WHERE = {"local_storage_hit": "local_hits", "remote_storage_hit": "remote_hits",
         "remote_storage_error": "remote_errors", "remote_storage_timeout": "remote_errors"}
REMOTE_PROBE = 1.0  # seconds to connect to a shared compiler cache before the build
LAUNCHERS = ("CMAKE_C_COMPILER_LAUNCHER", "CMAKE_CXX_COMPILER_LAUNCHER")
LINK_LAUNCHERS = ("CMAKE_C_LINKER_LAUNCHER", "CMAKE_CXX_LINKER_LAUNCHER")  # CMake >= 3.21 reads them
LIVE_SUFFIX = ".live"  # RESULT.live: the peak so far and this build's ccache counts, while it runs
LIVE_EVERY = 2.0       # seconds between its updates
# the memory sampler's walk of /proc (~5-11 ms CPU each): every 0.2 s for a build's first 30 s, then every 1 s
# (every 0.2 s through a 45-minute oneDNN build it cost 145 CPU-s, ~7% of the build's CPU)
SAMPLE_FAST, SAMPLE_FAST_FOR, SAMPLE_SLOW = 0.2, 30.0, 1.0


# ---- resources ---------------------------------------------------------------------------------------

# What `gather` prints: raw file texts keyed by path relative to the root, and the usable CPUs. (The functional
# form, with the types themselves: a class form's annotations are strings here, and TypedDict compiles each.)
Readings = TypedDict("Readings", {"files": dict[str, str], "cpus": int})  # noqa: UP013


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
    import tempfile  # (here, not at the top, as subprocess: the host's `gather` makes no file)

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
    import subprocess  # (here, not at the top: the host's `gather` starts no process)

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
    import tempfile

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


def _count(statslog: str) -> dict[str, int]:
    """This build's counts: hits, misses, and the hits by storage (local_hits, remote_hits), remote_errors."""
    counts = {"hits": 0, "misses": 0, "local_hits": 0, "remote_hits": 0, "remote_errors": 0}
    for line in (_read(statslog) or "").splitlines():
        line = line.strip()
        if line in HITS:
            counts["hits"] += 1
        elif line in MISSES:
            counts["misses"] += 1
        elif line in WHERE:
            counts[WHERE[line]] += 1
    return counts


def _link_cache(env: dict[str, str], shims: str) -> str:
    """Route CMake's links through the link cache (linkcache.py) when it is given and writable: its log's path."""
    store, script = env.pop("TOOLCHAIN_LINK_CACHE", ""), env.pop("TOOLCHAIN_LINK_SCRIPT", "")
    if not store or not script or _writable(store):
        return ""
    for var in LINK_LAUNCHERS:
        env.setdefault(var, f"{sys.executable};{script}")
    env["TOOLCHAIN_LINK_CACHE"] = store
    env["TOOLCHAIN_LINK_STATSLOG"] = os.path.join(shims, "links.log")
    return env["TOOLCHAIN_LINK_STATSLOG"]


def _count_links(log: str) -> dict[str, int]:
    """This build's link cache hits and misses (its log's "hit ..." and "miss ..." lines)."""
    counts = {"link_hits": 0, "link_misses": 0}
    with contextlib.suppress(OSError), open(log) as f:
        for line in f:
            word = line.split(" ", 1)[0]
            if word in ("hit", "miss"):
                counts["link_hits" if word == "hit" else "link_misses"] += 1
    return counts


def _unreachable(address: str) -> str:
    """Why the shared store at HOST:PORT cannot be reached from here ("" when it can)."""
    import socket

    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=REMOTE_PROBE).close()
    except (OSError, ValueError) as exc:
        return (f"cannot connect to {address} from the build's target within {REMOTE_PROBE:g} s "
                f"({getattr(exc, 'strerror', None) or exc.__class__.__name__})")
    return ""


# ---- the build interpreter's link line ---------------------------------------------------------------------

# The variables setuptools links extension modules with, each taken from the environment over the interpreter's
# sysconfig (setuptools' unix compiler `configure_system`, before 72.2 `sysconfig.customize_compiler`): LDSHARED
# (C, and before 72.2 C++ too) and LDCXXSHARED (C++, from 72.2). BLDSHARED is CPython's own build's: setuptools
# never reads it from the environment, so it is not exported.
LINK_VARS = ("LDSHARED", "LDCXXSHARED")
RPATH_OPTIONS = ("-rpath", "--rpath", "-R")


def _under(folder: str, prefixes: list[str]) -> bool:
    return any(folder == p or folder.startswith(p.rstrip("/") + "/") for p in prefixes)


def interpreter_prefixes() -> list[str]:
    """The build interpreter's installation folders (its prefixes, links resolved), but `/` and `/usr`: a
    system interpreter's prefix holds every system library."""
    import sysconfig

    found = [sysconfig.get_config_var("prefix"), sysconfig.get_config_var("exec_prefix"), sys.base_prefix,
             sys.base_exec_prefix]
    out = [os.path.normpath(p) for f in found if f for p in (f, os.path.realpath(f))]
    return [p for p in dict.fromkeys(out) if p not in ("/", "/usr")]


def without_rpath(value: str, prefixes: list[str]) -> str:
    """`value` (a link command as sysconfig holds it) without its linker options `-rpath DIR`, `-rpath=DIR`,
    `--rpath`, `-R DIR`, `-RDIR` whose folder is under `prefixes` (`-Wl,...` words and `-Xlinker` pairs, a
    `-Wl,-rpath -Wl,DIR` pair too); every other word kept, `-L` and `-Wl,-rpath-link` among them."""
    words = value.split()
    ld: list[list[str]] = [w[4:].split(",") if w.startswith("-Wl,") else [] for w in words]
    for i, w in enumerate(words[:-1]):
        if w == "-Xlinker" and not ld[i + 1]:
            ld[i + 1] = [words[i + 1]]
    args = [(i, j) for i, parts in enumerate(ld) for j in range(len(parts))]
    drop: set[tuple[int, int]] = set()
    changed = False
    for n, (i, j) in enumerate(args):
        arg = ld[i][j]
        opt, eq, rest = arg.partition("=")
        if arg in RPATH_OPTIONS and n + 1 < len(args):
            folder, at = ld[args[n + 1][0]][args[n + 1][1]], [(i, j), args[n + 1]]
        elif eq and opt in RPATH_OPTIONS[:2]:
            folder, at = rest, [(i, j)]
        elif arg.startswith("-R") and len(arg) > 2:
            folder, at = arg[2:], [(i, j)]
        else:
            continue
        kept = [d for d in folder.split(":") if d and not _under(os.path.normpath(d), prefixes)]
        if kept == [d for d in folder.split(":") if d]:
            continue
        changed = True
        if kept:  # another folder beside the prefix's: it stays
            k = at[-1]
            ld[k[0]][k[1]] = (opt + "=" if eq else "") + ":".join(kept) if len(at) == 1 else ":".join(kept)
        else:
            drop.update(at)
    if not changed:
        return value
    out = []
    for i, w in enumerate(words):
        if not ld[i]:
            if not (w == "-Xlinker" and (i + 1, 0) in drop and not words[i + 1].startswith("-Wl,")):
                out.append(w)
            continue
        rest_args = [a for j, a in enumerate(ld[i]) if (i, j) not in drop]
        if rest_args:
            out.append("-Wl," + ",".join(rest_args) if w.startswith("-Wl,") else rest_args[0])
    return " ".join(out)


def link_env(env: dict[str, str]) -> dict[str, str]:
    """LDSHARED and LDCXXSHARED to export for the build: the interpreter's own without a RUNPATH into its prefix
    (pyenv's, a shared build's, conda's: `-Wl,-rpath,<prefix>/lib`), where it holds one and neither the recipe
    nor the user's environment sets the variable (theirs is used as set; the native audit then names such a
    RUNPATH). Extension modules do not link libpython on Linux (CPython 3.8+, bpo-21536), so that RUNPATH names
    nothing a module needs: in a wheel it only points into the build machine, and where the wheel runs it names
    nothing, or another library, the loader searches first. Where CC is set, setuptools (from 60) starts its
    LDSHARED with CC instead of sysconfig's CC, which an exported LDSHARED stops: the value exported does so too.
    CMake builds (pybind11) do not read LDSHARED."""
    import sysconfig

    if not sys.platform.startswith("linux"):
        return {}
    prefixes, out = interpreter_prefixes(), {}
    cc = sysconfig.get_config_var("CC") or ""
    for var in LINK_VARS:
        value = sysconfig.get_config_var(var) or ""
        if var in env or not value:
            continue
        stripped = without_rpath(value, prefixes)
        if stripped == value:
            continue
        if var == "LDSHARED" and "CC" in env and cc and stripped.startswith(cc):
            stripped = env["CC"] + stripped[len(cc):]
        out[var] = stripped
    return out


CPUS_VAR = "TOOLCHAIN_BUILD_CPUS"  # the tool's job count, as the cores the build may run on


def pin_cpus(wanted: str) -> int:
    """The build (this runner and what it starts) limited to the first N of the cores it may use, N = `wanted`:
    a build that picks its own job count from its affinity (ARK's setup.py: `sched_getaffinity`) then picks the
    tool's. Returns how many cores the build runs on (0 where the platform has no affinity)."""
    if not hasattr(os, "sched_getaffinity"):
        return 0
    allowed = sorted(os.sched_getaffinity(0))
    if wanted.isdigit() and 0 < int(wanted) < len(allowed):
        os.sched_setaffinity(0, allowed[:int(wanted)])
    return len(os.sched_getaffinity(0))


def build(result_path: str, argv: list[str]) -> int:
    """Run one component's build command inside the target, with the compiler cache chosen there; its exit code."""
    import subprocess

    env = dict(os.environ)
    ccache = env.pop("TOOLCHAIN_CCACHE", "")
    required = env.pop("TOOLCHAIN_CCACHE_REQUIRED", "") == "1"
    remote = env.pop("TOOLCHAIN_CCACHE_REMOTE", "")
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
                unreachable = _unreachable(remote) if remote and env.get("CCACHE_REMOTE_STORAGE") else ""
                if unreachable:
                    report["remote_note"] = unreachable
                    env.pop("CCACHE_REMOTE_STORAGE")
    if not ccache:
        for var in LAUNCHERS:
            env.pop(var, None)
        env["CCACHE_DISABLE"] = "1"  # also for a project that calls ccache by itself
    shims = _shim_dir(ccache, env)
    env["PATH"] = shims + os.pathsep + env.get("PATH", "")
    statslog = os.path.join(shims, "stats.log") if ccache else ""
    if statslog:
        env["CCACHE_STATSLOG"] = statslog  # this build's own statistics, whatever else shares the cache
    links = _link_cache(env, shims) if ccache else ""
    derived = link_env(env)
    for var, value in derived.items():
        print(f"# toolchain: {var}={value} (the build interpreter's, without its RUNPATH into its prefix)",
              flush=True)
    env.update(derived)
    cpus = pin_cpus(env.pop(CPUS_VAR, ""))
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
                counts = _count(statslog) if statslog else {}
                with contextlib.suppress(OSError):
                    _write(live, {"peak_bytes": peak[0], "ccache": bool(statslog), "hits": counts.get("hits", 0),
                                  "misses": counts.get("misses", 0)})
            done.wait(SAMPLE_FAST if time.monotonic() - started < SAMPLE_FAST_FOR else SAMPLE_SLOW)

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
        report.update(_count(statslog))
    if links:
        report.update(_count_links(links))
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
                    "peak_cgroup_bytes": cgroup_peak, "cpus": cpus},
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


def answer(args: list[str]) -> Readings:
    """What a query prints as JSON (`resources [ROOT]`): asked in the tool's own process where the target is
    this machine (target/host.py `HostRuntime.query`), run as a file elsewhere."""
    if not args or args[0] != "resources":
        raise ValueError(f"not a query: {args[:1]}")
    return gather(args[1] if len(args) > 1 else "/")


def main(args: list[str]) -> int:
    """The in-target script's entry: `resources [ROOT]` prints what the target offers; `build RESULT -- ARGV` builds."""
    if args and args[0] == "resources":
        print(json.dumps(answer(args)))
        return 0
    if len(args) >= 4 and args[0] == "build" and args[2] == "--":
        return build(args[1], args[3:])
    sys.stderr.write("usage: resources [ROOT] | build RESULT -- ARGV...\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
