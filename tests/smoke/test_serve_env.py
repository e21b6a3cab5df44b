"""The serve environment (no oneAPI, profile and recipe env, secrets redacted) and the device check."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.smoke.smoke_helpers import FAULT_SERVER, fault_cmd, free_port, write_test_lock
from toolchain import scripts
from toolchain.core.devices import Card, cards_from, find_cards
from toolchain.errors import UsageError
from toolchain.lock import read_lock
from toolchain.smoke import device_check
from toolchain.smoke.config import SmokeOptions
from toolchain.smoke.server import strip_oneapi
from toolchain.smoke.session import run_smoke

ONEAPI = "/opt/intel/oneapi"


def test_strip_oneapi_removes_setvars_traces_only():
    env = {"SETVARS_COMPLETED": "1", "ONEAPI_ROOT": ONEAPI, "CMPLR_ROOT": f"{ONEAPI}/compiler/2025.1",
           "MKLROOT": f"{ONEAPI}/mkl/2025.1", "ADVISOR_2025_DIR": f"{ONEAPI}/advisor/2025.1",
           "LD_LIBRARY_PATH": f"{ONEAPI}/compiler/2025.1/lib:/usr/local/lib:{ONEAPI}/mkl/2025.1/lib",
           "PATH": f"{ONEAPI}/compiler/2025.1/bin:/usr/bin:/bin", "CPATH": f"{ONEAPI}/dpl/2022.8/include",
           "HOME": "/root", "CUSTOM_ROOT": "/srv/models", "VLLM_XPU_INC_WNA16_BACKEND": "ark"}
    out, changed = strip_oneapi(env)
    assert out == {"LD_LIBRARY_PATH": "/usr/local/lib", "PATH": "/usr/bin:/bin", "HOME": "/root",
                   "CUSTOM_ROOT": "/srv/models", "VLLM_XPU_INC_WNA16_BACKEND": "ark"}
    assert set(changed) == {"SETVARS_COMPLETED", "ONEAPI_ROOT", "CMPLR_ROOT", "MKLROOT", "ADVISOR_2025_DIR",
                            "LD_LIBRARY_PATH", "PATH", "CPATH"}


def test_server_starts_without_oneapi_with_profile_and_recipe_env(smoke, tmp_path, monkeypatch):
    monkeypatch.setenv("SETVARS_COMPLETED", "1")
    monkeypatch.setenv("ONEAPI_ROOT", ONEAPI)
    monkeypatch.setenv("CMPLR_ROOT", f"{ONEAPI}/compiler/2025.1")
    monkeypatch.setenv("LD_LIBRARY_PATH", f"{ONEAPI}/compiler/2025.1/lib:/usr/local/lib")
    monkeypatch.setenv("PATH", f"{ONEAPI}/compiler/2025.1/bin:" + os.environ["PATH"])
    dump = tmp_path / "env.json"
    lock = write_test_lock(tmp_path / "lock", {
        "model": "fault-model", "device": "b60", "cases": ["models", "math"],
        "serve-cmd": [sys.executable, str(FAULT_SERVER), "--mode", "healthy", "--env-out", str(dump),
                          "--served-model-name", "{model}", "--echo-env", "HF_API_TOKEN"],
        "env": {"VLLM_XPU_INC_WNA16_BACKEND": "w4a16", "HF_API_TOKEN": "hf_supersecretvalue"},
    })
    r = smoke("--lock", str(lock), "--skip-device-check", "--ready-timeout", "20")
    assert r.code == 0, r.stdout
    seen = json.loads(dump.read_text())
    env = seen["env"]
    for gone in ("SETVARS_COMPLETED", "ONEAPI_ROOT", "CMPLR_ROOT"):
        assert gone not in env
    assert env["LD_LIBRARY_PATH"] == "/usr/local/lib"
    assert not any(p.startswith(ONEAPI) for p in env["PATH"].split(":"))
    assert env["ZE_AFFINITY_MASK"] == "0"
    assert env["VLLM_WORKER_MULTIPROC_METHOD"] == "spawn"
    assert env["VLLM_XPU_INC_WNA16_BACKEND"] == "w4a16"
    assert env["HF_API_TOKEN"] == "hf_supersecretvalue"
    # the default command gets host and port; the lock's [smoke] drove everything else
    assert seen["argv"][-4:] == ["--host", "127.0.0.1", "--port", seen["argv"][-1]]
    text = (r.out / "report.json").read_text()
    assert "hf_supersecretvalue" not in text
    assert "<redacted>" in text
    log = (r.out / "smoke" / "server.log").read_text()
    assert "config HF_API_TOKEN=<redacted> (value <redacted>)" in log
    assert "hf_supersecretvalue" not in log
    assert set(r.run["stripped_oneapi_vars"]) >= {"SETVARS_COMPLETED", "ONEAPI_ROOT", "LD_LIBRARY_PATH", "PATH"}
    assert r.report["device"]["skipped"] is True


def _fake_card(drm: Path, pci: Path, name: str, slot: str, device: str, vendor: str = "0x8086") -> None:
    d = pci / slot
    d.mkdir(parents=True)
    (d / "vendor").write_text(vendor + "\n")
    (d / "device").write_text(device + "\n")
    (drm / name).mkdir(parents=True)
    (drm / name / "device").symlink_to(d)


def test_cards_are_found_in_sysfs(tmp_path):
    drm, pci = tmp_path / "sys/class/drm", tmp_path / "pci"
    _fake_card(drm, pci, "card1", "0000:03:00.0", "0xe211")
    _fake_card(drm, pci, "card0", "0000:00:02.0", "0x1234", vendor="0x10de")  # not Intel
    _fake_card(drm, pci, "card2", "0000:04:00.0", "0xe223")
    (drm / "card1-DP-1").mkdir()
    cards = find_cards(tmp_path)
    assert [(c.node, c.pci_id, c.slot) for c in cards] == [("card1", 0xE211, "0000:03:00.0"),
                                                           ("card2", 0xE223, "0000:04:00.0")]
    assert "BMG-G21" in cards[0].describe()


def test_the_discovery_rows_read_as_cards_the_same_for_host_and_container(tmp_path):
    """find_cards (this machine, in-process) and the device check (the script run as a file in the target)
    read the one discovery's rows with cards_from: Intel only, one per PCI device in PCI order; a target
    whose /dev/dri lacks a card's node does not count it (visible_only) and says how many it left out."""
    rows = [
        {"node": "card2", "vendor": 0x8086, "device": 0xE223, "slot": "0000:04:00.0", "driver": "xe", "visible": True},
        {"node": "card0", "vendor": 0x10DE, "device": 0x1234, "slot": "0000:01:00.0", "driver": "", "visible": True},
        {"node": "card1", "vendor": 0x8086, "device": 0xE211, "slot": "0000:03:00.0", "driver": "i915",
         "visible": False},
        {"node": "card3", "vendor": 0x8086, "device": None, "slot": "0000:05:00.0", "driver": "", "visible": True},
    ]
    every, none_left = cards_from(rows)
    assert every == [Card("card1", 0xE211, "0000:03:00.0", "i915"), Card("card2", 0xE223, "0000:04:00.0", "xe")]
    assert none_left == 0
    assert cards_from(rows, visible_only=True) == ([Card("card2", 0xE223, "0000:04:00.0", "xe")], 1)
    _fake_card(tmp_path / "sys/class/drm", tmp_path / "pci", "card0", "0000:03:00.0", "0xe211")
    assert find_cards(tmp_path) == cards_from(json.loads(subprocess.run(
        [sys.executable, str(scripts.path("cards.py")), str(tmp_path)], capture_output=True, text=True,
        check=True).stdout))[0] == [Card("card0", 0xE211, "0000:03:00.0")]


