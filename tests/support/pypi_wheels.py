#!/usr/bin/env python3
"""Real released wheels from PyPI that tests need, downloaded ONCE per machine and shared by every test.

They live in one toolchain cache, ``$TOOLCHAIN_TEST_CACHE/toolchain-cache`` (default cache root
``/var/cache/toolchain-tests``, as tests/support/vllm_cpu.py): the wheel cache of the tool itself, under the
key of a prebuilt file (its sha256), downloaded and checked by the tool's own code (toolchain.build.prebuilt_wheels).
So a test that runs ``toolchain build --cache-dir <that>`` with ``prebuilt = "vllm-xpu-kernels==0.1.16.2"``
finds the file there, and a test that only needs the file (the native audit's soname checks) asks
``real_wheel()`` for its path. The entry is checked against the pinned sha256 when it is served.

CLI::

    python tests/support/pypi_wheels.py fetch     # download what is missing (PINNED); prints the paths
"""

from __future__ import annotations

import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from toolchain.build.cache import WheelCache  # noqa: E402
from toolchain.build.prebuilt_wheels import PrebuiltFile, prebuilt_key, take_prebuilt  # noqa: E402


@dataclass(frozen=True)
class PinnedWheel:
    requirement: str
    file: str
    url: str
    sha256: str
    size: int

    def prebuilt(self) -> PrebuiltFile:
        return PrebuiltFile(self.file, self.url, self.sha256, self.size, self.requirement)


# vllm-xpu-kernels 0.1.16.2 as PyPI serves it (150 MB, manylinux_2_28, cp38-abi3; 8 shared libraries built with
# oneAPI DPC++ 2026.1.0): the released kernels wheel users install instead of an hour-long build.
VLLM_XPU_KERNELS = PinnedWheel(
    "vllm-xpu-kernels==0.1.16.2", "vllm_xpu_kernels-0.1.16.2-cp38-abi3-manylinux_2_28_x86_64.whl",
    "https://files.pythonhosted.org/packages/0e/97/e36d40eb29d0a8092a03eaaefdec4e4e033965c22302dd8c3fab8adfc8a1/"
    "vllm_xpu_kernels-0.1.16.2-cp38-abi3-manylinux_2_28_x86_64.whl",
    "86bfa26abbb605fab485236a386e6de07f76320177c456fa96e55c27502af17a", 150192335)


# The oneAPI DPC++ runtime as PyPI serves it: 2025.3.3 ships libsycl.so.8 (114 MB), 2026.2.0 libsycl.so.9 (172 MB);
# the kernels' libsycl.so.9 meets each in the native audit's tests.
INTEL_SYCL_RT_2025 = PinnedWheel(
    "intel-sycl-rt==2025.3.3", "intel_sycl_rt-2025.3.3-py2.py3-none-manylinux_2_28_x86_64.whl",
    "https://files.pythonhosted.org/packages/bf/e0/3a480881ae5c237261d75fbd9b0844f8942f9cc6b23d693f8d71add0fa90/"
    "intel_sycl_rt-2025.3.3-py2.py3-none-manylinux_2_28_x86_64.whl",
    "fbef5f5163492be14f65ed900f69b453432bec3d3f3f64e5e551758bfa4cecdf", 113887677)
INTEL_SYCL_RT_2026 = PinnedWheel(
    "intel-sycl-rt==2026.2.0", "intel_sycl_rt-2026.2.0-py2.py3-none-manylinux_2_28_x86_64.whl",
    "https://files.pythonhosted.org/packages/2d/e4/d00d83c95510bbf3837f956d1ad61245a5ca533bd1a84b176b789cb1e558/"
    "intel_sycl_rt-2026.2.0-py2.py3-none-manylinux_2_28_x86_64.whl",
    "ad920da1ffcb43edbc03422a7c85094997e6d578f9ab534743442af70bcbfaa1", 172457265)
PINNED = (VLLM_XPU_KERNELS, INTEL_SYCL_RT_2025, INTEL_SYCL_RT_2026)


def cache_root() -> Path:
    return Path(os.environ.get("TOOLCHAIN_TEST_CACHE") or "/var/cache/toolchain-tests")


def toolchain_cache() -> Path:
    """The `--cache-dir` the real-wheel tests share (its wheels/ keeps the downloads across runs)."""
    return cache_root() / "toolchain-cache"


def real_wheel(pin: PinnedWheel = VLLM_XPU_KERNELS) -> Path:
    """The path of `pin` in the shared cache, downloaded (and checked against its sha256) the first time."""
    cache = WheelCache(toolchain_cache())
    entry = cache.get(prebuilt_key(pin.sha256))
    if entry is None:
        with tempfile.TemporaryDirectory(dir=toolchain_cache().parent if toolchain_cache().parent.is_dir()
                                         else None) as tmp:
            take_prebuilt(pin.prebuilt(), cache, Path(tmp), toolchain_cache() / "work", "pypi_wheels")
        entry = cache.get(prebuilt_key(pin.sha256))
        assert entry is not None, f"{pin.file} was stored but cannot be read back from {toolchain_cache()}"
    return entry.wheel


if __name__ == "__main__":
    if sys.argv[1:] != ["fetch"]:
        sys.exit(__doc__)
    for pin in PINNED:
        print(real_wheel(pin))
