"""Demo ARK kernels (stand in for auto_round_extension/ark, distribution auto-round-lib).

Version from demo_ark/version.py; BUILD_MODE=dev (the default) appends .dev<commit date>, which an exact
pin (demo-ark-lib==0.5.0) does not accept, so recipes set BUILD_MODE=release. DEMO_ARK_TARGET selects
the device (like ARK_SYCL_TARGET); the oneAPI environment is required (CMPLR_ROOT).
"""
import os
import subprocess
import sys

from setuptools import Extension, setup

HERE = os.path.dirname(os.path.abspath(__file__))
ns = {}
with open(os.path.join(HERE, "demo_ark", "version.py")) as f:
    exec(f.read(), ns)
version = ns["__version__"]
if os.environ.get("BUILD_MODE", "dev") != "release":
    date = subprocess.check_output(["git", "log", "-1", "--format=%cd", "--date=format:%Y%m%d"], cwd=HERE, text=True).strip()
    version += f".dev{date}"
if not os.environ.get("CMPLR_ROOT"):
    sys.exit("ARK: no oneAPI compiler found (CMPLR_ROOT unset); source setvars.sh")
target = os.environ.get("DEMO_ARK_TARGET", "bmg")
ext = Extension("demo_ark._ark", sources=["csrc/ark.c"], define_macros=[("ARK_TARGET", '"%s"' % target)])
setup(name="demo-ark-lib", version=version, packages=["demo_ark"], ext_modules=[ext])
