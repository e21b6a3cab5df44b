"""The target's interpreter, as a build records it: Python version and wheel tag, platform, pip, and the torch
build (read from torch/version.py, not by importing torch: that takes seconds on an XPU build); with NAME
arguments, the installed version of each distribution named (`dists`: null for one not installed). Prints one
JSON object; `inputs` lists every path the answer was read from, so a remembered answer is valid while none of
them changes, and `stats` the stat of each taken before it was read (a `pip install` racing the probe leaves
an input whose stat differs from the one recorded: the next build probes again).

Run as `python -S interpreter.py`, it records what it actually opened and listed, as ccache's direct mode
does: an audit hook (`open`, `os.listdir`, `os.scandir`) is installed before `site` runs (`site.main()`), so
every .pth file, sitecustomize / usercustomize (or the folders listed to find them absent), editable finder
and metadata file read on the way is an input, absent ones as absences; each folder a .pth names (also one
that does not exist yet), the folder a setuptools editable finder maps torch to, and each portion of a
namespace package with the `__init__.py` it lacks are inputs too. Besides: the sys.path this interpreter
computed and each of its entries, the site folders and the .pth files in them, pyvenv.cfg, and the metadata
file of every distribution whose version was read, with torch's version.py. The standard library's own files
are the interpreter's (its executable is an input of the caller's), not listed.

    python -S interpreter.py [NAME...]
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import site
import sys
import sysconfig
from collections.abc import Callable

try:
    from importlib import metadata
except ImportError:  # Python < 3.8: versions read as ""
    metadata = None  # type: ignore[assignment]

XPU_RE = re.compile(r"^xpu(?:\s*:\s*[^=]+)?\s*=\s*['\"]([^'\"]*)['\"]", re.M)
INPUTS: dict[str, list[int] | None] = {}  # every path the answer was read from -> its stat before it was read (None: absent)
KEPT: set[str] = set()  # inputs reported wherever they lie: folders listed, sitecustomize / usercustomize
_WRITING = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def stat_key(path: str) -> list[int] | None:
    """As core/probe_memo.py's: device, inode, size, mtime_ns, ctime_ns, mode; None when absent."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_mode]


def note(path: object) -> None:
    """`path` is an input: its stat now, before it is read (the first time it is seen)."""
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    if not isinstance(path, str):
        return  # (a file descriptor)
    path = os.path.abspath(path or os.curdir)
    if path not in INPUTS:
        INPUTS[path] = stat_key(path)


def _audit(event: str, args: tuple[object, ...]) -> None:
    """What the interpreter opens for reading and lists while this probe runs (site's work included)."""
    try:
        if event == "open":
            path, mode, flags = (*args, None, None, None)[:3]
            if (isinstance(mode, str) and any(c in mode for c in "wax+")) or (isinstance(flags, int) and flags & _WRITING):
                return
            note(path)
            if isinstance(path, str) and path.endswith(".pyc") and "__pycache__" in path:
                with contextlib.suppress(ValueError):
                    note(importlib.util.source_from_cache(path))  # (the source is what a change touches)
        elif event in ("os.listdir", "os.scandir"):
            folder = args[0] if args and args[0] is not None else os.curdir
            note(folder)
            if isinstance(folder, str):
                KEPT.add(os.path.abspath(folder or os.curdir))  # (a sitecustomize.py added there is a change)
    except Exception:  # an audit hook must never break what it watches
        pass


def _makepath_noting(makepath: Callable[..., tuple[str, str]]) -> Callable[..., tuple[str, str]]:
    def wrapped(*paths: str) -> tuple[str, str]:
        found = makepath(*paths)
        note(found[0])  # (a folder a .pth names, also one that does not exist yet)
        return found
    return wrapped


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
        for path in (where, os.path.join(where, "METADATA"), os.path.join(where, "PKG-INFO")):
            note(path)
    try:
        return dist.version or ""
    except Exception:
        return ""


