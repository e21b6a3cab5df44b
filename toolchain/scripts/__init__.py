"""What runs in a target (the host, or a container the package is not installed in) as a file: small scripts,
stdlib only, each run by path by the target's own Python (`Runtime.script(NAME)` says where the target sees
it: the host, in place; a fresh container, a read-only mount; a running one, a copy). They import nothing of
the package (the bottom layer of the import contract) and keep to what Python 3.8 runs: their annotations
stay unevaluated (`from __future__ import annotations`). mypy and ruff read them as they read the package.

    interpreter.py      the interpreter, platform, pip and torch build (the target's probe)
    dists.py            the installed version of named distributions (and torch's C++11 ABI flag)
    build_requires.py   the build requirements a source tree declares that are not installed
    base_image.py       every distribution an image holds, with the sha256 of its RECORD
    installed.py        every installed distribution with the sha256 of the file it was installed from
    make_venv.py        a venv that sees the interpreter's packages (smoke in a container)
    torch_xpu.py        torch and torch.xpu as `toolchain doctor` reports them
    libraries.py        the shared libraries the loader, setvars' folders and the installed packages provide
    cards.py            the Intel GPUs under a sysfs tree (also called in-process by toolchain.core.devices)
"""

from __future__ import annotations

from pathlib import Path

FOLDER = Path(__file__).resolve().parent


def path(name: str) -> Path:
    """This machine's copy of script `name` (e.g. "interpreter.py")."""
    found = FOLDER / name
    if not found.is_file():
        raise FileNotFoundError(f"no script {name!r} in {FOLDER}")
    return found
