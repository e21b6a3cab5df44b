"""A resolution from uv's cache of what the index served (a bisect's later locks: `cached_first`) that the cache
cannot answer asks the index for what uv says it lacks, not for every package again (issue 48): real uv, a real
PEP 503 index served on 127.0.0.1 that records the requests it answers.

Before, such a resolution ran uv online: every package of the closure revalidated and its sdists' metadata built
again, as much CPU as the first resolution (auto-round's ~120 packages: 3-4 s), on the path a bisect's result
waits on."""

from __future__ import annotations

from pathlib import Path

from tests.support.closure import CountingIndex, simple_index
from tests.support.native_wheels import write_wheel
from toolchain.recipe.model import ResolveSpec
from toolchain.resolve.closure import Closure
from toolchain.resolve.uvpin import BuiltWheel, missing, resolve_closure
from toolchain.target.facts import TargetInfo

TARGET = TargetInfo(python_version="3.11.7", platform="linux_x86_64")

# uv 0.13's words, captured from `uv pip compile --offline` on a bisect of auto-round (numpy<2 after a
# numpy 2 closure; then an older end that needs numba), and from uv's own tests
RANGES = """\
error: No solution found when resolving dependencies
  cause: Because accelerate>=1.10.0,<=1.15.0 needs to be downloaded from a registry and accelerate>=1.16.0 \
depends on numpy>=1.17, we can conclude that accelerate>=1.10.0 depends on numpy>=1.17.
         And because numpy>=1.17.0,<=1.26.4 needs to be downloaded from a registry, we can conclude that \
accelerate>=1.10.0 depends on numpy>=2.0.0.
"""
ALL_OF = """\
  cause: Because all of:
             pandas<=3.0.3
             pandas>=3.0.5,<=3.1.1
          need to be downloaded from a registry and only the following versions of pandas are available:
             pandas<=3.0.3
             pandas==3.0.4
             pandas>=3.0.5
         we can conclude that all of:
             pandas<3.0.4
             pandas>3.0.4,<=3.1.1
          cannot be used.
         And because datasets>=5.2.0 depends on pandas and datasets<=5.1.0 needs to be downloaded from a \
registry, we can conclude that all versions of datasets depend on numpy>=2.0.2.
"""
NOT_CACHED = ("  cause: Because numba was not found in the cache and auto-round==0.7.0 depends on numba, we can "
              "conclude that auto-round==0.7.0 cannot be used.")
ALL_VERSIONS = ("Because all versions of iniconfig need to be downloaded from a registry and you require iniconfig, "
                "we can conclude that your requirements are unsatisfiable.")


def test_what_uv_offline_says_it_lacks_is_read_as_requirements_one_per_package():
    assert missing(RANGES) == ["accelerate<=1.15.0,>=1.10.0", "numpy<=1.26.4,>=1.17.0"]
    assert missing(ALL_OF) == ["datasets<=5.1.0", "pandas<=3.1.1,>=3.0.5"]  # the highest range uv names
    assert missing(NOT_CACHED) == ["numba"]
    assert missing(ALL_VERSIONS) == ["iniconfig"]
    assert missing("error: No solution found when resolving dependencies\n  cause: you require a<1 and a>2") == []


def _pins(closure: Closure) -> set[tuple[str, str, str]]:
    return {(d.name, d.version, d.sha256) for d in closure.dists}


def test_a_resolution_from_the_cache_asks_the_index_only_for_what_it_lacks(tmp_path):
    """app 1 needs `base` (2.0, which needs `helper`) and `other`; resolved online, it fills uv's cache. app 2
    needs `late` too, which app 1's closure never had: resolved from the cache (uv --offline), uv says `late`
    is not there; the index is asked for it, and for no package app 1's closure had (not `other` again), and the
    closure is the one an online resolution on an empty cache gives."""
    files = tmp_path / "files"
    for name, version, requires in (("base", "1.0", ()), ("base", "2.0", ("helper",)), ("helper", "1.0", ()),
                                    ("other", "1.0", ()), ("late", "1.0", ("helper",))):
        write_wheel(files, name, version, {f"{name}/__init__.py": b""}, requires=requires)
    built = tmp_path / "built"
    app1 = write_wheel(built / "1", "app", "1.0", {"app/__init__.py": b""}, requires=("base", "other"))
    app2 = write_wheel(built / "2", "app", "2.0", {"app/__init__.py": b""}, requires=("base", "other", "late"))
    with CountingIndex(simple_index(files, tmp_path / "index").parent) as index:
        spec = ResolveSpec(indexes=(f"{index.url}/simple",))

        def resolve(wheel: Path, cache: Path, log: str, *, cached_first: bool) -> Closure:
            return resolve_closure(spec, TARGET, [BuiltWheel("app", wheel)], cache, tmp_path / log,
                                   cached_first=cached_first)

        first = resolve(app1, tmp_path / "cache", "first.log", cached_first=False)
        assert {(n, v) for n, v, _ in _pins(first)} == {("base", "2.0"), ("helper", "1.0"), ("other", "1.0")}
        before = len(index.requests)
        second = resolve(app2, tmp_path / "cache", "second.log", cached_first=True)
        asked = index.requests[before:]
        fresh = resolve(app2, tmp_path / "fresh-cache", "fresh.log", cached_first=False)
    assert _pins(second) == _pins(fresh)
    assert {(n, v) for n, v, _ in _pins(second)} >= {("late", "1.0"), ("other", "1.0")}
    assert any("/simple/late/" in p for p in asked), asked
    assert not any("/simple/other/" in p or "/simple/base/" in p for p in asked), asked  # no online resolution
    log = (tmp_path / "second.log").read_text()
    assert "missing.txt" in log and "late" in log, log  # the fetch of what uv named
