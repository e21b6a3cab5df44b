"""Real PyPI wheels for the native ABI audit, downloaded ONCE (`pip download --no-deps`) and kept under
``$TOOLCHAIN_TEST_CACHE/native-abi/`` (default ``/var/cache/toolchain-tests``):

- ``kernels/``: vllm-xpu-kernels 0.1.16.2 (150 MB; its `_xpu_C.abi3.so` needs libsycl.so.9, built with oneAPI
  DPC++ 2026.1.0);
- ``sycl8/``: intel-sycl-rt 2025.x (ships libsycl.so.8);
- ``sycl9/``: intel-sycl-rt 2026.x (ships libsycl.so.9).

A test that cannot get them (no network and no cache) is skipped, saying why."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path

import pytest

WHEELS = {
    "kernels": "vllm-xpu-kernels==0.1.16.2",
    "sycl8": "intel-sycl-rt>=2025,<2026",
    "sycl9": "intel-sycl-rt>=2026,<2027",
}


def cache_root() -> Path:
    return Path(os.environ.get("TOOLCHAIN_TEST_CACHE", "/var/cache/toolchain-tests")) / "native-abi"


def wheel(name: str) -> Path:
    """The cached wheel (downloaded under a lock on first use, so parallel sessions download once)."""
    folder = cache_root() / name
    have = sorted(folder.glob("*.whl"))
    if have:
        return have[-1]
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(cache_root() / f"{name}.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        have = sorted(folder.glob("*.whl"))
        if not have:
            part = folder.with_name(folder.name + ".part")
            r = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                                "--progress-bar", "off", "-d", str(part), WHEELS[name]],
                               capture_output=True, text=True, timeout=1800)
            if r.returncode != 0:
                pytest.skip(f"cannot download {WHEELS[name]} from the package index: {r.stderr.strip()[-300:]}")
            part.rename(folder)
            have = sorted(folder.glob("*.whl"))
    return have[-1]
