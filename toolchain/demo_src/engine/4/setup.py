"""Demo engine (stands in for vLLM): a pure-Python package, version from `git describe`.
Like vLLM it has runtime dependencies from an index (here two small pure-Python ones)."""
import os
import subprocess

from setuptools import setup


def version():
    override = os.environ.get("DEMO_ENGINE_VERSION_OVERRIDE") or os.environ.get("SETUPTOOLS_SCM_PRETEND_VERSION")
    if override:
        return override
    here = os.path.dirname(os.path.abspath(__file__))
    desc = subprocess.check_output(["git", "describe", "--tags", "--long", "--match", "v*"], cwd=here, text=True).strip()
    tag, distance, sha = desc.rsplit("-", 2)
    base = tag.lstrip("v")
    return base if distance == "0" else f"{base}.post{distance}"


setup(name="demo-engine", version=version() + "+demo", packages=["demo_engine"],
      install_requires=["packaging>=24", "tomli>=2"])
