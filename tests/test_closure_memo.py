"""Resolve once per change (issue 26): the closure is kept under a key made of the built wheels' metadata
(name, version, Requires-Dist, Requires-Python; not the wheel's hash), the [resolve] settings and the target's
Python and platform. A build into a new --out whose key is kept asks no index (the index is stopped) and takes
the same closure; `toolchain lock --refresh` resolves again on purpose, and the lock says when its closure was
resolved. The [resolve] table's platform and URLs are checked before anything is built (exit 2 naming the key,
no credential shown). Real builds, uv and a PEP 503 index served on 127.0.0.1 that counts its requests."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from spine_helpers import Cli, isolated_env
from support.closure import (
    REPO,
    WHEELHOUSE,
    CountingIndex,
    build_standin_torch,
    demo_variant,
    simple_index,
    wheelhouse,
)

from toolchain.lock import read_lock
from toolchain.recipe.model import ResolveSpec
from toolchain.resolve.memo import closure_key, wheel_meta
from toolchain.target.facts import TargetInfo

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def warm(demo_build, tmp_path_factory):
    """A copy of the demo build's cache (every component cached) and a CLI to build recipe variants with it."""
    root = tmp_path_factory.mktemp("closure-memo")
    shutil.copytree(demo_build.cache, root / "cache", symlinks=True)
    cli = Cli(root, isolated_env(root))

    def build(recipe: Path, out: str, *args):
        r = cli("build", "--recipe", recipe, "--patches-dir", REPO / "patches", "--cache-dir", root / "cache",
                "--out", root / out, "--json", *args)
        return r, root / out

    return root, cli, build


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
    assert resolved is not None and re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", resolved.resolved_at)
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
    assert refreshed is not None and refreshed.resolved_at > resolved.resolved_at
    assert refreshed.dists == resolved.dists
    assert f'resolved-at = "{refreshed.resolved_at}"' in lock_path.read_text()


def test_the_key_is_the_wheels_metadata_not_their_hash(tmp_path):
    """A rebuilt wheel with the same metadata (another file, another sha256) has the same key; another version
    or another [resolve], Python or platform has another."""
    shipped = next(WHEELHOUSE.glob("standin_torch-*.whl"))
    rebuilt = build_standin_torch("2.14.0+xpu", tmp_path / "rebuilt")
    cpu = build_standin_torch("2.14.0+cpu", tmp_path / "cpu")
    assert shipped.read_bytes() != rebuilt.read_bytes()
    target = TargetInfo(python_version="3.11.7", platform="linux_x86_64")
    spec = ResolveSpec()

    def key(wheel: Path, spec: ResolveSpec = spec, target: TargetInfo = target) -> str:
        return closure_key(spec, target, [("torch", wheel_meta(wheel))])

    assert wheel_meta(shipped).version == "2.14.0+xpu" and wheel_meta(shipped).name == "standin-torch"
    assert key(shipped) == key(rebuilt)
    assert key(cpu) != key(shipped)
    assert key(shipped, ResolveSpec(indexes=("http://127.0.0.1:1/simple",))) != key(shipped)
    assert key(shipped, ResolveSpec(platform="aarch64-manylinux_2_28")) != key(shipped)
    assert key(shipped, target=TargetInfo(python_version="3.12.1", platform="linux_x86_64")) != key(shipped)
    engine_whl = next(WHEELHOUSE.glob("tomli-*.whl"))  # any wheel with other metadata
    assert key(engine_whl) != key(shipped)


@pytest.mark.parametrize("table, key, secret", [
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
    root, cli, build = warm
    recipe = demo_variant(root / "recipes", "checked", table)
    r, out = build(recipe, "out-checked")
    assert r.returncode == 2, str(r)
    assert key in r.json()["error"], r.json()
    if secret:
        assert secret not in r.stdout + r.stderr
    assert not (out / "stack.lock.toml").exists()
