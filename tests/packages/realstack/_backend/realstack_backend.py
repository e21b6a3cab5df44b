"""PEP 517 backend for the realstack fixture projects: tiny_backend (copied beside this file) plus what the
real stack's build scripts do before they build. Configured by `[tool.realstack]` in pyproject.toml:

  version = "git-describe"   like setuptools-scm: `git describe --tags --long --match 'v*'`;
                             v0.3.0-0-gabc1234 -> 0.3.0, v0.3.0-2-gabc1234 -> 0.3.1.dev2+gabc1234
  version = "file:PATH"      read __version__ from PATH (like ARK's version.py); BUILD_MODE=dev (the default)
                             appends .dev<committer date>, BUILD_MODE=release gives the plain version
  version-env = "NAME"       NAME (then SETUPTOOLS_SCM_PRETEND_VERSION) overrides the version
  local = "xpu"              appended as a local label (+xpu, or .xpu after a local part), like vLLM's
  compiler = "ark"           like ARK's setup.py: `icx --version`, else `$CMPLR_ROOT/bin/icpx --version`
  compiler = "icx"           `icx --version` only
The compiler version found is exported as REALSTACK_COMPILER_VERSION (record it with [tool.tiny] record-env).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

try:
    import tomllib
except ImportError:  # Python < 3.11
    import tomli as tomllib

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import tiny_backend  # noqa: E402  (copied beside this file)

get_requires_for_build_wheel = tiny_backend.get_requires_for_build_wheel


def _config():
    with open(os.path.join(HERE, "pyproject.toml"), "rb") as f:
        return tomllib.load(f).get("tool", {}).get("realstack", {})


def _git(*args):
    return subprocess.run(["git", *args], cwd=HERE, capture_output=True, text=True, check=True).stdout.strip()


def scm_version(describe):
    """setuptools-scm's default scheme for a `git describe --long` string."""
    tag, distance, sha = describe.rsplit("-", 2)
    base = tag.lstrip("v")
    if distance == "0":
        return base
    parts = base.split(".")
    parts[-1] = str(int(parts[-1]) + 1)
    return f"{'.'.join(parts)}.dev{distance}+{sha}"


def _version(cfg):
    override = os.environ.get(cfg.get("version-env", "")) if cfg.get("version-env") else None
    version = override or os.environ.get("SETUPTOOLS_SCM_PRETEND_VERSION")
    source = cfg.get("version", "")
    if not version and source == "git-describe":
        version = scm_version(_git("describe", "--tags", "--long", "--match", "v*"))
    elif not version and source.startswith("file:"):
        ns = {}
        with open(os.path.join(HERE, source[5:])) as f:
            exec(f.read(), ns)
        version = ns["__version__"]
        if os.environ.get("BUILD_MODE", "dev") != "release":
            version += ".dev" + _git("log", "-1", "--format=%cd", "--date=format:%Y%m%d")
    if version and cfg.get("local"):
        version += ("." if "+" in version else "+") + cfg["local"]
    return version


def _compiler(mode):
    try:
        banner = subprocess.run(["icx", "--version"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        root = os.environ.get("CMPLR_ROOT")
        if mode == "icx" or not root:
            raise RuntimeError(f"ARK: cannot get the oneAPI compiler version: `icx --version` failed ({exc})"
                               + ("" if mode == "icx" else " and CMPLR_ROOT is unset")) from None
        banner = subprocess.run([os.path.join(root, "bin", "icpx"), "--version"], capture_output=True, text=True,
                                check=True).stdout
    match = re.search(r"Compiler\s+(\d{4}\.\d+)", banner)
    if not match:
        raise RuntimeError(f"ARK: no compiler version in {banner!r}")
    return match.group(1)


_PREPARED = []


def _prepare():
    if _PREPARED:  # once per process: the version below becomes SETUPTOOLS_SCM_PRETEND_VERSION
        return
    _PREPARED.append(True)
    cfg = _config()
    version = _version(cfg)
    if version:
        os.environ["SETUPTOOLS_SCM_PRETEND_VERSION"] = version  # what tiny_backend reads
    if cfg.get("compiler"):
        os.environ["REALSTACK_COMPILER_VERSION"] = _compiler(cfg["compiler"])


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    _prepare()
    return tiny_backend.prepare_metadata_for_build_wheel(metadata_directory, config_settings)


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    _prepare()
    print(f"realstack_backend: building {tiny_backend._config()[0]} {os.environ.get('SETUPTOOLS_SCM_PRETEND_VERSION', '')}")
    return tiny_backend.build_wheel(wheel_directory, config_settings, metadata_directory)
