"""The bisect benchmark's generated repository, and a small real run of the benchmark (pip builds, git bisect)."""

from __future__ import annotations

import sysconfig
from pathlib import Path

import pytest

from benchmarks.bench_bisect import make_kernel_repo, run_benchmark
from toolchain.core.proc.runner import run


def git(repo: Path, *args: str) -> str:
    return run(["git", "-C", str(repo), *args], capture=True).stdout.strip()


def compiles(repo: Path, sha: str, tmp: Path) -> bool:
    src = tmp / f"{sha[:12]}.c"
    src.write_text(git(repo, "show", f"{sha}:src/ext.c"))
    done = run(["cc", "-fsyntax-only", f"-I{sysconfig.get_paths()['include']}", str(src)], capture=True, check=False)
    return done.returncode == 0


def test_generated_repository(tmp_path: Path):
    r = make_kernel_repo(tmp_path / "k", commits=30, first_bad=20, unbuildable=(7, 8), merge_every=10)
    first_parent = git(r.path, "rev-list", "--first-parent", "--reverse", f"{r.good}..{r.bad}").split()
    assert len(first_parent) == r.first_parent == 30
    assert int(git(r.path, "rev-list", "--count", f"{r.good}..{r.bad}")) == 34  # two merged side branches
    merges = git(r.path, "rev-list", "--merges", "--first-parent", f"{r.good}..{r.bad}").split()
    assert sorted(merges) == sorted([first_parent[9], first_parent[29]])
    assert r.first_bad == first_parent[19]
    assert "PyLong_FromLong(41)" in git(r.path, "show", f"{r.first_bad}:src/ext.c")
    assert "PyLong_FromLong(42)" in git(r.path, "show", f"{r.first_bad}^1:src/ext.c")
    assert r.unbuildable == (first_parent[6], first_parent[7])
    assert [compiles(r.path, sha, tmp_path) for sha in first_parent[5:10]] == [True, False, False, True, True]
    for broken in ((3,), (2,)):  # the first bad commit, or the one before it, not building: no exact answer
        with pytest.raises(ValueError, match="."):
            make_kernel_repo(tmp_path / "x", commits=10, first_bad=3, unbuildable=broken)


@pytest.mark.slow
def test_small_benchmark_run(tmp_path: Path):
    report = run_benchmark(tmp_path, commits=8, heavy_functions=50, jobs=1)
    figures, checks = report["figures"], report["checks"]
    assert {k: v for k, v in checks.items() if k != "time_ratio_within_third"} == {
        "found": True, "builds_within_bound": True, "repeat_compiles_nothing": True, "git_agrees": True}, figures
    assert figures["repeat_builds_compiled"] == 0
    assert figures["builds_compiled"] >= figures["steps"]
    assert figures["git_steps"] >= 1
    assert figures["git_seconds"] > 0


def test_the_real_range_recipe_builds_past_arks_fetchcontent(tmp_path: Path):
    """Item 9's recipe (auto-round's root wheel, whose tree holds ARK's CMake files from within the range)
    states ARK's FetchContent dependencies as unused: the build of the range's bad end passes the check of
    build/fetchcontent_check.py and builds the wheel (a real pip build from a mirror of the real history)."""
    from benchmarks.bench_bisect_real import REAL, real_builder
    from tests.support import ark_mirrors
    from toolchain.build.fetchcontent_check import rows
    from toolchain.recipe.load import load_recipe
    from toolchain.sources.cmake_declared import declared_at

    bundle = ark_mirrors.BUNDLES / "intel+auto-round.bundle"
    if not bundle.is_file():
        pytest.fail(ark_mirrors.missing())
    mirror = tmp_path / "auto-round.git"
    run(["git", "clone", "-q", "--mirror", str(bundle), str(mirror)], capture=True)
    builder = real_builder(tmp_path / "work", mirror, resolve_steps=False)
    comp = load_recipe(str(tmp_path / "work" / "recipes" / "real.toml")).components[0]
    statuses = {r.name: r.status for r in rows(comp, declared_at(mirror, REAL.bad))}
    assert statuses == dict.fromkeys(("pybind11", "dnnl", "sycl_tla", "xbyak"), "unused"), statuses
    built = builder.build(REAL.bad)
    assert built.ok, built.reason
    assert built.wheels and built.wheels[0].name.startswith("auto_round-")
