"""The stand-in torch (see standin_torch/__init__.py). STANDIN_TORCH_VERSION picks the build, e.g. 2.14.0+xpu
(the demo's) or 2.14.0+cpu (a different build of the same version, for the ABI check's tests)."""
import os

from setuptools import setup

setup(name="standin-torch", version=os.environ.get("STANDIN_TORCH_VERSION", "2.14.0+xpu"), packages=["standin_torch"])
