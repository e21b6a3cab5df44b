"""The shared libraries a target provides, by soname: what the loader finds (`ldconfig -p`, 64-bit entries, and
the system folders given), what setvars' library folders hold, and with `--installed` the shared objects of
every distribution this interpreter has installed (by their RECORD). Prints one JSON object
{"system": {soname: path}, "oneapi": {soname: folder}, "installed": {soname: distribution}}.

    python libraries.py [--installed] SYSTEM_DIRS ONEAPI_DIR...     (SYSTEM_DIRS: folders joined by ":")
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import metadata

LDCONFIGS = ("ldconfig", "/sbin/ldconfig", "/usr/sbin/ldconfig")


def loader() -> dict[str, str]:
    """What `ldconfig -p` lists (the first ldconfig that lists anything)."""
    found: dict[str, str] = {}
    for exe in LDCONFIGS:
        try:
            out = subprocess.run([exe, "-p"], capture_output=True, text=True, timeout=60, check=False).stdout
        except (OSError, subprocess.SubprocessError):
            continue
        for line in out.splitlines()[1:]:
            name, _, path = line.strip().partition(" => ")
            name = name.split(" (")[0].strip()
            if name and ("x86-64" in line or "64bit" in line or "(libc6)" not in line):
                found.setdefault(name, path.strip())
        if found:
            break
    return found


def listed(folders: list[str], full_path: bool) -> dict[str, str]:
    """Shared objects in `folders` (the first folder holding a name wins): name -> path, or -> folder."""
    found: dict[str, str] = {}
    for d in folders:
        try:
            names = os.listdir(d)
        except OSError:
            continue
        for n in names:
            if ".so" in n:
                found.setdefault(n, os.path.join(d, n) if full_path else d)
    return found


def installed() -> dict[str, str]:
    found: dict[str, str] = {}
    for dist in metadata.distributions():
        for f in dist.files or ():
            if ".so" in f.name:
                found.setdefault(f.name, dist.metadata["Name"] or "?")
    return found


def main(args: list[str]) -> None:
    with_installed = args[:1] == ["--installed"]
    if with_installed:
        args = args[1:]
    system_dirs, oneapi_dirs = [d for d in (args[0] if args else "").split(":") if d], args[1:]
    system = loader()
    for name, where in listed(system_dirs, full_path=True).items():
        system.setdefault(name, where)
    print(json.dumps({"system": system, "oneapi": listed(oneapi_dirs, full_path=False),
                      "installed": installed() if with_installed else {}}))


if __name__ == "__main__":
    main(sys.argv[1:])
