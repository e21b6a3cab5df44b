"""The target's interpreter, as a build records it: Python version and wheel tag, platform, pip, and the torch
build (read from torch/version.py, not by importing torch: that takes seconds on an XPU build); with NAME
arguments, the installed version of each distribution named (`dists`: null for one not installed). Prints one
JSON object; `inputs` lists every path the answer was read from, so a remembered answer is valid while none of
them changes: the sys.path this interpreter computed (PYTHONPATH, .pth files, the user site) and each of its
entries, the site folders and the .pth files in them, pyvenv.cfg, and the metadata file (METADATA / PKG-INFO)
of every distribution whose version was read, with torch's version.py.

    python interpreter.py [NAME...]
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import site
import sys
import sysconfig

try:
    from importlib import metadata
except ImportError:  # Python < 3.8: versions read as ""
    metadata = None  # type: ignore[assignment]

XPU_RE = re.compile(r"^xpu(?:\s*:\s*[^=]+)?\s*=\s*['\"]([^'\"]*)['\"]", re.M)
INPUTS: set[str] = set()  # every path the answer was read from


def version(name: str) -> str:
    """The installed version of distribution `name` ("" if none); its metadata file is an input."""
    return installed(name) or ""


def installed(name: str) -> str | None:
    """The installed version of distribution `name` (None: not installed); its metadata file is an input."""
    try:
        dist = metadata.distribution(name)
    except Exception:
        return None
    where = getattr(dist, "_path", None)  # the .dist-info / .egg-info folder (a PathDistribution's)
    if where is not None:
        where = os.path.abspath(str(where))
        INPUTS.add(where)
        INPUTS.update(os.path.join(where, f) for f in ("METADATA", "PKG-INFO"))
    try:
        return dist.version or ""
    except Exception:
        return ""


def torch_build() -> tuple[str, str]:
    """(torch's version, its XPU build: `xpu = '...'` in torch/version.py); ("", "") without torch."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return "", ""
    for loc in spec.submodule_search_locations:
        INPUTS.add(os.path.abspath(os.path.join(loc, "version.py")))
        try:
            with open(os.path.join(loc, "version.py"), encoding="utf-8") as f:
                text = f.read()
        except OSError:
            continue
        m = XPU_RE.search(text)
        return version("torch"), m.group(1) if m else ""
    return version("torch"), ""


def path_inputs() -> set[str]:
    """What this interpreter's sys.path was computed from and what it holds: each entry (a folder listing
    changes when a package is installed, a .pth added), the site folders (also absent ones: a user site
    created later is a change), each .pth file in them (a develop install's points at its source folder), and
    pyvenv.cfg (whether a venv sees the system's packages)."""
    sites = [*site.getsitepackages(), site.getusersitepackages()]
    found = {os.path.abspath(p or os.curdir) for p in [*sys.path, *sites]}
    found.add(os.path.join(sys.prefix, "pyvenv.cfg"))
    for folder in sites:
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        found.update(os.path.join(folder, n) for n in names if n.endswith(".pth"))
    return found


def main(names: list[str]) -> None:
    impl = sys.implementation.name
    torch_version, torch_xpu = torch_build()
    dists = {n: installed(n) for n in names}
    INPUTS.update(path_inputs())
    print(json.dumps({
        "python_version": "{}.{}.{}".format(*sys.version_info[:3]),
        "python_tag": "{}{}{}".format({"cpython": "cp"}.get(impl, impl), *sys.version_info[:2]),
        "platform": sysconfig.get_platform().replace("-", "_").replace(".", "_"),
        "executable": sys.executable, "pip_version": version("pip"),
        "torch_version": torch_version, "torch_xpu": torch_xpu, "dists": dists, "inputs": sorted(INPUTS)}))


if __name__ == "__main__":
    main(sys.argv[1:])
