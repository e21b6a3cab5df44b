"""End to end against real vLLM (vllm-cpu 0.32.0) serving SmolLM2-135M on 127.0.0.1.

Needs the environment made by `python tests/support/vllm_cpu.py setup` (about 3 minutes once, cached under
$TOOLCHAIN_TEST_CACHE, default /var/cache/toolchain-tests); skipped with the reason when it is missing.
This test takes about 2.5 minutes: two server starts (the restart case) of about 50 s each.
"""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET

import jsonschema
import pytest

from tests.smoke.smoke_helpers import free_port, write_test_lock
from tests.support import vllm_cpu
from toolchain.smoke.cases import ANIMAL_SCHEMA

READY, WHY = vllm_cpu.find()

CASES = ["models", "first", "math", "qa", "json", "repeat", "long-context", "image", "restart"]


def test_missing_environment_gives_the_set_up_command(tmp_path, monkeypatch):
    monkeypatch.setenv("TOOLCHAIN_TEST_CACHE", str(tmp_path))
    data, why = vllm_cpu.find()
    assert data is None
    assert "python tests/support/vllm_cpu.py setup" in why
    assert str(tmp_path) in why


@pytest.mark.vllm
@pytest.mark.slow
@pytest.mark.skipif(READY is None, reason=WHY or "")
def test_smoke_against_real_vllm_on_cpu(tmp_path):
    assert READY is not None  # the skipif above
    lock = write_test_lock(tmp_path / "dist", {
        "model": READY["model"], "served-model-name": vllm_cpu.MODEL_NAME,
        # `vllm serve` does not work with the vllm-cpu distribution; its API server module does.
        "serve-cmd": ["{python}", "-m", "vllm.entrypoints.openai.api_server", "--model", "{model}"],
        "serve-args": ["--enforce-eager", "--max-model-len", "2048"],
        "env": READY["env"], "cases": CASES,
        "custom-cases": [{"name": "long-context", "long-context-tokens": 400},
                         {"name": "image", "required": False}],  # a text-only model: fails, optional here
        "ready-timeout": 900, "request-timeout": 300,
    }, python=READY["python"])
    out = tmp_path / "smoke"
    proc = subprocess.run([sys.executable, "-m", "toolchain", "smoke", "--json", "--lock", str(lock), "--no-install",
                           "--port", str(free_port()), "--out", str(out)],
                          capture_output=True, text=True, timeout=1500)
    report = json.loads((out / "report.json").read_text())
    run = report["runs"][0]
    cases = {c["name"]: c for c in run["cases"]}
    timings = {name: round(c["seconds"], 1) for name, c in cases.items()}
    print(f"\nvllm-cpu smoke: ready {run['ready']['seconds']:.1f}s, total {report['seconds']:.1f}s, cases {timings}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout)["ok"] is True
    assert run["argv"][:3] == [READY["python"], "-m", "vllm.entrypoints.openai.api_server"]
    assert "--host" in run["argv"]
    assert run["argv"][run["argv"].index("--host") + 1] == "127.0.0.1"
    for name in CASES:
        if name != "image":
            assert cases[name]["verdict"] == "pass", cases[name]["message"]
    # the structured output really is schema-valid JSON, from the raw response
    raw = json.loads(cases["json"]["exchanges"][-1]["response"])
    assert cases["json"]["exchanges"][-1]["request"]["response_format"]["type"] == "json_schema"
    jsonschema.validate(json.loads(raw["choices"][0]["message"]["content"]), ANIMAL_SCHEMA)
    assert "5" in cases["math"]["message"]
    assert cases["first"]["metrics"]["latency_seconds"] > 0
    assert cases["first"]["metrics"]["completion_tokens"] > 0
    assert cases["restart"]["metrics"]["restart_seconds"] > 0
    # the optional image case fails, clearly, without failing the run
    assert cases["image"]["verdict"] == "fail"
    assert not cases["image"]["required"]
    assert "multimodal" in cases["image"]["message"]
    log = (out / "smoke" / "server.log").read_text()
    assert log.count("### toolchain smoke: start #") == 2
    assert "Application startup complete" in log
    junit = ET.parse(out / "junit.xml").getroot()
    assert junit.get("failures") == "0"
    assert junit.get("errors") == "0"
    assert junit.get("skipped") == "1"
