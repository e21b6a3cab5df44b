"""Closure resolution (issue 26): once per change, offline after that, and never mistaken for a build failure.

Resolve once per change: the closure is kept under a key made of the built wheels' metadata
(name, version, Requires-Dist, Requires-Python; not the wheel's hash), the [resolve] settings and the target's
Python and platform. A build into a new --out whose key is kept asks no index (the index is stopped) and takes
the same closure; `toolchain lock --refresh` resolves again on purpose, and the lock says when its closure was
resolved. The [resolve] table's platform and URLs are checked before anything is built (exit 2 naming the key,
no credential shown). Real builds, uv and a PEP 503 index served on 127.0.0.1 that counts its requests.

The real failure is named: a network outage (a stopped index, a dead proxy),
an index asking for credentials, a full disk under the resolver's cache are each one line naming the host (or
the path) with their own TIP, never "cannot satisfy"; network and disk-full are TransientError (bisect never
remembers them as unbuildable). Everything is real: the demo's built wheels, uv, a PEP 503 index served on
127.0.0.1 by the test process (counting its requests), a tmpfs that is full.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.closure import (
    REPO,
    WHEELHOUSE,
    CountingIndex,
    build_standin_torch,
    dead_proxy_env,
    demo_variant,
    free_port,
    full_disk,
    simple_index,
    warm_builds,
    wheelhouse,
)
from toolchain.build.wheelmeta import WheelMeta, wheel_meta
from toolchain.lock import read_lock
from toolchain.recipe.model import ResolveSpec
from toolchain.resolve.closure_memo import closure_key
from toolchain.target.facts import TargetInfo

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def warm(demo_build, tmp_path_factory):
    """A copy of the demo build's cache (every component cached) and a CLI to build recipe variants with it."""
    return warm_builds(demo_build.cache, tmp_path_factory.mktemp("closure-resolution"))


@pytest.fixture(scope="module")
def index_root(tmp_path_factory) -> Path:
    """A PEP 503 index folder serving the demo's dependencies (packaging, tomli, the stand-in torch)."""
    root = tmp_path_factory.mktemp("index")
    simple_index(wheelhouse(root / "wheels"), root / "index")
    return root / "index"


def _error(r) -> dict:
    data = r.json()
    assert data["ok"] is False, str(r)
    return data


def test_a_stopped_index_is_a_network_failure_naming_the_host_not_an_unsatisfiable_requirement(warm, index_root):
    root, _cli, build = warm
    index = CountingIndex(index_root)
    index.stop()  # the port now refuses connections
    recipe = demo_variant(root / "recipes", "stopped", {"indexes": [f"{index.url}/simple"]})
    r, out = build(recipe, "out-stopped")
    assert r.returncode == 1, str(r)
    err = _error(r)
    assert err["kind"] == "TransientError", err
    assert f"cannot reach 127.0.0.1:{index.port}" in err["error"]
    assert "connection refused" in err["error"]
    assert "cannot satisfy" not in err["error"]
    assert "requires" not in err["error"]
    assert "\n" not in err["error"]  # one line
    assert "network" in err["hint"]
    assert "add the index" not in err["hint"]
    assert not (out / "stack.lock.toml").exists()


def test_a_dead_proxy_is_a_network_failure_naming_the_proxy(warm):
    root, _cli, build = warm
    recipe = demo_variant(root / "recipes", "proxied", {"indexes": ["https://pypi.example.test/simple"]})
    env = dead_proxy_env()
    r, _ = build(recipe, "out-proxied", env=env)
    assert r.returncode == 1, str(r)
    err = _error(r)
    assert err["kind"] == "TransientError", err
    proxy = env["HTTPS_PROXY"].split("://")[1]
    assert "cannot reach pypi.example.test" in err["error"]
    assert "proxy" in err["error"]
    assert proxy in err["error"]
    assert "cannot satisfy" not in err["error"]
    assert "proxy" in err["hint"]


