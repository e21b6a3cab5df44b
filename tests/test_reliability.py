"""Reliability, round three (issue 21), the faults the corpus (tests/corpus/) does not cover with a table:
parallel pulls from a registry that wants credentials, a failed build's out dir, a mirror that lost its refs,
a NUL byte on its way to a process, and the dependency order of ten thousand components.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
import threading
import zipfile
from pathlib import Path

import pytest

from tests.spine_helpers import Workspace, component, recipe_data
from tests.support.registry_fixtures import AUTH_PASSWORD, AUTH_USER
from toolchain.console import UI
from toolchain.errors import UsageError

PULLS, ROUNDS = 8, 50


def _wheel(path: Path, i: int) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("tiny/__init__.py", f"N = {i}\n" + "x" * 200)
    return path


class _Quiet(UI):
    def __init__(self) -> None:
        super().__init__(quiet=True)
        self.said: list[str] = []

    def warn(self, message: str) -> None:
        self.said.append(message)

    def step(self, message: str) -> None:
        pass

    info = step


@pytest.mark.slow
def test_parallel_pulls_with_credentials_never_turn_the_remote_off(auth_registry, tmp_path, monkeypatch):
    """8 pulls at once through one client (as a build's prefetch and bisect's threads share it), 50 times, each
    time a fresh client whose first requests all meet the registry's 401 together: a thread whose 401 came
    back after another stored the Authorization used to take it as final and turn the team cache off."""
    from toolchain.build.cache import WheelCache
    from toolchain.build.entry import EntryMeta
    from toolchain.build.remotecache import RemoteCache
    from toolchain.recipe.cachespec import parse_remote_url
    from toolchain.sharing.registry import A
    from toolchain.sharing.settings import RemoteSettings

    monkeypatch.setenv("TOOLCHAIN_REGISTRY_USERNAME", AUTH_USER)
    monkeypatch.setenv("TOOLCHAIN_REGISTRY_PASSWORD", AUTH_PASSWORD)
    settings = RemoteSettings(parse_remote_url(f"oci://{auth_registry.address}/team"), push=True, insecure=True,
                              timeout=30)
    source = WheelCache(tmp_path / "source")
    keys = []
    pusher = RemoteCache(settings)
    for i in range(PULLS):
        key = f"{i:032x}"
        entry = source.put(key, _wheel(tmp_path / f"tiny-1.0.{i}-py3-none-any.whl", i), EntryMeta(component="tiny"))
        assert pusher.push(entry, {A + "cache-key": key, A + "wheel.sha256": entry.sha256}, f"tiny{i}",
                           tmp_path / "work", _Quiet()), pusher.warnings
        keys.append((key, entry.sha256))
    for round_ in range(ROUNDS):
        remote = RemoteCache(settings)  # a new client: no Authorization stored yet
        local = WheelCache(tmp_path / f"local-{round_}")
        ui = _Quiet()
        start = threading.Barrier(PULLS)
        got: dict[str, str | None] = {}

        def pull(key: str) -> None:
            start.wait()
            entry = remote.fetch(key, "tiny", local, tmp_path / "work", ui)
            got[key] = entry.sha256 if entry else None

        threads = [threading.Thread(target=pull, args=(k,)) for k, _ in keys]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert remote.off is None and ui.said == [], f"round {round_}: {ui.said}"
        assert got == dict(keys), f"round {round_}: pulled {sum(v is not None for v in got.values())} of {PULLS}"
        shutil.rmtree(tmp_path / f"local-{round_}")


def _tiny_ws(ws: Workspace, tiny_repo, **extra) -> None:
    ws.recipe("ok", recipe_data({"tiny": component(tiny_repo, dist="tiny")}, resolve={"indexes": []}))
    ws.recipe("more", recipe_data({"tiny": component(tiny_repo, dist="tiny"), **extra},
                                  resolve={"indexes": []}))


def _state(out: Path) -> dict[str, str]:
    return {str(p.relative_to(out)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(out.rglob("*")) if p.is_file() and "logs" not in p.parts}


@pytest.mark.slow
def test_a_failed_build_leaves_the_out_dir_as_it_was(ws, tiny_repo, make_repo):
    """A kernels wheel built beside the component that failed, and every wheel of a build whose closure
    could not be resolved, used to stay in out/wheels with no lock: the out dir is now as before."""
    broken = make_repo("fails", "fails")
    _tiny_ws(ws, tiny_repo, kernels=component(tiny_repo, dist="tiny", version="2.0.0"), fails=component(broken))
    ws.build("ok").json()  # the earlier build whose output must survive
    before = _state(ws.root / "out")
    r = ws.build("more", "out", "--builds-at-once", "2")
    assert r.returncode == 1 and "fails" in r.json()["error"], str(r)  # (the log's tail holds pip's traceback)
    assert _state(ws.root / "out") == before
    assert json.loads((ws.root / "out" / ".toolchain-out").read_text())["wheels"] == ["tiny-1.0.0-py3-none-any.whl"]

    # built against pip, which the resolved closure lacks: the closure's check fails after both wheels are in
    ws.recipe("more", recipe_data({"tiny": component(tiny_repo, dist="tiny"),
                                   "kernels": {**component(tiny_repo, dist="tiny", version="2.0.0"),
                                               "built-against": ["pip"]}},
                                  resolve={"indexes": []}))
    r = ws.build("more")
    assert r.returncode == 1 and "pip" in r.json()["error"] and "Traceback" not in r.stderr, str(r)
    assert _state(ws.root / "out") == before  # the kernels wheel, built and then not resolved, is gone


@pytest.mark.slow
def test_a_mirror_that_lost_its_refs_is_fetched_again(ws, tiny_repo):
    """Objects but no branches or tags (refs lost, a half-restored cache): `git describe` in the source tree
    found no names and the next builds failed; the mirror is now fetched again."""
    from toolchain.sources.mirrors import Mirrors

    _tiny_ws(ws, tiny_repo)
    first = ws.build("ok").json()
    mirror = Mirrors(ws.cache).path(tiny_repo.url)
    for ref in (mirror / "refs").rglob("*"):
        if ref.is_file():
            ref.unlink()
    (mirror / "packed-refs").unlink(missing_ok=True)
    shutil.rmtree(ws.cache / "trees")  # a source tree is checked out of the mirror again
    r = ws.build("ok", "out2", "--no-cache")
    assert r.returncode == 0, str(r)
    assert r.json()["components"][0]["describe"] == first["components"][0]["describe"] == "v1.0.0-1-g" + \
        tiny_repo.head()[:12]
    assert any((mirror / "refs" / "tags").iterdir()) or "refs/tags/" in (mirror / "packed-refs").read_text()


def test_a_nul_byte_on_its_way_to_a_process_is_a_usage_error_naming_it(tmp_path):
    from toolchain.core.proc.background import start
    from toolchain.core.proc.runner import run

    with pytest.raises(UsageError, match="environment variable TINY_FLAVOR holds a NUL byte"):
        run([sys.executable, "-c", "pass"], env={"TINY_FLAVOR": "a\x00b"})
    with pytest.raises(UsageError, match="argument 2 of .* holds a NUL byte"):
        run([sys.executable, "-c", "print(1)\x00"])
    with pytest.raises(UsageError, match="holds a NUL byte"):
        start([sys.executable, "-c", "pass"], env={"A\x00": "x"})


def test_ten_thousand_components_are_ordered_and_a_cycle_among_them_named_briefly():
    """`after` chains declared backwards (each after the one declared next), the worst case of the old order
    (it scanned every pending component per step: 56 s to plan 10,000; `python -m benchmarks.bench_hostile`
    prints the figures side by side); a cycle through all of them names ten and counts the rest."""
    from toolchain.recipe.model import Component
    from toolchain.recipe.problems import _Problems
    from toolchain.recipe.validate import _order

    n = 10_000
    comps = {f"c{i}": Component(name=f"c{i}", url="u", commit="a" * 40, after=(f"c{(i + 1) % n}",) if i + 1 < n
                                else ()) for i in range(n)}
    pr = _Problems(Path("r.toml"))
    assert [c.name for c in _order(comps, pr)] == [f"c{i}" for i in reversed(range(n))]
    assert pr.items == []
    comps["c9999"] = Component(name="c9999", url="u", commit="a" * 40, after=("c0",))
    ordered = _order(comps, pr)
    assert len(ordered) == n
    assert len(pr.items) == 1
    assert pr.items[0].endswith("`after` forms a cycle among: " + ", ".join(f"c{i}" for i in range(10))
                                + f" and {n - 10} more")
