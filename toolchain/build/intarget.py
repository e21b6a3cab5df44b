"""What runs INSIDE the target (host or container) around a build: a self-contained script, stdlib only,
sent as `python -c SOURCE ...` (the package is not installed in a container).

    python -c SOURCE resources [ROOT]          print the raw memory/CPU readings (cgroup files, meminfo) as JSON
    python -c SOURCE build RESULT -- ARGV...   run ARGV through the compiler cache and measure it; write RESULT
    python SOURCE pep517 OUT BACKEND BACKEND_PATH -- ARGV...
                                               the recipe's default command (ARGV: `pip wheel --no-build-isolation
                                               --no-deps SRC -w OUT`, run in SRC) as pip makes its one build call,
                                               without pip; ARGV itself where pip would do more (`pep517` below)

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
from typing import Any, TypedDict

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


# ---- the default command's one build call, without pip ------------------------------------------------

PIP_IN_TREE = (21, 3)  # from pip 21.3 a directory is built where it is (before: copied to a temporary folder)
# pip settings (PIP_<NAME> variables, pip.conf keys) that cannot change what `pip wheel --no-build-isolation
# --no-deps DIR` builds: where an index is and how to reach it, pip's cache, its output. Any other one (such
# as config-settings, build-option, use-pep517, require-virtualenv, only-binary, python) and pip runs itself.
PIP_HARMLESS = frozenset((
    "index-url", "extra-index-url", "no-index", "find-links", "trusted-host", "cert", "client-cert", "proxy",
    "timeout", "default-timeout", "retries", "keyring-provider", "cache-dir", "no-cache-dir", "no-input",
    "disable-pip-version-check", "progress-bar", "quiet", "verbose", "no-color", "root-user-action",
    "break-system-packages", "no-warn-script-location", "no-build-isolation", "no-deps"))


def _pip_name(name: str) -> str:
    name = name.lower().replace("_", "-")
    return name[2:] if name.startswith("--") else name


def _pip_config_files(env: dict[str, str]) -> list[str]:
    """Every file pip (21.3 and later) may read its configuration from (more than it reads, never fewer)."""
    home = os.path.expanduser("~")
    chosen = env.get("PIP_CONFIG_FILE")
    files = [chosen] if chosen and chosen != os.devnull else []
    if chosen == os.devnull:  # pip reads no configuration file then
        return files
    dirs = (env.get("XDG_CONFIG_DIRS") or "/etc/xdg").split(os.pathsep)
    files += [os.path.join(d, "pip", "pip.conf") for d in dirs if d] + ["/etc/pip.conf"]
    files += [os.path.join(home, ".pip", "pip.conf"),
              os.path.join(env.get("XDG_CONFIG_HOME") or os.path.join(home, ".config"), "pip", "pip.conf"),
              os.path.join(sys.prefix, "pip.conf")]
    return files


class PipSettings:
    """What pip would do besides the backend's build_wheel call, read from the environment and pip.conf files:
    `differs` says why it would do more or otherwise ("" when it would not); `constraints` are the lines of
    its constraints files, (canonical name, line, file): pip checks the project it builds against those that
    name it (`constraint_problem`)."""

    def __init__(self, differs: str = "", constraints: tuple[tuple[str, str, str], ...] = ()) -> None:
        self.differs, self.constraints = differs, constraints


def _canonical(name: str) -> str:
    import re

    return re.sub(r"[-_.]+", "-", name).lower()


def _constraint_lines(path: str, seen: set[str]) -> list[tuple[str, str, str]] | None:
    """The lines of a pip constraints file, following its -r/-c lines, as (canonical name, line, file); None
    when pip would read more into it than named versions (a URL or path, extras, an option line) or it cannot
    be read."""
    import re

    path = os.path.abspath(path)
    if path in seen:
        return []
    seen.add(path)
    text = _read(path)
    if text is None:
        return None
    lines: list[tuple[str, str, str]] = []
    for line in re.sub(r"\\\n", " ", text).splitlines():
        line = re.sub(r"(^|\s)#.*$", "", line).strip()
        if not line:
            continue
        nested = re.match(r"^(?:-[rc]\s*|--(?:requirement|constraint)(?:\s+|=))(\S+)$", line)
        if nested:
            more = _constraint_lines(os.path.join(os.path.dirname(path), nested.group(1)), seen)
            if more is None:
                return None
            lines += more
            continue
        named = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:[<>=!~;(]|$)", line)
        if named is None:
            return None
        lines.append((_canonical(named.group(1)), line, path))
    return lines


def pip_settings(env: dict[str, str]) -> PipSettings:
    """Whether `pip wheel --no-build-isolation --no-deps DIR` would do more here than call the backend's
    build_wheel in DIR: no pip, a pip older than 21.3 (it builds a copy elsewhere), or a pip setting of the
    environment or a pip.conf that pip passes on or acts on (constraints aside: `PipSettings.constraints`)."""
    import configparser
    import re

    # found on sys.path by hand: asking the import system for pip makes setuptools' distutils shim stand aside
    # in this process (_distutils_hack's spec_for_pip), and setuptools then fails to import
    pip = next((os.path.join(d or ".", "pip") for d in sys.path
                if os.path.isfile(os.path.join(d or ".", "pip", "__init__.py"))), "")
    text = _read(os.path.join(pip, "__init__.py")) if pip else None
    found = re.search(r"^__version__\s*=\s*['\"](\d+)\.(\d+)", text or "", re.M)
    if found is None:
        return PipSettings("no pip (or no version of it) found")
    if (int(found.group(1)), int(found.group(2))) < PIP_IN_TREE:
        return PipSettings(f"pip {found.group(1)}.{found.group(2)} builds a copy of the tree, not the tree")
    files: list[str] = []
    for key in sorted(env):
        name = _pip_name(key[4:])
        if not key.startswith("PIP_") or name in PIP_HARMLESS or name == "config-file":
            continue
        if name != "constraint":
            return PipSettings(f"{key} is set")
        files += env[key].split()
    for path in _pip_config_files(env):
        if not os.path.isfile(path):
            continue
        parser = configparser.RawConfigParser()
        try:
            parser.read(path, encoding="utf-8")
        except (configparser.Error, OSError, UnicodeDecodeError) as exc:
            return PipSettings(f"{path} cannot be read ({exc.__class__.__name__})")
        for section in ("global", "wheel"):
            for name in parser.options(section) if parser.has_section(section) else ():
                if _pip_name(name) == "constraint":
                    files += parser.get(section, name).split()
                elif _pip_name(name) not in PIP_HARMLESS:
                    return PipSettings(f"{path} sets {name} in [{section}]")
    constraints: list[tuple[str, str, str]] = []
    for path in files:
        lines = _constraint_lines(path, set())
        if lines is None:
            return PipSettings(f"the constraints file {path} holds more than named versions, or cannot be read")
        constraints += lines
    if constraints and not os.path.isfile(os.path.join(pip, "_vendor", "packaging", "requirements.py")):
        return PipSettings("pip has constraints, and its packaging library is not where pip keeps it")
    return PipSettings(constraints=tuple(constraints))


def constraint_problem(constraints: tuple[tuple[str, str, str], ...], wheel: str) -> str:
    """Why pip's constraints refuse the project `wheel` (a wheel file's name) is a build of, as pip checks a
    directory it builds against them ("" when they do not): a constraint naming it (its markers true here)
    that its version does not satisfy, or that pins a URL."""
    name, version = wheel.split("-")[:2]
    mine = [(line, path) for n, line, path in constraints if n == _canonical(name)]
    if not mine:
        return ""
    from pip._vendor.packaging.requirements import (  # (pip present: pip_settings; the build is over)
        InvalidRequirement,
        Requirement,
    )

    for line, path in mine:
        try:
            req = Requirement(line)
        except InvalidRequirement as exc:
            return f"Invalid requirement: {line!r} ({path}): {exc}"
        if req.marker is not None and not req.marker.evaluate():
            continue
        if req.url or not req.specifier.contains(version, prereleases=True):
            return (f"Cannot build {name}=={version}: the constraint {line!r} in {path} excludes it "
                    "(pip wheel refuses it so)")
    return ""


def pep517(out: str, backend: str, backend_path: str, argv: list[str]) -> int:
    """What `pip wheel --no-build-isolation --no-deps SRC -w OUT` (`argv`, run in SRC) does to build, without
    pip's own start (its imports, a metadata call in one more interpreter): pyproject-hooks' build_wheel call,
    as pip makes it, in this interpreter. `backend_path`: the absolute `backend-path` folders (os.pathsep
    between). Where pip would do more or otherwise (`pip_settings`), `argv` runs instead. A wheel that pip's
    constraints refuse is removed and the build fails, as under pip. The checks pip makes of the wheel it
    built are the tool's (toolchain.build.frontend)."""
    settings = pip_settings(dict(os.environ))
    if settings.differs:
        print(f"# toolchain: running the command as written, pip itself: {settings.differs}", flush=True)
        os.execvp(argv[0], argv)
    print(f"# toolchain: the command as pip runs it: the PEP 517 backend {backend}'s build_wheel called in "
          f"{os.getcwd()} (pip's build call; without pip's own start)", flush=True)
    from importlib import import_module

    del sys.path[0]  # this script's folder: pip's hook runs from a folder of its own
    os.environ["PEP517_BUILD_BACKEND"] = backend  # as pyproject-hooks sets them for the backend
    paths = backend_path.split(os.pathsep) if backend_path else []
    if paths:
        os.environ["PEP517_BACKEND_PATH"] = backend_path
        sys.path[:0] = paths
    module, _, attrs = backend.partition(":")
    hooks: Any = import_module(module)
    where = os.path.normcase(os.path.abspath(getattr(hooks, "__file__", None) or ""))
    if paths and not any(os.path.commonprefix([where, folder]) == folder  # noqa: RUF071 (pyproject-hooks' test)
                         for folder in (os.path.normcase(os.path.abspath(p)) for p in paths)):
        sys.stderr.write(f"the build backend {backend} was not loaded from backend-path ({backend_path})\n")
        return 1
    for attr in filter(None, attrs.split(".")):
        hooks = getattr(hooks, attr)
    built = str(hooks.build_wheel(os.path.abspath(out), None, None))
    problem = constraint_problem(settings.constraints, built)
    if problem:
        os.unlink(os.path.join(out, built))
        sys.stderr.write(f"ERROR: {problem}\n")
        return 1
    print(f"# toolchain: the backend built {built}", flush=True)
    return 0


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
    if len(args) >= 6 and args[0] == "pep517" and args[4] == "--":
        return pep517(args[1], args[2], args[3], args[5:])
    sys.stderr.write("usage: resources [ROOT] | build RESULT -- ARGV... | pep517 OUT BACKEND BACKEND_PATH -- ARGV...\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