def test_an_index_asking_for_credentials_is_an_authentication_failure(warm, index_root):
    root, _cli, build = warm
    with CountingIndex(index_root, need_auth="user:right") as index:
        recipe = demo_variant(root / "recipes", "auth", {"indexes": [f"{index.url}/simple"]})
        r, _ = build(recipe, "out-auth")
        assert index.count() >= 1
    assert r.returncode == 1, str(r)
    err = _error(r)
    assert err["kind"] == "BuildError", err  # not transient: the same credentials fail again
    assert f"127.0.0.1:{index.port} refused the request: authentication" in err["error"]
    assert "cannot satisfy" not in err["error"]
    assert "netrc" in err["hint"]


def test_a_full_disk_under_the_resolvers_cache_blames_no_package(warm, index_root):
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    root, _cli, build = warm
    full = root / "cache" / "resolve"
    with full_disk(full), CountingIndex(index_root) as index:
        recipe = demo_variant(root / "recipes", "full", {"indexes": [f"{index.url}/simple"]})
        r, _ = build(recipe, "out-full")
    assert r.returncode == 1, str(r)
    err = _error(r)
    assert err["kind"] == "TransientError", err
    assert "no space left on device" in err["error"] and str(full) in err["error"], err
    assert "requires" not in err["error"]
    assert "engine" not in err["error"]
    assert "\n" not in err["error"]
    assert "free space" in err["hint"]


