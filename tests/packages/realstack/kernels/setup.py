"""realstack kernels (stand in for vllm-xpu-kernels): a C extension built with setuptools.

Like the real kernels: version from `git describe --tags --long --match 'v*'` (setuptools-scm scheme,
VLLM_VERSION_OVERRIDE first); the oneAPI environment is required (CMPLR_ROOT, `$CMPLR_ROOT/bin/icpx
--version` as cmake/toolchain.cmake does); the FetchContent sources are never fetched here (offline): oneDNN
must be handed as -DFETCHCONTENT_SOURCE_DIR_ONEDNN=<dir> in CMAKE_ARGS and cutlass-sycl as
$REALSTACK_CUTLASS_SRC_DIR (like VLLM_CUTLASS_SRC_DIR).
"""
import os
import re
import shlex
import subprocess
import sys

from setuptools import Extension, setup

HERE = os.path.dirname(os.path.abspath(__file__))


def version():
    override = os.environ.get("VLLM_VERSION_OVERRIDE") or os.environ.get("SETUPTOOLS_SCM_PRETEND_VERSION")
    if override:
        return override
    desc = subprocess.check_output(["git", "describe", "--tags", "--long", "--match", "v*"], cwd=HERE,
                                   text=True).strip()
    tag, distance, sha = desc.rsplit("-", 2)
    base = tag.lstrip("v")
    if distance == "0":
        return base
    major, minor, patch = base.split(".")
    return f"{major}.{minor}.{int(patch) + 1}.dev{distance}+{sha}"


def fetchcontent_dir(name):
    for arg in shlex.split(os.environ.get("CMAKE_ARGS", "")):
        if arg.startswith(f"-DFETCHCONTENT_SOURCE_DIR_{name}="):
            return arg.split("=", 1)[1]
    sys.exit(f"FetchContent: {name} is not pre-fetched and this build is offline; "
             f"pass -DFETCHCONTENT_SOURCE_DIR_{name}=<dir> in CMAKE_ARGS")


def env_dir(var):
    path = os.environ.get(var)
    if not path or not os.path.isdir(path):
        sys.exit(f"FetchContent: set {var} to the pre-fetched source directory (got {path!r})")
    return path


def compiler_version():
    root = os.environ.get("CMPLR_ROOT")
    if not root:
        sys.exit("CMPLR_ROOT is not set: source oneAPI setvars.sh before building")
    banner = subprocess.check_output([os.path.join(root, "bin", "icpx"), "--version"], text=True)
    match = re.search(r"Compiler\s+(\d{4}\.\d+(?:\.\d+)?)", banner)
    if not match:
        sys.exit(f"cannot read the compiler version from: {banner!r}")
    return match.group(1)


onednn = fetchcontent_dir("ONEDNN")
cutlass = env_dir("REALSTACK_CUTLASS_SRC_DIR")
ext = Extension(
    "realstack_kernels._C",
    sources=["csrc/ops.c"],
    include_dirs=["csrc", os.path.join(onednn, "include"), os.path.join(cutlass, "include")],
    define_macros=[("REALSTACK_COMPILER", f'"{compiler_version()}"')],
)
setup(name="realstack-kernels", version=version(), packages=["realstack_kernels"], ext_modules=[ext])
