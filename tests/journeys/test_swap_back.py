"""Journeys, round three (issue 40), through the installed wheel: a component swapped for a prebuilt two levels
down is swapped back by a recipe that gives only its url and commit, and builds as the recipe that built it from
source did (its fetchcontent, built-against and inputs restored), which `plan` says.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.spine_helpers import shipped_demo_commit

pytestmark = pytest.mark.slow

KERNELS_COMMIT = shipped_demo_commit("kernels")
MY_KERNELS = '''\
description = "the demo with a kernel preset"
extends = "demo"

[components.kernels]
inputs = ["configs/kernel.cfg"]
'''
MY_SOURCE = f'''\
description = "back to the kernels from source: url and commit only"
extends = "my-prebuilt"

[components.kernels]
url = "https://demo.invalid/toolchain-demo/kernels.git"
commit = "{KERNELS_COMMIT}"
'''


def test_swapped_for_a_prebuilt_two_levels_down_and_back_builds_as_before(user, tmp_path):
    home = tmp_path / "home"
    me = home / "me"
    (me / "recipes" / "configs").mkdir(parents=True)
    (me / "recipes" / "configs" / "kernel.cfg").write_text("tile = 64\n")
    (me / "recipes" / "my-kernels.toml").write_text(MY_KERNELS)
    mine = user.at(me)
    first = {c["name"]: c for c in mine.ok("build", "--recipe", "my-kernels", "--out", home / "first",
                                            "--json").json()["components"]}
    wheel = Path(shutil.copy(first["kernels"]["path"], home))
    sha = first["kernels"]["sha256"]
    (me / "recipes" / "my-prebuilt.toml").write_text(
        f'description = "my kernels wheel"\nextends = "my-kernels"\n\n[components.kernels]\n'
        f'prebuilt = {{ url = "{wheel.as_uri()}", sha256 = "{sha}" }}\n')
    pre = mine.ok("plan", "--recipe", "my-prebuilt", "--json").json()
    (swap,) = pre["recipe"]["swapped"]
    assert {"inputs", "fetchcontent", "built-against"} <= set(swap["dropped"])
    text = mine.ok("plan", "--recipe", "my-prebuilt", env={"COLUMNS": "200"}).stdout
    assert "wheel: demo_kernels-" in text, text  # under the source column, labelled as the wheel

    # back, two levels below the recipe that had the inputs: they, the fetchcontent and built-against come back
    (me / "recipes" / "my-source.toml").write_text(MY_SOURCE)
    plan = mine.ok("plan", "--recipe", "my-source", "--json").json()
    back = plan["recipe"]["swapped"][1]
    assert back["to"] == "source" and back["restored-from"] == "my-prebuilt.toml"
    assert {"inputs", "fetchcontent", "built-against"} <= set(back["restored"])
    kernels = next(c for c in plan["components"] if c["name"] == "kernels")
    assert [i["path"] for i in kernels["inputs"]] == ["configs/kernel.cfg"]
    assert kernels["inputs"][0]["found-in"] == str(me / "recipes" / "configs" / "kernel.cfg")
    assert [f["name"] for f in kernels["fetchcontent"]] == ["demoheaders"]
    text = mine.ok("plan", "--recipe", "my-source", env={"COLUMNS": "200"}).stdout
    assert "restored as they were before my-prebuilt.toml swapped them out: " in text, text
    assert "input configs/kernel.cfg" in text, text
    built = {c["name"]: c for c in mine.ok("build", "--recipe", "my-source", "--out", home / "back",
                                            "--json").json()["components"]}
    # the same cache key as the first build: every build key restored (inputs included), the same wheel
    assert built["kernels"]["cache-key"] == first["kernels"]["cache-key"]
    assert built["kernels"]["sha256"] == sha and built["kernels"]["source"] == "local-cache"
