"""The oldest interpreters a target may bring: a Python 3.9 and a 3.10 found on PATH or installed by pyenv
(the first of each that runs). What runs in a target as a file (toolchain/build/intarget.py, toolchain/scripts)
is run under them."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path


def old_pythons() -> list[str]:
    found: list[str] = []
    pyenv = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv") / "versions"
    for minor in ("3.9", "3.10"):
        candidates = [f"python{minor}", *sorted(str(p) for p in pyenv.glob(f"{minor}.*/bin/python{minor}"))]
        for exe in candidates:
            try:  # a pyenv shim for a version not selected exits non-zero
                ok = subprocess.run([exe, "-c", "pass"], capture_output=True, timeout=30).returncode == 0
            except OSError:
                ok = False
            if ok:
                found.append(exe)
                break
    return found
