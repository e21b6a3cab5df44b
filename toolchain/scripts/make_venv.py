"""A virtual environment at PATH that sees this interpreter's packages (`--system-site-packages`, and a .pth
when this interpreter is a venv itself), so the image's torch stays visible and the image is left as it was.
pip comes from the image; ensurepip only where the venv has none.

    python make_venv.py PATH
"""

from __future__ import annotations

import os
import site
import subprocess
import sys
import venv


def main(path: str) -> None:
    venv.EnvBuilder(system_site_packages=True, clear=True, symlinks=True, with_pip=False).create(path)
    if sys.prefix != sys.base_prefix:  # the image's interpreter is a venv: its site-packages stay visible too
        lib = os.path.join(path, "lib", "python{}.{}".format(*sys.version_info[:2]), "site-packages")
        with open(os.path.join(lib, "_toolchain_image_site.pth"), "w") as f:
            f.write("\n".join(p for p in site.getsitepackages() if os.path.isdir(p)) + "\n")
    python = os.path.join(path, "bin", "python")
    if subprocess.run([python, "-m", "pip", "--version"], check=False).returncode != 0:
        subprocess.run([python, "-m", "ensurepip", "--default-pip"], check=True)


if __name__ == "__main__":
    main(sys.argv[1])