def test_a_full_disk_for_the_fetched_dependencies_is_one_line_in_bundle_and_smoke(warm, index_root, tmp_path):
    """--bundle --with-deps and smoke fetch the locked files (pip download) beside the lock: onto a full disk
    that is "no space left on device (path)", one line, exit 1, no pip traceback."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    root, cli, build = warm
    with CountingIndex(index_root) as index:
        recipe = demo_variant(root / "recipes", "deps-full", {"indexes": [f"{index.url}/simple"]})
        r, out = build(recipe, "out-deps-full")
        assert r.returncode == 0, str(r)
        deps = out / "wheels" / "deps"
        with full_disk(deps):
            r, _ = build(recipe, "out-deps-full", "--bundle", "--with-deps")
            serve = f"{{python}} {REPO / 'tests' / 'smoke' / 'fault_server.py'} --port {{port}} --mode healthy " \
                    f"--served-model-name {{model}}"
            s = cli("smoke", "--lock", out / "stack.lock.toml", "--out", tmp_path / "smoke", "--port", free_port(),
                    "--skip-device-check", "--cases", "models", "--ready-timeout", "60", "--serve-cmd", serve, "--json")
    for what, res in (("bundle", r), ("smoke", s)):
        assert res.returncode == 1, f"{what}: {res}"
        err = res.json().get("error") or ""
        assert err.startswith("fetching the locked dependency files failed: no space left on device ("), (what, err)
        assert str(deps) in err and "\n" not in err and "Traceback" not in err + res.stderr, (what, err)


def _wheel(tmp: Path, name: str, version: str, requires: list[str], dest: Path) -> Path:
    """A real wheel (pip wheel of a one-package project) with the given Requires-Dist."""
    src = tmp / f"src-{name}-{version}"
    (src / name.replace("-", "_")).mkdir(parents=True)
    (src / name.replace("-", "_") / "__init__.py").write_text("")
    (src / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n'
        f'[project]\nname = "{name}"\nversion = "{version}"\ndependencies = {requires!r}\n'.replace("'", '"')
        + f'[tool.setuptools]\npackages = ["{name.replace("-", "_")}"]\n')
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-build-isolation", "--no-deps", str(src),
                    "-w", str(dest)], check=True, timeout=300, capture_output=True)
    return next(dest.glob(f"{name.replace('-', '_')}-{version}-*.whl"))


def test_an_unmet_requirement_deeper_in_the_graph_is_named_with_its_chain(warm, tmp_path):
    """The index answered: engine requires tomli>=2, and the only tomli there requires a distribution no
    location serves. The one-line cause walks the chain down to it."""
    root, _cli, build = warm
    links = wheelhouse(tmp_path / "links", without=("tomli",))
    _wheel(tmp_path, "tomli", "2.3.0", ["leaf-nowhere>=1"], links)
    recipe = demo_variant(root / "recipes", "chain", {"indexes": [], "find-links": [str(links)]})
    r, _ = build(recipe, "out-chain")
    assert r.returncode == 1, str(r)
    err = _error(r)
    assert err["kind"] == "ResolveError", err
    cause = err["error"].splitlines()[0]
    assert "component engine" in cause and "requires tomli>=2 → tomli requires leaf-nowhere>=1" in cause, cause
    assert f"which {links} cannot satisfy" in cause


def test_a_file_the_index_changed_after_locking_is_a_hash_mismatch_naming_the_host(warm, tmp_path):
    root, _cli, build = warm
    simple_index(wheelhouse(tmp_path / "wheels"), tmp_path / "index")
    with CountingIndex(tmp_path / "index") as index:
        recipe = demo_variant(root / "recipes", "changed", {"indexes": [f"{index.url}/simple"]})
        r, _out = build(recipe, "out-changed")
        assert r.returncode == 0, str(r)
        victim = next((tmp_path / "index" / "files").glob("tomli-*.whl"))
        victim.write_bytes(victim.read_bytes() + b"changed")
        r, _ = build(recipe, "out-changed", "--bundle", "--with-deps")
    assert r.returncode == 1, str(r)
    err = _error(r)
    assert err["kind"] == "TestFailed", err
    assert err["error"].startswith("fetching the locked dependency files failed: hash mismatch: "), err
    assert f"{victim.name} from 127.0.0.1:{index.port}" in err["error"]
    assert "\n" not in err["error"]
    assert "--refresh" in err["hint"]


def test_a_kept_closure_resolves_nothing_and_needs_no_network_until_lock_refresh(warm, tmp_path):
    root, cli, build = warm
    simple_index(wheelhouse(tmp_path / "wheels"), tmp_path / "index")
    index = CountingIndex(tmp_path / "index")
    recipe = demo_variant(root / "recipes", "memo", {"indexes": [f"{index.url}/simple"]})
    try:
        r, first = build(recipe, "out-memo-1")
        assert r.returncode == 0, str(r)
        asked = index.count()
        assert asked > 0  # resolved from the index once
    finally:
        index.stop()
    resolved = read_lock(first / "stack.lock.toml").closure
    assert resolved is not None
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", resolved.resolved_at)
    assert r.json()["resolved-at"] == resolved.resolved_at
    # the index is down: a warm build into a new --out takes the kept closure, asks nothing, runs no resolver
    r, second = build(recipe, "out-memo-2")
    assert r.returncode == 0, str(r)
    assert read_lock(second / "stack.lock.toml").closure == resolved
    assert not (second / "logs" / "resolve.log").exists()
    # `toolchain lock` alone keeps it too; --refresh asks the index (down: a network failure, the lock unchanged)
    lock_path = second / "stack.lock.toml"
    before = lock_path.read_text()
    r = cli("lock", "--lock", lock_path, "--cache-dir", root / "cache", "--patches-dir", REPO / "patches", "--json")
    assert r.returncode == 0 and r.json()["resolved-at"] == resolved.resolved_at, str(r)
    r = cli("lock", "--lock", lock_path, "--cache-dir", root / "cache", "--patches-dir", REPO / "patches", "--json",
            "--refresh")
    assert r.returncode == 1 and r.json()["kind"] == "TransientError", str(r)
    assert lock_path.read_text() == before
    # the index is back on the same port: --refresh resolves again and the lock says when
    with CountingIndex(tmp_path / "index", port=index.port) as again:
        r = cli("lock", "--lock", lock_path, "--cache-dir", root / "cache", "--patches-dir", REPO / "patches",
                "--json", "--refresh")
        assert again.count() > 0
    assert r.returncode == 0, str(r)
    refreshed = read_lock(lock_path).closure
    assert refreshed is not None
    assert refreshed.resolved_at > resolved.resolved_at
    assert refreshed.dists == resolved.dists
    assert f'resolved-at = "{refreshed.resolved_at}"' in lock_path.with_name("build-record.toml").read_text()


def test_the_key_is_the_wheels_metadata_not_their_hash(tmp_path):
    """A rebuilt wheel with the same metadata (another file, another sha256) has the same key, and so has
    another version no built wheel requires; another version that one requires, another [resolve], Python or
    platform has another."""
    shipped = next(WHEELHOUSE.glob("standin_torch-*.whl"))
    rebuilt = build_standin_torch("2.14.0+xpu", tmp_path / "rebuilt")
    cpu = build_standin_torch("2.14.0+cpu", tmp_path / "cpu")
    assert shipped.read_bytes() != rebuilt.read_bytes()
    target = TargetInfo(python_version="3.11.7", platform="linux_x86_64")
    spec = ResolveSpec()

    def key(wheel: Path, spec: ResolveSpec = spec, target: TargetInfo = target) -> str:
        return closure_key(spec, target, [("torch", wheel_meta(wheel))])

    assert wheel_meta(shipped).version == "2.14.0+xpu"
    assert wheel_meta(shipped).name == "standin-torch"
    assert key(shipped) == key(rebuilt)
    # another version alone resolves nothing new (the built wheels are overrides: a bisect step whose version
    # moved, as setuptools-scm's do at every commit, keeps the closure); beside a built wheel that requires
    # it, the version is part of the key (the notes on built requirements depend on it)
    assert key(cpu) == key(shipped)
    needs = WheelMeta(name="needs-torch", version="1.0", requires_dist=("standin-torch==2.14.0+xpu",),
                      requires_python="")
    assert closure_key(spec, target, [("torch", wheel_meta(cpu)), ("app", needs)]) != closure_key(
        spec, target, [("torch", wheel_meta(shipped)), ("app", needs)])
    assert key(shipped, ResolveSpec(indexes=("http://127.0.0.1:1/simple",))) != key(shipped)
    assert key(shipped, ResolveSpec(platform="aarch64-manylinux_2_28")) != key(shipped)
    assert key(shipped, target=TargetInfo(python_version="3.12.1", platform="linux_x86_64")) != key(shipped)
    engine_whl = next(WHEELHOUSE.glob("tomli-*.whl"))  # any wheel with other metadata
    assert key(engine_whl) != key(shipped)
    # a wheel dropped into a local find-links folder is a change; the same folder again is not
    links = tmp_path / "links"
    links.mkdir()
    local = ResolveSpec(indexes=(), find_links=(str(links),))
    before = key(shipped, local)
    assert key(shipped, local) == before
    shutil.copyfile(engine_whl, links / engine_whl.name)
    assert key(shipped, local) != before


@pytest.mark.parametrize(("table", "key", "secret"), [
    ({"platform": "x86_64-manylinux_2_28; touch /tmp/owned"}, "resolve.platform", ""),
    ({"platform": "$(id)"}, "resolve.platform", ""),
    ({"indexes": ["HTTPS://USER:S3cretUpper@index.example/simple"]}, "resolve.indexes", "S3cretUpper"),
    ({"indexes": ["https://__token__:pypi-AgEIcHlwaS5vcmc@index.example/simple"]}, "resolve.indexes",
     "pypi-AgEIcHlwaS5vcmc"),
    ({"indexes": ["https://ghp_tokenonly1234@index.example/simple"]}, "resolve.indexes", "ghp_tokenonly1234"),
    ({"indexes": [], "find-links": ["https://user:linkS3cret@files.example/wheels/"]}, "resolve.find-links",
     "linkS3cret"),
])
def test_resolve_settings_are_checked_before_anything_is_built(warm, table, key, secret):
    root, _cli, build = warm
    recipe = demo_variant(root / "recipes", "checked", table)
    r, out = build(recipe, "out-checked")
    assert r.returncode == 2, str(r)
    assert key in r.json()["error"], r.json()
    if secret:
        assert secret not in r.stdout + r.stderr
    assert not (out / "stack.lock.toml").exists()


def _wheel_requiring(dest: Path, name: str, requires: str) -> Path:
    """A real (minimal) wheel of `name` 1.0 that requires `requires`, as a build would leave it."""
    import zipfile

    dest.mkdir(parents=True, exist_ok=True)
    wheel = dest / f"{name}-1.0-py3-none-any.whl"
    info = f"{name}-1.0.dist-info"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr(f"{name}/__init__.py", "")
        zf.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\nRequires-Dist: {requires}\n")
        zf.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        zf.writestr(f"{info}/RECORD", "")
    return wheel


def test_builds_resolving_the_same_key_at_once_run_the_resolver_once(tmp_path):
    """The ends and the first midpoint of a bisect build at once, mostly with the same requirements: one of
    them resolves (uv, the index asked), the others wait for it and take the closure it kept (no resolve.log
    of theirs, the same closure). An index answering each request 0.2 s late keeps them overlapping."""
    import dataclasses
    import threading

    from toolchain.console import UI
    from toolchain.recipe.load import load_recipe
    from toolchain.resolve.run import resolve_built

    simple_index(wheelhouse(tmp_path / "wheels"), tmp_path / "index")
    wheel = _wheel_requiring(tmp_path / "built", "needs_tomli", "tomli")
    target = TargetInfo(python_version="3.11.7", platform="linux_x86_64")
    with CountingIndex(tmp_path / "index", latency=0.2) as index:
        recipe = dataclasses.replace(load_recipe(str(REPO / "recipes" / "demo.toml")),
                                     resolve=ResolveSpec(indexes=(f"{index.url}/simple",)))
        closures: dict[int, object] = {}

        def resolve(i: int) -> None:
            closures[i] = resolve_built(recipe, target, [("app", wheel, ())], tmp_path / "cache",
                                        tmp_path / f"logs-{i}", UI(quiet=True))

        threads = [threading.Thread(target=resolve, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=300)
        asked = index.count()
    assert len(closures) == 3 and len({repr(c) for c in closures.values()}) == 1, closures
    assert [d.name for d in next(iter(closures.values())).dists] == ["tomli"]  # type: ignore[attr-defined]
    assert sum((tmp_path / f"logs-{i}" / "resolve.log").exists() for i in range(3)) == 1
    # the one resolution asked the index as a resolution alone does (a fresh cache, one thread)
    with CountingIndex(tmp_path / "index") as alone:
        resolve_built(dataclasses.replace(recipe, resolve=ResolveSpec(indexes=(f"{alone.url}/simple",))), target,
                      [("app", wheel, ())], tmp_path / "cache-alone", tmp_path / "logs-alone", UI(quiet=True))
        assert asked == alone.count() > 0


def test_one_view_of_the_index_resolves_from_what_it_served_and_asks_it_only_for_what_is_missing(tmp_path):
    """Resolutions sharing an IndexView (a bisect's, bisect/builder.py): the first asks the index; another
    requirement set whose packages uv's cache now holds resolves without one request to it, to the same pins;
    one naming a package the cache lacks asks the index after all and resolves. Without the view, uv runs
    online as ever."""
    import dataclasses

    from toolchain.console import UI
    from toolchain.recipe.load import load_recipe
    from toolchain.resolve.run import IndexView, resolve_built

    simple_index(wheelhouse(tmp_path / "wheels"), tmp_path / "index")
    target = TargetInfo(python_version="3.11.7", platform="linux_x86_64")
    view = IndexView()
    with CountingIndex(tmp_path / "index") as index:
        recipe = dataclasses.replace(load_recipe(str(REPO / "recipes" / "demo.toml")),
                                     resolve=ResolveSpec(indexes=(f"{index.url}/simple",)))

        def resolve(name: str, requires: str, shared: IndexView | None = view):
            wheel = _wheel_requiring(tmp_path / name, name, requires)
            return resolve_built(recipe, target, [("app", wheel, ())], tmp_path / "cache", tmp_path / f"logs-{name}",
                                 UI(quiet=True), view=shared)

        first = resolve("first", "tomli")
        asked = index.count()
        assert asked > 0 and view.asked and [d.name for d in first.dists] == ["tomli"]
        second = resolve("second", "tomli>=1")  # another key: resolved, from the cache
        assert index.count() == asked
        assert [(d.name, d.version, d.sha256) for d in second.dists] == [(d.name, d.version, d.sha256)
                                                                         for d in first.dists]
        assert "--offline" in (tmp_path / "logs-second" / "resolve.log").read_text()
        third = resolve("third", "packaging")  # not in the cache: the index is asked
        assert index.count() > asked and [d.name for d in third.dists] == ["packaging"]
        resolve("fourth", "tomli>=0.1", None)  # no view: as ever, online
        assert "--offline" not in (tmp_path / "logs-fourth" / "resolve.log").read_text().split("\n")[0]
