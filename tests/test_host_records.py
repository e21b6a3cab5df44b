"""Host facts in every record: the lock (at build) and the smoke report (at serve) record the box
(TOOLCHAIN_HOST_ROOT: fake B60 and B70 x2 roots); a lock-to-lock bisect lists host differences beside the
recipe's."""

from __future__ import annotations

import json
import sys

from tests.smoke.smoke_helpers import fault_cmd
from tests.spine_helpers import component, recipe_data
from tests.support.fakehost import HOSTS


def test_locks_and_smoke_reports_record_the_box_and_bisect_names_host_differences(ws, make_repo):
    repo = make_repo("tiny", "tiny")
    ws.recipe("r", recipe_data({"tiny": component(repo)}))
    b60 = HOSTS["b60x1"].make(ws.root / "host-b60")
    b70 = HOSTS["b70x2"].make(ws.root / "host-b70")
    for out, root in (("on-b60", b60), ("on-b70", b70)):
        r = ws.build("r", out, env={"TOOLCHAIN_HOST_ROOT": str(root)})
        assert r.returncode == 0, str(r)
    assert ws.lock("on-b60") == ws.lock("on-b70")  # the same stack (the second a cache hit): the box is no fact of it
    good, bad = ws.record("on-b60"), ws.record("on-b70")  # the box each was built on: the build record's
    assert good["host"]["gpus"] == ["card0 BMG-G21 (B60 class), device 0xe211 at 0000:03:00.0"]
    assert bad["host"]["gpus"] == ["card0 BMG-G31 (B70 class), device 0xe223 at 0000:03:00.0",
                                   "card1 BMG-G31 (B70 class), device 0xe223 at 0000:04:00.0"]
    assert (good["host"]["kernel"], bad["host"]["kernel"]) == ("7.1.2-generic", "6.14.0-37-generic")
    assert bad["host"]["level-zero"] == "libze1 1.21.9-1" and bad["host"]["drivers"] == ["xe", "xe"]

    r = ws.cli("bisect", "--good-lock", ws.root / "on-b60", "--bad-lock", ws.root / "on-b70", "--test-cmd", "true",
               "--cache-dir", ws.cache, "--out", ws.root / "bis", "--json")
    assert r.returncode == 2, str(r)
    err = r.json()["error"]
    assert "nothing to bisect" in err
    assert "host kernel differs: '7.1.2-generic' -> '6.14.0-37-generic'" in err
    assert "host gpus differs" in err and "the box, not the recipe" in err

    r = ws.cli("smoke", "--lock", ws.root / "on-b70", "--no-install", "--python", sys.executable,
               "--skip-device-check", "--serve-cmd", fault_cmd("healthy"), "--cases", "math",
               "--out", ws.root / "smoke", "--json", env={"TOOLCHAIN_HOST_ROOT": str(b60)})
    report = json.loads((ws.root / "smoke" / "report.json").read_text())
    assert report["host"]["gpus"] == good["host"]["gpus"], str(r)  # where it served, not where it was built
    assert "## Host (the box served on)" in (ws.root / "smoke" / "summary.md").read_text()


def test_level_zero_and_compute_runtime_from_dpkg_or_the_library_folders(tmp_path):
    """dpkg's status names an installed package only at a line's start (its first stanza included); a package not
    installed there is looked up by its library in the library folders (the first folder, the first name)."""
    from toolchain.target.hostfacts import DPKG_STATUS, gather

    root = tmp_path / "libs"
    (root / DPKG_STATUS).parent.mkdir(parents=True)
    (root / DPKG_STATUS).write_text("Package: tools\nStatus: install ok installed\nDescription: mentions\n"
                                    " Package: libze1\n\nPackage: libze-intel-gpu1\nStatus: deinstall ok config-files\n"
                                    "Version: 9.9\n")
    for folder, name in (("usr/lib64", "libze_loader.so.1.3.0"), ("usr/lib64", "libze_loader.so.1.21.9"),
                         ("usr/lib/x86_64-linux-gnu", "libze_intel_gpu.so.1.6.3"),
                         ("usr/lib", "libze_intel_gpu.so.1.2.0")):
        (root / folder).mkdir(parents=True, exist_ok=True)
        (root / folder / name).write_bytes(b"")
    facts = gather(root)
    assert (facts.level_zero, facts.compute_runtime) == ("1.21.9", "1.6.3")
    (root / DPKG_STATUS).write_text("Package: libze1\nStatus: install ok installed\nVersion: 1.22.0-1\n\n"
                                    "Package: libze-intel-gpu1\nStatus: install ok installed\nVersion: 25.1-1")
    facts = gather(root)
    assert (facts.level_zero, facts.compute_runtime) == ("libze1 1.22.0-1", "libze-intel-gpu1 25.1-1")