def test_device_check_messages(tmp_path):
    b60 = Card("card0", 0xE211, "0000:03:00.0")
    b70 = Card("card1", 0xE223, "0000:04:00.0")
    assert device_check.check("b60", 1, "0", [b60]).ok
    wrong = device_check.check("b70", 1, "0", [b60])
    assert not wrong.ok
    assert "use --device b60" in wrong.message
    assert "0xe211" in wrong.message
    assert device_check.check("b70", 1, "1", [b60, b70]).ok
    short = device_check.check("b70", 2, "0,1", [b70])
    assert not short.ok
    assert "only 1 Intel GPU" in short.message
    none = device_check.check("b70", 1, "", [])
    assert not none.ok
    assert "no Intel GPU was found" in none.message
    assert device_check.mask_cards("0.0,1.0,1.1") == [0, 1]


def test_device_profiles_env():
    assert device_check.device_env(device_check.profile("b70"), 2, {}) == {"ZE_AFFINITY_MASK": "0,1",
                                                                 "VLLM_WORKER_MULTIPROC_METHOD": "spawn"}
    assert device_check.device_env(device_check.profile("b70"), 1, {"ZE_AFFINITY_MASK": "1"}) == \
        {"VLLM_WORKER_MULTIPROC_METHOD": "spawn"}
    with pytest.raises(UsageError, match="at most 1 card"):
        device_check.device_env(device_check.profile("b60"), 2, {})
    with pytest.raises(UsageError, match="names 1 card"):
        device_check.device_env(device_check.profile("b70"), 2, {"ZE_AFFINITY_MASK": "0"})


