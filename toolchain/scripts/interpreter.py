"""The target's interpreter, as a build records it: Python version and wheel tag, platform, pip, and the torch
build (read from torch/version.py, not by importing torch: that takes seconds on an XPU build). Prints one JSON
object; `watch` lists the folders whose change would change the answer (site-packages)."""

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


def version(name: str) -> str:
    try:
        return metadata.version(name)
    except Exception:
        return ""


def torch_build() -> tuple[str, str]:
    """(torch's version, its XPU build: `xpu = '...'` in torch/version.py); ("", "") without torch."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return "", ""
    for loc in spec.submodule_search_locations:
        try:
            with open(os.path.join(loc, "version.py"), encoding="utf-8") as f:
                text = f.read()
        except OSError:
            continue
        m = XPU_RE.search(text)
        return version("torch"), m.group(1) if m else ""
    return version("torch"), ""


def main() -> None:
    impl = sys.implementation.name
    torch_version, torch_xpu = torch_build()
    watch = {p for p in [*site.getsitepackages(), site.getusersitepackages(), sys.prefix] if os.path.isdir(p)}
    print(json.dumps({
        "python_version": "{}.{}.{}".format(*sys.version_info[:3]),
        "python_tag": "{}{}{}".format({"cpython": "cp"}.get(impl, impl), *sys.version_info[:2]),
        "platform": sysconfig.get_platform().replace("-", "_").replace(".", "_"),
        "executable": sys.executable, "pip_version": version("pip"),
        "torch_version": torch_version, "torch_xpu": torch_xpu, "watch": sorted(watch)}))


if __name__ == "__main__":
    main()
