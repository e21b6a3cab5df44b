"""Demo kernels (stand in for vllm-xpu-kernels): a C extension built with the system compiler.

Like the real kernels it needs the oneAPI environment (CMPLR_ROOT, icpx) and a FetchContent dependency,
which must be pre-fetched and passed as -DFETCHCONTENT_SOURCE_DIR_DEMOHEADERS=<dir> in CMAKE_ARGS.
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
    desc = subprocess.check_output(["git", "describe", "--tags", "--long", "--match", "v*"], cwd=HERE, text=True).strip()
    tag, distance, sha = desc.rsplit("-", 2)
    return tag.lstrip("v") if distance == "0" else f"{tag.lstrip('v')}.post{distance}+{sha}"


def fetchcontent_dir(name):
    for arg in shlex.split(os.environ.get("CMAKE_ARGS", "")):
        if arg.startswith(f"-DFETCHCONTENT_SOURCE_DIR_{name}="):
            return arg.split("=", 1)[1]
    sys.exit(f"FetchContent: {name} is not pre-fetched and this build is offline; "
             f"pass -DFETCHCONTENT_SOURCE_DIR_{name}=<dir> in CMAKE_ARGS")


def compiler_version():
    root = os.environ.get("CMPLR_ROOT")
    if not root:
        sys.exit("CMPLR_ROOT is not set: source oneAPI setvars.sh before building")
    banner = subprocess.check_output(["icpx", "--version"], text=True)
    match = re.search(r"Compiler\s+(\d{4}\.\d+(?:\.\d+)?)", banner)
    if not match:
        sys.exit(f"cannot read the compiler version from: {banner!r}")
    return match.group(1)


headers = fetchcontent_dir("DEMOHEADERS")
ext = Extension(
    "demo_kernels._C",
    sources=["csrc/ops.c"],
    include_dirs=[os.path.join(headers, "include")],
    define_macros=[("DEMO_COMPILER", '"%s"' % compiler_version())],
)
# Like vllm-xpu-kernels, compiled against torch: it needs the same build of it at run time (the stand-in).
setup(name="demo-kernels", version=version(), packages=["demo_kernels"], ext_modules=[ext],
      install_requires=["standin-torch==2.14.0"])