@pytest.mark.skipif(bool(find_cards()), reason="this machine has Intel GPUs")
def test_missing_cards_stop_before_serving(smoke, tmp_path):
    dump = tmp_path / "env.json"
    r = smoke("--serve-cmd", fault_cmd("healthy", "--env-out", str(dump)), "--device", "b70", "--cases", "math")
    assert r.code == 2
    out = json.loads(r.stdout)
    assert "no Intel GPU was found" in out["error"]
    assert "--skip-device-check" in out["hint"]
    assert not dump.exists()  # nothing was served
    assert r.report["exit_code"] == 2
    assert "no Intel GPU" in r.report["error"]


def test_recipe_profile_changes_and_adds_cases(tmp_path):
    """The library entry point (what `toolchain bisect --test smoke` calls) with a lock-only profile."""
    dump = tmp_path / "env.json"
    lock = write_test_lock(tmp_path / "lock", {
        "model": "/models/some-model", "served-model-name": "fault-model", "max-model-len": 4096, "repeat": 5,
        "serve-cmd": [sys.executable, str(FAULT_SERVER), "--mode", "healthy", "--env-out", str(dump)],
        "serve-args": ["--enforce-eager"], "cases": ["math", "repeat", "capital", "sevens"],
        "custom-cases": [
            {"name": "math", "prompt": "What is 2+3? Reply with digits.", "expect-number": "5"},
            {"name": "capital", "prompt": "What is the capital of France?", "expect": "Paris"},
            {"name": "sevens", "prompt": "Say hello.", "expect": "seven", "required": False},
        ],
    })
    outcome = run_smoke(read_lock(lock), out_dir=tmp_path / "out",
                        options=SmokeOptions(port=free_port(), ready_timeout=20))
    assert outcome.passed and outcome.exit_code == 0, outcome.summary
    cases = {c.name: c for c in outcome.runs[0].cases}
    assert cases["math"].exchanges[0].request["messages"][0]["content"] == "What is 2+3? Reply with digits."
    assert len(cases["repeat"].exchanges) == 5
    assert cases["capital"].passed
    assert cases["sevens"].verdict == "fail"
    assert not cases["sevens"].required
    argv = json.loads(dump.read_text())["argv"]  # the fault server's sys.argv: script, then arguments
    port = str(outcome.report["config"]["port"])
    assert argv[5:] == ["--host", "127.0.0.1", "--port", port, "--served-model-name", "fault-model",
                        "--max-model-len", "4096", "--enforce-eager"]


def test_a_locks_smoke_table_is_typed_as_a_recipes(smoke, tmp_path):
    """Smoke reads the lock's [smoke] through the recipe's own typing (recipe.validate.smoke_spec): a wrong type
    or an unknown key is a recipe error naming the key (exit 2), never a traceback; nothing is served."""
    dump = tmp_path / "env.json"
    lock = write_test_lock(tmp_path / "lock", {"tensor-parallel-size": "two", "ready-timout": 5,
                                               "serve-cmd": [sys.executable, str(FAULT_SERVER), "--env-out",
                                                             str(dump)]})
    r = smoke("--lock", str(lock))
    assert r.code == 2, r.stdout
    out = json.loads(r.stdout)
    assert "smoke.tensor-parallel-size: must be an integer" in out["error"]
    assert "smoke.ready-timout: unknown key (did you mean 'ready-timeout'?)" in out["error"]
    assert not dump.exists()


def test_no_device_named_means_none_in_the_recipe_and_in_smoke(tmp_path):
    """One default: a [smoke] without `device` asks for no device, in the recipe as in smoke (no device check,
    no profile environment)."""
    from toolchain.recipe.validate import smoke_spec
    from toolchain.smoke.config import build_config

    spec = smoke_spec({"model": "m"}, "x.toml [smoke]")
    assert spec.device == ""
    config = build_config(SmokeOptions(), spec, sys.executable)
    assert config.device == ""
    assert "ZE_AFFINITY_MASK" not in config.env
