"""`toolchain cache prune --remote` (issue 35): retention for the remote wheel cache on a real registry
(Debian's docker-registry on 127.0.0.1, tests/support/registry.py), entries pushed as the tool pushes them
(OCI artifacts tagged by cache key) with their creation dates set: what is older goes, what is newer stays,
`--keep N` keeps each component's newest, `--dry-run` changes nothing, a registry without deletes is a clear
error."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import requests

from tests.spine_helpers import Cli, isolated_env
from tests.support.registry import registry_available, run_registry
from tests.support.registry_fixtures import require
from toolchain.recipe.cachespec import parse_remote_url
from toolchain.sharing.registry import CREATED, MT_META, MT_WHEEL, A, Registry
from toolchain.sharing.retention import Dated, created_at, decide, parse_age
from toolchain.sharing.settings import RemoteSettings

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
DAY = 86400.0


def stamp(days_ago: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - days_ago * DAY))


def push(reg, tmp: Path, key: str, component: str, days_ago: float) -> str:
    """One entry as the tool stores it (a wheel and its metadata, annotated), created `days_ago`."""
    client = Registry(RemoteSettings(parse_remote_url(f"oci://{reg.address}/team"), insecure=True))
    folder = tmp / "parts" / key
    folder.mkdir(parents=True)
    wheel = folder / f"{component}-1.0-py3-none-any.whl"
    wheel.write_bytes(f"wheel {key}".encode())
    meta = folder / "entry.json"
    meta.write_text(f'{{"component": "{component}"}}')
    return client.push(key, [(wheel, MT_WHEEL), (meta, MT_META)],
                       {CREATED: stamp(days_ago), A + "component": component, A + "commit": key[:12] * 3,
                        A + "wheel": wheel.name}, tmp / "work")


def held(reg) -> set[str]:
    r = requests.get(f"{reg.url}/v2/team/wheels/tags/list", timeout=30)
    return set(r.json().get("tags") or []) if r.status_code == 200 else set()


def key(i: int) -> str:
    return f"{i:032x}"


@pytest.fixture
def entries(registry, tmp_path):
    """kernels: 40, 20 and 1 day old; ark: 45 and 35 days old; vllm: 2 days old."""
    ages = {key(1): ("kernels", 40), key(2): ("kernels", 20), key(3): ("kernels", 1), key(4): ("ark", 45),
            key(5): ("ark", 35), key(6): ("vllm", 2)}
    digests = {k: push(registry, tmp_path, k, comp, age) for k, (comp, age) in ages.items()}
    assert held(registry) == set(ages)
    return digests


def prune(cli: Cli, reg, *args: object):
    return cli("cache", "prune", "--remote", f"oci://{reg.address}/team", "--remote-insecure", "--json", *args)


@pytest.mark.slow
def test_older_goes_newer_stays_and_a_dry_run_changes_nothing(registry, entries, tmp_path):
    cli = Cli(tmp_path, isolated_env(tmp_path / "home"))
    dry = prune(cli, registry, "--older-than", "30d", "--dry-run")
    assert dry.returncode == 0, str(dry)
    assert sorted(r["key"] for r in dry.json()["removed"]) == [key(1), key(4), key(5)]
    assert dry.json()["dry-run"] is True and dry.json()["manifests-deleted"] == 0
    assert held(registry) == {key(i) for i in range(1, 7)}, "a dry run deletes nothing"

    r = prune(cli, registry, "--older-than", "30d", "--keep", "1")  # ark's newest stays, however old
    assert r.returncode == 0, str(r)
    assert sorted(x["key"] for x in r.json()["removed"]) == [key(1), key(4)]
    assert r.json()["manifests-deleted"] == 2
    assert held(registry) == {key(2), key(3), key(5), key(6)}
    for gone in (key(1), key(4)):
        m = requests.get(f"{registry.url}/v2/team/wheels/manifests/{entries[gone]}",
                         headers={"Accept": OCI_MANIFEST}, timeout=30)
        assert m.status_code == 404, "the manifest itself is deleted, not only its tag"
    kept = {x["key"]: x["why"] for x in r.json()["kept"]}
    assert "among the 1 newest of ark" in kept[key(5)] and "within 30d" in kept[key(2)]

    ls = cli("cache", "ls", "--remote", f"oci://{registry.address}/team", "--remote-insecure", "--json")
    assert sorted(e["key"] for e in ls.json()["entries"]) == [key(2), key(3), key(5), key(6)]

    again = prune(cli, registry, "--keep", "1", "--component", "kernels")  # --keep alone: beyond the newest
    assert again.returncode == 0, str(again)
    assert [x["key"] for x in again.json()["removed"]] == [key(2)]
    assert held(registry) == {key(3), key(5), key(6)}


@pytest.mark.slow
def test_a_registry_that_refuses_deletes_gets_a_clear_message(tmp_path):
    require(registry_available(), "registry", "TOOLCHAIN_REQUIRE_REGISTRY")
    cli = Cli(tmp_path, isolated_env(tmp_path / "home"))
    with run_registry(tmp_path / "registry", delete=False) as reg:
        push(reg, tmp_path, key(1), "kernels", 40)
        r = prune(cli, reg, "--older-than", "30d")
        assert r.returncode == 1, str(r)
        text = " ".join(r.stderr.split())
        assert "does not delete manifests (HTTP 405 UNSUPPORTED)" in text and "nothing was removed" in text
        assert "delete: {enabled: true}" in text and "REGISTRY_STORAGE_DELETE_ENABLED=true" in text
        assert "Traceback" not in r.stderr
        assert held(reg) == {key(1)}
        assert prune(cli, reg, "--older-than", "30d", "--dry-run").returncode == 0  # a dry run deletes nothing


@pytest.mark.parametrize(("args", "says"), [
    ((), "say what to keep"),
    (("--older-than", "a month"), "is not an age"),
    (("--keep", "-1"), "0 or more"),
])
def test_a_rule_that_is_not_understood_is_exit_2(tmp_path, args, says):
    cli = Cli(tmp_path, isolated_env(tmp_path / "home"))
    r = cli("cache", "prune", "--remote", "oci://127.0.0.1:9/team", "--json", *args)
    assert r.returncode == 2 and says in r.stderr, str(r)
    local = cli("cache", "prune", "--keep", "3")  # (the local cache keeps by size: --keep-size)
    assert local.returncode == 2 and "--remote" in local.stderr, str(local)


# ---- the rule -----------------------------------------------------------------------------------------------

def test_ages_and_dates():
    assert parse_age("30d") == 30 * DAY and parse_age("12h") == 43200 and parse_age("2w") == 14 * DAY
    for bad in ("30", "0d", "-1d", "d", "30 days"):
        with pytest.raises(ValueError, match="is not an age"):
            parse_age(bad)
    assert created_at("1970-01-02T00:00:00Z") == DAY
    assert created_at("1970-01-02T01:00:00+01:00") == DAY
    assert created_at("yesterday") is None


def test_the_rule_keeps_undated_entries_and_a_manifest_another_kept_tag_names():
    now = 100 * DAY
    old, new = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(10 * DAY)), \
        time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(99 * DAY))
    entries = [Dated("a", "sha256:1", "k", old), Dated("b", "sha256:2", "k", ""), Dated("c", "sha256:3", "k", new),
               Dated("d", "sha256:3", "k", old)]
    verdicts = {v.entry.key: v for v in decide(entries, now, 30 * DAY, None)}
    assert verdicts["a"].remove and not verdicts["b"].remove and not verdicts["c"].remove
    assert not verdicts["d"].remove and "another, kept entry" in verdicts["d"].why
    keep0 = decide(entries, now, None, 0)
    assert [v.entry.key for v in keep0 if v.remove] == ["a", "c", "d"]  # --keep 0: all but the undated


# ---- the local cache ----------------------------------------------------------------------------------------

def local_entry(cache: Path, tmp: Path, key: str, component: str, days_ago: float, size: int) -> Path:
    """One entry as a build stores it (WheelCache.put), its `stored` date set `days_ago`."""
    from toolchain.build.cache import WheelCache
    from toolchain.build.entry import EntryMeta
    from toolchain.core import trust

    wheel = tmp / "made" / key / f"{component}-1.0-py3-none-any.whl"
    wheel.parent.mkdir(parents=True)
    wheel.write_bytes(b"w" * size)
    entry = WheelCache(cache).put(key, wheel, EntryMeta(component=component))
    meta_file = entry.wheel.parent / "entry.json"
    meta = trust.unseal(meta_file.read_bytes(), key)
    assert meta is not None
    meta["stored"] = time.time() - days_ago * DAY
    meta_file.write_text(trust.sealed(key, meta))  # (sealed again: an entry records its key and checksum)
    return entry.wheel.parent


@pytest.fixture
def local(tmp_path):
    """A local cache of three entries (40, 20 and 1 day old; 10, 20 and 30 kB) and a `cache prune` on it."""
    cache = tmp_path / "home" / "cache"
    made = {k: local_entry(cache, tmp_path, k, comp, age, size) for k, comp, age, size in
            ((key(1), "kernels", 40, 10_000), (key(2), "engine", 20, 20_000), (key(3), "kernels", 1, 30_000))}
    cli = Cli(tmp_path, isolated_env(tmp_path / "home"))

    def run(*args: object):
        r = cli("cache", "prune", "--cache-dir", cache, "--json", *args)
        assert r.returncode == 0, str(r)
        return r.json()

    return cache, made, run


def test_local_prune_by_age_and_a_dry_run_that_changes_nothing(local):
    cache, made, run = local
    dry = run("--older-than", "30d", "--dry-run")
    assert [r["key"] for r in dry["removed"]] == [key(1)] and dry["dry-run"] and dry["bytes-freed"] == 0
    assert {r["key"] for r in dry["kept"]} == {key(2), key(3)}
    assert all(p.is_dir() for p in made.values())
    done = run("--older-than", "30d")
    assert [r["key"] for r in done["removed"]] == [key(1)] and done["bytes-freed"] > 10_000
    assert not made[key(1)].exists() and made[key(2)].is_dir() and made[key(3)].is_dir()
    ls = Cli(cache.parent.parent, isolated_env(cache.parent))("cache", "ls", "--cache-dir", cache, "--json")
    assert {e["key"] for e in ls.json()["entries"]} == {key(2), key(3)}


def test_local_prune_keeps_the_newest_within_a_size_and_both_rules_combine(local):
    _, made, run = local
    both = run("--keep-size", "40kB", "--older-than", "30d", "--dry-run")  # 20d old, beyond 40 kB, but recent
    assert [r["key"] for r in both["removed"]] == [key(1)]
    size = run("--keep-size", "40kB")  # the 1-day-old (30 kB) fits; the 20-day-old would make it 50 kB
    assert {r["key"] for r in size["removed"]} == {key(1), key(2)}
    assert [r["key"] for r in size["kept"]] == [key(3)] and made[key(3)].is_dir()
    assert not made[key(1)].exists() and not made[key(2)].exists()


def test_local_prune_never_follows_a_symbolic_link_out_of_the_cache(local, tmp_path):
    cache, made, run = local
    outside = tmp_path / "outside"
    old = local_entry(outside, tmp_path, key(9), "kernels", 400, 1000)  # an old entry in another cache
    (cache / "wheels" / "zz").symlink_to(old.parent, target_is_directory=True)  # a fan-out folder: a link
    (cache / "wheels" / key(1)[:2] / key(8)).symlink_to(old, target_is_directory=True)  # an entry: a link
    done = run("--older-than", "1s")
    assert {r["key"] for r in done["removed"]} == {key(1), key(2), key(3)}
    assert set(done["links-not-followed"]) == {str(cache / "wheels" / "zz"), str(cache / "wheels" / key(1)[:2] / key(8))}
    assert (old / "entry.json").is_file() and len(list(old.glob("*.whl"))) == 1  # nothing removed out there
    # the wheels folder itself a link: nothing listed through it, nothing removed
    for p in made.values():
        assert not p.exists()
    moved = tmp_path / "moved-wheels"
    (cache / "wheels").rename(moved)
    (cache / "wheels").symlink_to(outside / "wheels", target_is_directory=True)
    again = run("--older-than", "1s")
    assert again["removed"] == [] and again["links-not-followed"] == [str(cache / "wheels")]
    assert (old / "entry.json").is_file()


def test_local_prune_wants_a_rule(tmp_path):
    cli = Cli(tmp_path, isolated_env(tmp_path / "home"))
    for args, says in (((), "say what to keep"), (("--keep-size", "lots"), "is not a size"),
                       (("--older-than", "1d", "--component", "x"), "go with --remote")):
        r = cli("cache", "prune", "--json", *args)
        assert r.returncode == 2 and says in r.stderr and "Traceback" not in r.stderr, str(r)