def torch_build() -> tuple[str, str]:
    """(torch's version, its XPU build: `xpu = '...'` in torch/version.py); ("", "") without torch."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return "", ""
    for loc in spec.submodule_search_locations:  # (a namespace portion that gains an __init__.py: a change)
        for path in (loc, os.path.join(loc, "__init__.py"), os.path.join(loc, "version.py")):
            note(path)
        try:
            with open(os.path.join(loc, "version.py"), encoding="utf-8") as f:
                text = f.read()
        except OSError:
            continue
        m = XPU_RE.search(text)
        return version("torch"), m.group(1) if m else ""
    return version("torch"), ""


def path_inputs() -> None:
    """What this interpreter's sys.path was computed from and what it holds: each entry (a folder listing
    changes when a package is installed, a .pth added), the site folders (also absent ones: a user site
    created later is a change), each .pth file in them (a develop install's points at its source folder),
    pyvenv.cfg (whether a venv sees the system's packages), and what a setuptools editable finder maps torch to
    (the folder and the folder it lies in: what the finder looks for)."""
    sites = [*site.getsitepackages(), site.getusersitepackages()]
    for p in [*sys.path, *sites, os.path.join(sys.prefix, "pyvenv.cfg")]:
        note(p)
    for folder in sites:
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        for n in names:
            if n.endswith(".pth"):
                note(os.path.join(folder, n))
    for finder in sys.meta_path:  # (what an editable finder maps `torch` to: the only module found by import)
        module = sys.modules.get(getattr(finder, "__module__", "") or "")
        mapping = getattr(module, "MAPPING", None)
        namespaces = getattr(module, "NAMESPACES", None)
        places = [mapping["torch"]] if isinstance(mapping, dict) and isinstance(mapping.get("torch"), str) else []
        if isinstance(namespaces, dict):
            places += [p for n, ps in namespaces.items() if n == "torch" or str(n).startswith("torch.")
                       if isinstance(ps, list) for p in ps if isinstance(p, str)]
        for place in places:  # (its __init__.py or place.py created, removed: the folder's stat changes)
            note(place)
            note(os.path.dirname(os.path.abspath(place)))


def reported() -> dict[str, list[int] | None]:
    """The inputs the probe reports: not the standard library's own files (under stdlib and not under a site
    folder), not /proc, /sys or /dev."""
    paths = sysconfig.get_paths()
    sites = tuple(s.rstrip("/") + "/" for s in (paths.get("purelib"), paths.get("platlib"), *site.getsitepackages(),
                                                 site.getusersitepackages()) if s)
    std = tuple(s.rstrip("/") + "/" for s in (paths.get("stdlib"), paths.get("platstdlib")) if s)
    return {p: k for p, k in list(INPUTS.items()) if p in KEPT or (p + "/").startswith(sites)
            or not (p + "/").startswith((*std, "/proc/", "/sys/", "/dev/"))}


def start() -> None:
    """With -S: the audit hook, then site's work (what it reads is recorded); without, site has run already."""
    if sys.flags.no_site:
        sys.addaudithook(_audit)
        site.makepath = _makepath_noting(site.makepath)
        site.main()
    else:
        sys.addaudithook(_audit)
    for name in ("sitecustomize", "usercustomize"):
        where = getattr(sys.modules.get(name), "__file__", None)
        if isinstance(where, str):
            note(where)
            KEPT.add(os.path.abspath(where))


def main(names: list[str]) -> None:
    impl = sys.implementation.name
    torch_version, torch_xpu = torch_build()
    dists = {n: installed(n) for n in names}
    path_inputs()
    inputs = reported()
    print(json.dumps({
        "python_version": "{}.{}.{}".format(*sys.version_info[:3]),
        "python_tag": "{}{}{}".format({"cpython": "cp"}.get(impl, impl), *sys.version_info[:2]),
        "platform": sysconfig.get_platform().replace("-", "_").replace(".", "_"),
        "executable": sys.executable, "pip_version": version("pip"),
        "torch_version": torch_version, "torch_xpu": torch_xpu, "dists": dists, "inputs": sorted(inputs),
        "stats": inputs}))


if __name__ == "__main__":
    start()
    main(sys.argv[1:])
