"""Journeys, round three (issue 40), through the installed wheel: `doctor` under a podman whose default ulimits
cannot be applied, with the recipe's image absent (the engine tried with doctor's own tiny image, never another
image the engine holds) and present, and with the shipped run-args' `--device /dev/dri` on this box without a
GPU: the run-args failure told apart from the engine's own, the fix naming the containers.conf a user has.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.journeys.test_round_two import NO_ULIMITS_MISSING, OFFLINE
from tests.support.container_fixtures import podman_image  # noqa: F401  (pytest fixture)

pytestmark = [pytest.mark.slow, pytest.mark.container]
WORKS = {"CONTAINERS_CONF": "/etc/containers/toolchain-tests.conf"}  # the setting the fix names, as the tests have it
ABSENT = "localhost/toolchain-tests-absent:1"


def _engine(me, recipe: str, env: dict[str, str]) -> dict[str, dict[str, str]]:
    r = me("doctor", "--recipe", recipe, "--json", env={**OFFLINE, **env})
    assert r.returncode == 0, str(r)
    return {f["topic"]: f for f in r.json()["findings"] if f["topic"] in ("image", "run-args", "container engine")}


@pytest.mark.skipif(Path("/dev/dri").exists(), reason="this box has a GPU's /dev/dri: the run-args start")
def test_doctor_tells_the_run_args_from_the_engine_with_and_without_the_image(user, tmp_path, podman_image):  # noqa: F811
    conf = tmp_path / "containers.conf"
    conf.write_text(NO_ULIMITS_MISSING)
    broken = {"CONTAINERS_CONF": str(conf)}
    me = user.at(tmp_path / "home" / "me")
    (me.cwd / "recipes").mkdir(parents=True)
    gpu = 'run-args = ["--device", "/dev/dri"]\n'
    for name, image in (("absent", ABSENT), ("present", podman_image)):
        (me.cwd / "recipes" / f"{name}.toml").write_text(
            f'extends = "demo"\n\n[target]\nruntime = "podman"\nimage = "{image}"\n{gpu}')

    # no image: the engine is still tried, with doctor's own image, and its own failure (rlimit) is the one shown
    seen = _engine(me, "absent", broken)
    assert seen["image"]["status"] == "warn" and "not present" in seen["image"]["value"]
    engine = seen["container engine"]
    assert engine["status"] == "missing" and "podman's default ulimits cannot be applied here" in engine["value"]
    assert "toolchain-doctor-trial" in engine["value"] and podman_image not in engine["value"], engine
    assert "default_ulimits = []" in engine["fix"] and str(conf) in engine["fix"], engine
    assert "toolchain-tests.conf" not in engine["fix"]

    # the recipe's image here: the same verdict, from that image
    engine = _engine(me, "present", broken)["container engine"]
    assert engine["status"] == "missing" and "podman's default ulimits" in engine["value"], engine
    assert podman_image in engine["value"]

    # the engine fixed: the run-args' failure is its own line (no GPU here), the engine starts containers
    for recipe in ("absent", "present"):
        seen = _engine(me, recipe, WORKS)
        assert seen["run-args"]["status"] == "missing" and "/dev/dri" in seen["run-args"]["value"], seen
        assert "drop --device /dev/dri" in seen["run-args"]["fix"]
        assert seen["container engine"]["status"] == "ok", seen
        assert "without the recipe's run-args" in seen["container engine"]["value"]


def test_the_rlimit_fix_names_a_users_containers_conf_files(monkeypatch):
    from toolchain.target.container.engine import rlimit_fix

    monkeypatch.delenv("CONTAINERS_CONF", raising=False)
    fix = rlimit_fix()
    assert "/etc/containers/containers.conf" in fix and "~/.config/containers/containers.conf" in fix
    assert "default_ulimits = []" in fix and "toolchain-tests" not in fix
