"""A tiny in-tree PEP 517 backend for the test fixture projects (stdlib only, so `pip wheel` is fast).

The test repository factory copies this file next to every fixture `pyproject.toml`. Configuration comes
from `[project]` (name, version, dependencies: its Requires-Dist) and `[tool.tiny]`:
  package      the import package to ship (default: name with '-' → '_')
  fail         build_wheel fails with this message (a build that fails)
  record-env   variables whose values the wheel records in <package>/_build_info.json
  hash-env     variables the wheel records only as sha256 (e.g. secrets: proves the build saw them)
Invoking-environment knobs (not part of any cache key): TINY_BUILD_COUNTER (a file that gets one line per
build_wheel call, `name pid version source-dir`, written before anything else), TINY_BUILD_SLEEP (seconds
build_wheel sleeps after that), TINY_BUILD_GATE (a file: while it exists, build_wheel waits after writing the
counter line; a test holds a build mid-way by creating it), TINY_PRINT_ENV (print every `NAME=value`, and every value alone, of the
build environment; needs `pip wheel -v` to reach the build log).
The version can be overridden with SETUPTOOLS_SCM_PRETEND_VERSION, like setuptools-scm.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import sys
import time
import zipfile

try:
    import tomllib
except ImportError:  # Python < 3.11
    import tomli as tomllib

HERE = os.path.dirname(os.path.abspath(__file__))


def _config():
    with open(os.path.join(HERE, "pyproject.toml"), "rb") as f:
        data = tomllib.load(f)
    project = data["project"]
    tiny = data.get("tool", {}).get("tiny", {})
    name = project["name"]
    version = os.environ.get("SETUPTOOLS_SCM_PRETEND_VERSION") or project["version"]
    return name, version, tiny


def _dist_info(name, version):
    return f"{name.replace('-', '_')}-{version}.dist-info"


def _metadata(name, version):
    with open(os.path.join(HERE, "pyproject.toml"), "rb") as f:
        requires = tomllib.load(f)["project"].get("dependencies", [])
    return (f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
            + "".join(f"Requires-Dist: {r}\n" for r in requires)).encode()


def get_requires_for_build_wheel(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    name, version, _ = _config()
    info = os.path.join(metadata_directory, _dist_info(name, version))
    os.makedirs(info, exist_ok=True)
    with open(os.path.join(info, "METADATA"), "wb") as f:
        f.write(_metadata(name, version))
    return os.path.basename(info)


def _record_line(arcname, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{arcname},sha256={digest},{len(data)}"


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    name, version, tiny = _config()
    counter = os.environ.get("TINY_BUILD_COUNTER")
    if counter:
        with open(counter, "a") as f:
            f.write(f"{name} {os.getpid()} {version} {HERE}\n")
    time.sleep(float(os.environ.get("TINY_BUILD_SLEEP") or 0))
    gate = os.environ.get("TINY_BUILD_GATE")
    while gate and os.path.exists(gate):
        time.sleep(0.05)
    if os.environ.get("TINY_PRINT_ENV"):
        for k, v in sorted(os.environ.items()):
            print(f"{k}={v}")
            print(v)
        sys.stdout.flush()
    if tiny.get("fail"):
        raise RuntimeError(tiny["fail"])
    package = tiny.get("package", name.replace("-", "_"))
    files = {}
    pkg_dir = os.path.join(HERE, package)
    for root, _dirs, names in os.walk(pkg_dir):
        for n in sorted(names):
            if n.endswith(".py"):
                full = os.path.join(root, n)
                with open(full, "rb") as f:
                    files[os.path.relpath(full, HERE).replace(os.sep, "/")] = f.read()
    info = {"env": {k: os.environ.get(k) for k in tiny.get("record-env", [])},
            "sha256": {k: hashlib.sha256(os.environ[k].encode()).hexdigest()
                       for k in tiny.get("hash-env", []) if k in os.environ}}
    files[f"{package}/_build_info.json"] = json.dumps(info, sort_keys=True).encode()
    dist = _dist_info(name, version)
    files[f"{dist}/METADATA"] = _metadata(name, version)
    files[f"{dist}/WHEEL"] = b"Wheel-Version: 1.0\nGenerator: tiny_backend\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    filename = f"{name.replace('-', '_')}-{version}-py3-none-any.whl"
    record = [_record_line(n, d) for n, d in files.items()] + [f"{dist}/RECORD,,"]
    with zipfile.ZipFile(os.path.join(wheel_directory, filename), "w") as z:
        for n, d in files.items():
            z.writestr(n, d)
        z.writestr(f"{dist}/RECORD", "\n".join(record) + "\n")
    return filename
