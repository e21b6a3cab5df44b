"""A base image that holds vLLM, for the tests and benchmarks that need one (tests/smoke/test_vllm_cpu_image.py,
benchmarks/bench_image.py): the tests' Debian image with the vLLM-on-CPU environment of tests/support/vllm_cpu.py
(a venv of this machine's Python 3.11) copied into a venv at /opt/vllm of the image's own Python 3.11, with
Debian's libnuma (vLLM's CPU ops load it; the image lacks the package and this machine, the same Debian
release, has its file). Made once per machine with `podman build`, tagged by what it holds.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tests.support.closure import demo_variant
from tests.support.debian_image import containers_env
from toolchain.core import toml as tomlio

VLLM_PYTHON = "/opt/vllm/bin/python"
NUMA = "/usr/lib/x86_64-linux-gnu/libnuma.so.1"


class Unavailable(Exception):
    """What the base needs is not on this machine (said in the message)."""


def ensure_base(debian_image: str, ready: Mapping[str, Any]) -> str:
    """`localhost/toolchain-test-vllm@sha256:...` over `debian_image`, made unless podman holds it."""
    venv = Path(str(ready["python"])).parent.parent
    numa = Path(os.path.realpath(NUMA))
    if not numa.is_file():
        raise Unavailable(f"{NUMA} (Debian's libnuma1, which vLLM's CPU ops load) is not on this machine to copy in")
    key = json.dumps([debian_image, ready["spec"], numa.name], sort_keys=True)
    name = f"localhost/toolchain-test-vllm:{hashlib.sha256(key.encode()).hexdigest()[:12]}"
    if _podman("image", "exists", name, check=False).returncode != 0:
        with tempfile.TemporaryDirectory(prefix="vllm-base-") as ctx:
            lib = os.path.dirname(NUMA)
            (Path(ctx) / "Containerfile").write_text(
                f"FROM {debian_image}\n"
                f"RUN cp /numa {lib}/{numa.name} && ln -s {numa.name} {NUMA} && python3 -m venv --without-pip "
                "/opt/vllm && cp -a /src/lib/python3.11/site-packages/. /opt/vllm/lib/python3.11/site-packages/ "
                f"&& {VLLM_PYTHON} -c 'import torch, vllm, vllm._C'\n")
            _podman("build", "-q", "--network=none", "--volume", f"{venv}:/src:ro", "--volume", f"{numa}:/numa:ro",
                    "-t", name, ctx)
    digest = _podman("image", "inspect", "--format", "{{.Digest}}", name).stdout.strip()
    return f"{name.rsplit(':', 1)[0]}@{digest}"


def ark_over(base: str, recipes: Path, smoke: Mapping[str, object] | None = None) -> Path:
    """recipes/vllm-overlay.toml: the demo's ARK alone, rebuilt in a container of `base` for its /opt/vllm Python
    (the B70 fix's shape); ARK needs nothing the base lacks, so no index is asked (a closed port)."""
    recipe = demo_variant(recipes, "vllm-overlay", {"indexes": ["http://127.0.0.1:9/simple"]},
                          target={"runtime": "podman", "base": base, "python": VLLM_PYTHON},
                          **({"smoke": dict(smoke)} if smoke else {}))
    data = tomlio.load_file(recipe)
    data["components"] = {"ark": {k: v for k, v in data["components"]["ark"].items() if k != "after"}}
    recipe.write_text(tomlio.dumps(data))
    return recipe


def _podman(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["podman", *args], env=containers_env(), capture_output=True, text=True, timeout=1800,
                          stdin=subprocess.DEVNULL)
    if check and done.returncode != 0:
        raise RuntimeError(f"podman {' '.join(args)}: {done.stdout[-3000:]}{done.stderr[-3000:]}")
    return done
