"""A warm build into a new --out (issue 26): the wheels from the cache, the closure kept, and what the process
does around them made cheaper (the collector kept off the imports' objects, the host's runtime versions
remembered). It must write exactly what the full build wrote. Real git, real builds through the CLI; the
speed itself is measured by `python -m benchmarks.bench_build`."""

from __future__ import annotations

import gc
import json

from tests.spine_helpers import component, counted, recipe_data
from toolchain.cli import main
from toolchain.lock import read_lock
from toolchain.target import hostfacts
from toolchain.target.hostfacts import DPKG_STATUS, gather


def test_a_warm_build_into_a_new_out_writes_what_the_full_build_wrote(ws, make_repo, tmp_path):
    repo = make_repo("tiny", "tiny")
    ws.recipe("r", recipe_data({"tiny": component(repo)}))
    counter = tmp_path / "counter"
    env = {"TINY_BUILD_COUNTER": str(counter)}
    first = ws.build("r", "out", env=env)
    assert first.returncode == 0, first.stderr[-3000:]
    assert counted(counter) == 1
    for n in (2, 3):  # a second new --out too: nothing the first warm build left makes the next one differ
        again = ws.build("r", f"out{n}", env=env)
        assert again.returncode == 0, again.stderr[-3000:]
        assert counted(counter) == 1  # from the wheel cache: nothing compiled
        full, warm = ws.root / "out", ws.root / f"out{n}"
        for name in ("stack.lock.toml", "pylock.toml"):
            assert (warm / name).read_bytes() == (full / name).read_bytes(), name
        wheels = sorted(p.name for p in (full / "wheels").iterdir())
        assert wheels and sorted(p.name for p in (warm / "wheels").iterdir()) == wheels
        for name in wheels:
            assert (warm / "wheels" / name).read_bytes() == (full / "wheels" / name).read_bytes()
        summary = json.loads(again.stdout)
        lock = read_lock(warm / "stack.lock.toml")
        assert [c["wheel"] for c in summary["components"]] == [c.wheel.file for c in lock.components]
        assert [c["sha256"] for c in summary["components"]] == [c.wheel.sha256 for c in lock.components]
    assert list((ws.cache / "memo").glob("host-runtimes-*.json"))  # the host's runtimes were remembered


def test_the_hosts_runtime_versions_are_remembered_until_dpkg_or_a_library_folder_changes(tmp_path,
                                                                                           monkeypatch):
    root, memo = tmp_path / "box", tmp_path / "memo"
    (root / DPKG_STATUS).parent.mkdir(parents=True)
    (root / DPKG_STATUS).write_text("Package: tools\nStatus: install ok installed\nVersion: 1\n")
    (root / "usr/lib64").mkdir(parents=True)
    (root / "usr/lib64" / "libze_loader.so.1.3.0").write_bytes(b"")
    facts = gather(root, memo)
    assert (facts.level_zero, facts.compute_runtime) == ("1.3.0", "")
    assert gather(root) == facts  # the same as read without a memo

    listed = hostfacts._lib_names
    monkeypatch.setattr(hostfacts, "_lib_names", lambda r: (_ for _ in ()).throw(AssertionError("listed again")))
    assert gather(root, memo) == facts  # nothing changed: neither the folders nor dpkg's status are read
    monkeypatch.setattr(hostfacts, "_lib_names", listed)

    (root / "usr/lib/x86_64-linux-gnu").mkdir(parents=True)  # a folder that did not exist
    (root / "usr/lib/x86_64-linux-gnu" / "libze_intel_gpu.so.1.6.3").write_bytes(b"")
    assert gather(root, memo).compute_runtime == "1.6.3"
    (root / "usr/lib64" / "libze_loader.so.1.3.0").rename(root / "usr/lib64" / "libze_loader.so.1.21.9")
    assert gather(root, memo).level_zero == "1.21.9"  # a library replaced in a folder that was there
    (root / DPKG_STATUS).write_text("Package: libze1\nStatus: install ok installed\nVersion: 1.22.0-1\n")
    assert gather(root, memo).level_zero == "libze1 1.22.0-1"  # dpkg's status rewritten
    assert gather(root, memo) == gather(root)
    assert len(list(memo.glob("host-runtimes-*.json"))) == 1  # one record per root, replaced when stale


def test_main_freezes_what_the_imports_made_and_leaves_the_collector_as_it_found_it(ws, capsys):
    assert gc.isenabled()
    assert main(["recipes", "--json", "--recipes-dir", str(ws.recipes)]) == 0
    assert gc.isenabled()
    assert gc.get_freeze_count() > 0  # the imports' objects (this module's among them) are out of its sight
    gc.disable()
    try:
        assert main(["recipes", "--json", "--recipes-dir", str(ws.recipes)]) == 0
        assert not gc.isenabled()  # a caller that turned it off finds it off
    finally:
        gc.enable()
    capsys.readouterr()
