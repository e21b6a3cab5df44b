"""The link cache (toolchain/build/linkcache.py) on real links: a small CMake project written here, built with
the host's compiler and `-flto` through CMake's linker launcher, in folders of its own, with ccache set as the
tool sets it (toolchain/build/ccache.py): an `-flto` object records its compile options, paths included, so
objects are the same bytes across trees when ccache gives them, as in the tool's builds."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from toolchain.build.ccache import LINK_SCRIPT_FILE, find_ccache

CCACHE = find_ccache()[0]
pytestmark = pytest.mark.skipif(not (shutil.which("cmake") and shutil.which("c++") and CCACHE),
                                reason="needs cmake, c++ and ccache")

CMAKELISTS = """\
cmake_minimum_required(VERSION 3.21)
project(tiny CXX)
add_library(tiny SHARED tiny.cpp)
add_executable(show show.cpp)
target_link_libraries(show tiny)
"""
TINY = "int tiny_value() { return %d; }\n"
SHOW = '#include <cstdio>\nint tiny_value();\nint main() { std::printf("%d\\n", tiny_value()); return 0; }\n'


def _project(root: Path, value: int = 41) -> Path:
    src = root / "src"
    src.mkdir(parents=True)
    (src / "CMakeLists.txt").write_text(CMAKELISTS)
    (src / "tiny.cpp").write_text(TINY % value)
    (src / "show.cpp").write_text(SHOW)
    return src


def _build(src: Path, links: Path | None, log: Path, ccache: bool = True) -> Path:
    """Configure and build `src` in src/build (CXXFLAGS map the tree away, as the tool's builds do; ccache
    in the test's folder, as build/ccache.py sets it, unless `ccache` is False)."""
    build = src / "build"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CMAKE_", "TOOLCHAIN_", "CCACHE_"))}
    env["CXXFLAGS"] = f"-O2 -flto -ffile-prefix-map={src}=/usr/src/tiny -fdebug-prefix-map={src}=/usr/src/tiny"
    if ccache:
        env.update(CMAKE_CXX_COMPILER_LAUNCHER=str(CCACHE), CCACHE_DIR=str(src.parents[1] / "ccache"),
                   CCACHE_BASEDIR=str(src.parents[1]), CCACHE_NOHASHDIR="1", CCACHE_COMPILERCHECK="content")
    else:
        env["CCACHE_DISABLE"] = "1"
    if links is not None:
        env.update(CMAKE_CXX_LINKER_LAUNCHER=f"{sys.executable};{LINK_SCRIPT_FILE}", TOOLCHAIN_LINK_CACHE=str(links),
                   TOOLCHAIN_LINK_STATSLOG=str(log))
    for argv in (["cmake", "-S", str(src), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release"],
                 ["cmake", "--build", str(build)]):
        subprocess.run(argv, env=env, check=True, capture_output=True)
    return build


def _words(log: Path) -> list[str]:
    return [line.split(" ", 1)[0] for line in log.read_text().splitlines()] if log.exists() else []


def test_the_same_link_in_another_tree_is_reused_and_gives_the_same_bytes(tmp_path):
    links = tmp_path / "links"
    first = _build(_project(tmp_path / "a"), links, tmp_path / "a.log")
    assert _words(tmp_path / "a.log").count("miss") == 2  # the library and the program, linked and remembered
    second = _build(_project(tmp_path / "b"), links, tmp_path / "b.log")
    plain = _build(_project(tmp_path / "c"), None, tmp_path / "c.log", ccache=False)  # no cache at all
    # the library: the same link in another tree (its prefix maps hide the tree), reused, the same bytes as a
    # build without any cache; the program's build RPATH names its tree (-Wl,-rpath,.../b/src/build), which
    # reaches the output: linked again
    assert [w for w in _words(tmp_path / "b.log") if w != "skip"] == ["hit", "miss"], (tmp_path / "b.log").read_text()
    assert (first / "libtiny.so").read_bytes() == (second / "libtiny.so").read_bytes() == \
        (plain / "libtiny.so").read_bytes()
    assert (first / "show").read_bytes() != (second / "show").read_bytes()
    shown = subprocess.run([str(second / "show")], capture_output=True, text=True, check=True)
    assert shown.stdout == "41\n"
    assert os.access(second / "libtiny.so", os.X_OK)


def test_a_changed_object_links_again(tmp_path):
    links = tmp_path / "links"
    _build(_project(tmp_path / "a", 41), links, tmp_path / "a.log")
    build = _build(_project(tmp_path / "b", 42), links, tmp_path / "b.log")
    # the library's object changed: linked again; the program links against the new library: linked again
    assert _words(tmp_path / "b.log").count("miss") == 2, (tmp_path / "b.log").read_text()
    shown = subprocess.run([str(build / "show")], capture_output=True, text=True, check=True)
    assert shown.stdout == "42\n"


def test_an_entry_others_may_write_is_not_used(tmp_path):
    links = tmp_path / "links"
    _build(_project(tmp_path / "a"), links, tmp_path / "a.log")
    entries = [p for p in links.glob("??/*") if p.is_file()]
    assert len(entries) == 2
    for entry in entries:
        entry.write_bytes(b"planted")
        entry.chmod(0o666)
    build = _build(_project(tmp_path / "b"), links, tmp_path / "b.log")
    assert "hit" not in _words(tmp_path / "b.log")
    assert b"planted" not in (build / "libtiny.so").read_bytes()


def _compiled(tmp_path: Path, source: str) -> tuple[Path, dict[str, str]]:
    """`source` compiled to src/main.o, and the environment that links through the link cache under tmp_path."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "main.cpp").write_text(source)
    subprocess.run(["c++", "-c", "main.cpp", "-o", "main.o"], cwd=src, check=True)
    return src, {**os.environ, "TOOLCHAIN_LINK_CACHE": str(tmp_path / "links"),
                 "TOOLCHAIN_LINK_STATSLOG": str(tmp_path / "log")}


def test_a_link_with_a_second_output_runs_as_given(tmp_path):
    src, env = _compiled(tmp_path, "int main() { return 0; }\n")
    for _ in range(2):
        subprocess.run([sys.executable, str(LINK_SCRIPT_FILE), "c++", "main.o", "-o", "main", "-Wl,-Map=main.map"],
                       cwd=src, env=env, check=True)
    assert _words(tmp_path / "log") == ["skip", "skip"]
    assert (src / "main.map").is_file() and (src / "main").is_file()
    assert not any((tmp_path / "links").glob("??/*"))


def test_a_failed_link_is_not_remembered(tmp_path):
    src, env = _compiled(tmp_path, "int missing(); int main() { return missing(); }\n")
    done = subprocess.run([sys.executable, str(LINK_SCRIPT_FILE), "c++", "main.o", "-o", "main"], cwd=src, env=env,
                          capture_output=True, text=True)
    assert done.returncode != 0 and "missing" in done.stderr
    assert not any((tmp_path / "links").glob("??/*"))


# ---- through the tool: a package whose setup.py runs cmake itself, as ARK's does ---------------------------

SETUP = '''\
import os, shutil, subprocess
from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))


class Build(build_py):
    def run(self):
        super().run()
        build = os.path.join(HERE, "build-cmake")
        subprocess.check_call(["cmake", "-S", os.path.join(HERE, "native"), "-B", build, "-DCMAKE_BUILD_TYPE=Release"])
        subprocess.check_call(["cmake", "--build", build])
        shutil.copy(os.path.join(build, "liblinky.so"), os.path.join(self.build_lib, "linky", "liblinky.so"))


class Binary(Distribution):
    def has_ext_modules(self):
        return True


setup(name="linky", version="1.0", packages=["linky"], cmdclass={"build_py": Build}, distclass=Binary)
'''
NATIVE = """\
cmake_minimum_required(VERSION 3.21)
project(linky CXX)
add_library(linky SHARED linky.cpp)
target_compile_options(linky PRIVATE -flto)
target_link_options(linky PRIVATE -flto)
"""


@pytest.fixture
def linky(tmp_path):
    from tests.spine_helpers import GitRepo

    repo = GitRepo.create(tmp_path / "linky", tag=None)
    first = repo.commit("linky", {
        "pkg/setup.py": SETUP, "pkg/pyproject.toml": '[build-system]\nrequires = ["setuptools"]\n'
        'build-backend = "setuptools.build_meta"\n', "pkg/linky/__init__.py": "", "pkg/native/CMakeLists.txt": NATIVE,
        "pkg/native/linky.cpp": 'extern "C" int linky_value() { return 7; }\n'})
    second = repo.commit("linky: python only", {"pkg/linky/__init__.py": "VALUE = 7\n"})
    return repo, first, second


def test_through_the_tool_an_unchanged_link_is_reused_and_the_wheel_is_the_same(linky, tmp_path):
    from tests.spine_helpers import Workspace, component, recipe_data

    repo, first, second = linky
    ws = Workspace(tmp_path / "ws")
    for name, commit in (("first", first), ("second", second)):
        ws.recipe(name, recipe_data({"linky": component(repo, commit, subdir="pkg")}))
    assert ws.build("first", "out-1", "--no-resolve").returncode == 0
    cc = ws.record("out-1")["components"][0]["compiler-cache"]
    assert cc["link-misses"] == 1 and cc.get("link-hits", 0) == 0, cc
    done = ws.build("second", "out-2", "--no-resolve")
    assert done.returncode == 0, done
    cc = ws.record("out-2")["components"][0]["compiler-cache"]
    assert cc["link-hits"] == 1 and cc.get("link-misses", 0) == 0 and cc["hits"] >= 1, cc
    assert "links: 1 hits, 0 misses" in (ws.root / "out-2" / "logs" / "linky.log").read_text()
    # the same commit built without any cache, elsewhere: the same wheel, byte for byte
    plain = ws.build("second", "out-3", "--no-resolve", "--no-compiler-cache", cache=tmp_path / "other-cache")
    assert plain.returncode == 0, plain
    wheels = [next((ws.root / out / "wheels").glob("linky-*.whl")).read_bytes() for out in ("out-2", "out-3")]
    assert wheels[0] == wheels[1]


def test_a_cmake_configure_check_links_as_given(tmp_path):
    """try_compile's folder and target names are random: such a link would never hit, so it is not stored."""
    src = tmp_path / "build" / "CMakeFiles" / "CMakeScratch" / "TryCompile-abc123"
    src.mkdir(parents=True)
    (src / "main.cpp").write_text("int main() { return 0; }\n")
    subprocess.run(["c++", "-c", "main.cpp", "-o", "main.o"], cwd=src, check=True)
    env = {**os.environ, "TOOLCHAIN_LINK_CACHE": str(tmp_path / "links"),
           "TOOLCHAIN_LINK_STATSLOG": str(tmp_path / "log")}
    subprocess.run([sys.executable, str(LINK_SCRIPT_FILE), "c++", "main.o", "-o", "cmTC_abc12"], cwd=src, env=env,
                   check=True)
    assert (src / "cmTC_abc12").is_file()
    assert _words(tmp_path / "log") == ["skip"]
    assert not any((tmp_path / "links").glob("??/*"))


# ---- `toolchain cache prune` on the link cache (build/linkprune.py) ----------------------------------------

DAY = 86400.0


def _link(src: Path, env: dict[str, str], output: str) -> None:
    subprocess.run([sys.executable, str(LINK_SCRIPT_FILE), "c++", "main.o", "-o", output], cwd=src, env=env,
                   check=True)


def _entries(links: Path) -> dict[str, Path]:
    """The link cache's remembered outputs, by key."""
    return {p.name: p for p in links.glob("??/*") if p.is_file() and not p.name.startswith(".")}


def _age(path: Path, days: float) -> None:
    then = time.time() - days * DAY
    os.utime(path, (then, then), follow_symlinks=False)


def _cached(tmp_path: Path, source: str) -> tuple[Path, dict[str, str], Path]:
    """`_compiled`, its links remembered in the link cache of the tool's cache folder tmp_path/cache."""
    src, env = _compiled(tmp_path, source)
    links = tmp_path / "cache" / "links"
    return src, {**env, "TOOLCHAIN_LINK_CACHE": str(links)}, links


def _prune(tmp_path: Path, *args: object) -> dict[str, Any]:
    from tests.spine_helpers import Cli, isolated_env

    cache = tmp_path / "cache"
    done = Cli(tmp_path, isolated_env(tmp_path / "home"))("cache", "prune", "--cache-dir", cache, "--json", *args)
    assert done.returncode == 0, str(done)
    assert done.json()["where"] == str(cache)
    return done.json()


def test_prune_removes_the_links_no_build_used_lately_and_a_hit_is_a_use(tmp_path):
    src, env, links = _cached(tmp_path, "int main() { return 3; }\n")
    _link(src, env, "used")
    _link(src, env, "unused")
    entries = _entries(links)
    assert len(entries) == 2 and _words(tmp_path / "log") == ["miss", "miss"]
    for entry in entries.values():
        _age(entry, 40)
    _link(src, env, "used")  # a hit: the entry's last use is now
    assert _words(tmp_path / "log")[-1] == "hit"
    used = next(p for p in entries.values() if time.time() - p.stat().st_mtime < DAY)
    unused = next(p for p in entries.values() if p != used)
    dry = _prune(tmp_path, "--older-than", "30d", "--dry-run")
    assert dry["link-cache"]["removed"] == 1 and dry["link-cache"]["kept"] == 1 and dry["link-cache"]["bytes-freed"] == 0
    assert unused.is_file() and used.is_file()
    with open(unused, "rb") as reading:  # a build that opened the entry before the prune reads it whole
        done = _prune(tmp_path, "--older-than", "30d")
        assert reading.read() == (src / "unused").read_bytes()
    assert done["link-cache"]["removed"] == 1 and done["link-cache"]["bytes-freed"] == (src / "unused").stat().st_size
    assert not unused.exists() and used.is_file()
    # the pruned link is linked for real again, remembered again, and runs
    (src / "unused").unlink()
    _link(src, env, "unused")
    assert _words(tmp_path / "log")[-1] == "miss" and unused.is_file()
    assert subprocess.run([str(src / "unused")], check=False).returncode == 3


def test_prune_keeps_the_most_recently_used_links_within_a_size(tmp_path):
    src, env, links = _cached(tmp_path, "int main() { return 0; }\n")
    for n, days in (("a", 3), ("b", 2), ("c", 1)):
        _link(src, env, n)
        new = [p for p in _entries(links).values() if time.time() - p.stat().st_mtime < 60]
        assert len(new) == 1
        _age(new[0], days)
    size = (src / "a").stat().st_size  # each output about as large (only the names differ)
    done = _prune(tmp_path, "--keep-size", f"{2 * size + size // 2}")
    assert done["link-cache"]["removed"] == 1 and done["link-cache"]["kept"] == 2
    left = sorted(_entries(links).values(), key=lambda p: p.stat().st_mtime)
    assert [round((time.time() - p.stat().st_mtime) / DAY) for p in left] == [2, 1]


def test_prune_removes_only_what_the_link_script_made_and_follows_no_link(tmp_path):
    src, env, links = _cached(tmp_path, "int main() { return 0; }\n")
    _link(src, env, "main")
    (entry,) = _entries(links).values()
    _age(entry, 40)
    fan = entry.parent
    outside = tmp_path / "outside"
    (outside / "ab").mkdir(parents=True)
    planted = {
        fan / "notes.txt": b"a user's file",  # not a name the script makes
        fan / ("ab" + "0" * 62): b"in the wrong fan-out folder",
        outside / "ab" / ("ab" + "1" * 62): b"another cache's entry",
        fan / ".tmp-fresh": b"a link being stored right now",
        fan / ".tmp-stale": b"left by a killed writer",
    }
    for path, data in planted.items():
        path.write_bytes(data)
        _age(path, 40)
    _age(fan / ".tmp-fresh", 0)
    (fan / ("cd" * 32)).symlink_to(outside / "ab" / ("ab" + "1" * 62))  # an entry's name: a link out
    (links / "ab").symlink_to(outside / "ab", target_is_directory=True)  # a fan-out folder: a link out
    os.link(fan / "notes.txt", fan / ("ef" * 32))  # a second name of a file: not the script's
    done = _prune(tmp_path, "--older-than", "30d")
    assert done["link-cache"]["removed"] == 1 and done["link-cache"]["temporaries-removed"] == 1
    assert done["link-cache"]["not-entered"] == [str(links / "ab")]
    assert not entry.exists() and not (fan / ".tmp-stale").exists()
    for path, data in planted.items():
        if path.name != ".tmp-stale":
            assert path.read_bytes() == data, path
    assert (fan / ("cd" * 32)).is_symlink() and (fan / ("ef" * 32)).is_file()
    # the link cache's folder itself a link: not entered, nothing under it removed
    _link(src, env, "main")  # (the same link: the same key, remembered again)
    again = entry.relative_to(links)
    _age(entry, 40)
    links.rename(tmp_path / "real-links")
    links.symlink_to(tmp_path / "real-links", target_is_directory=True)
    done = _prune(tmp_path, "--older-than", "30d")
    assert done["link-cache"] == {"removed": 0, "kept": 0, "hashes-removed": 0, "hashes-kept": 0, "bytes-freed": 0,
                                  "temporaries-removed": 0, "not-entered": [str(links)]}
    assert (tmp_path / "real-links" / again).is_file()


@pytest.mark.skipif(os.geteuid() != 0, reason="gives a file to another user: needs root")
def test_prune_leaves_another_users_link(tmp_path):
    src, env, links = _cached(tmp_path, "int main() { return 0; }\n")
    _link(src, env, "main")
    (entry,) = _entries(links).values()
    _age(entry, 40)
    os.chown(entry, 65534, 65534, follow_symlinks=False)
    _age(entry, 40)
    done = _prune(tmp_path, "--older-than", "30d")
    assert done["link-cache"]["removed"] == 0 and entry.is_file()


def test_the_link_cache_is_kept_within_the_compiler_caches_bound(tmp_path):
    """keep_within: ccache's own max_size (its ccache.conf in the compiler cache's folder) bounds the link cache."""
    from toolchain.build import ccache
    from toolchain.build.linkprune import keep_within
    from toolchain.recipe.buildspec import BuildSpec

    src, env, links = _cached(tmp_path, "int main() { return 0; }\n")
    for n, days in (("a", 3), ("b", 2), ("c", 1)):
        _link(src, env, n)
        new = [p for p in _entries(links).values() if time.time() - p.stat().st_mtime < 60]
        _age(new[0], days)
    size = (src / "a").stat().st_size
    cc = ccache.choose(BuildSpec(), tmp_path / "cache")
    assert cc.links_dir == links and cc.binary is not None
    cc.data_dir.mkdir()
    (cc.data_dir / "ccache.conf").write_text("max_size = 0\n")  # ccache's "no limit": nothing removed
    assert keep_within(cc) is None and len(_entries(links)) == 3
    (cc.data_dir / "ccache.conf").write_text(f"max_size = {(2 * size + size // 2) / 1000:.1f}k\n")
    done = keep_within(cc)
    assert done is not None and sum(gone for f, gone, _ in done.verdicts if f.kind == "link") == 1
    left = sorted(_entries(links).values(), key=lambda p: p.stat().st_mtime)
    assert [round((time.time() - p.stat().st_mtime) / DAY) for p in left] == [2, 1]


def test_a_build_that_stores_a_link_keeps_the_link_cache_within_the_bound(linky, tmp_path):
    from tests.spine_helpers import Workspace, component, recipe_data

    repo, first, _ = linky
    ws = Workspace(tmp_path / "ws")
    ws.recipe("first", recipe_data({"linky": component(repo, first, subdir="pkg")}))
    stale = ws.cache / "links" / "00" / ("00" * 32)  # a link no build used for a year
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"x" * 100_000)
    _age(stale, 365)
    (ws.cache / "ccache").mkdir()
    (ws.cache / "ccache" / "ccache.conf").write_text("max_size = 90k\n")  # less than the two together
    assert ws.build("first", "out-1", "--no-resolve").returncode == 0
    assert ws.record("out-1")["components"][0]["compiler-cache"]["link-misses"] == 1
    assert not stale.exists() and len(_entries(ws.cache / "links")) == 1
