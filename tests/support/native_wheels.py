"""Wheels for the native audit's tests.

Real PyPI wheels, downloaded once per machine into the shared test cache (tests/support/pypi_wheels.py, checked
against their pinned sha256): ``kernels`` vllm-xpu-kernels 0.1.16.2 (its `_xpu_C.abi3.so` needs libsycl.so.9,
built with oneAPI DPC++ 2026.1.0), ``sycl8`` intel-sycl-rt 2025.3.3 (ships libsycl.so.8), ``sycl9``
intel-sycl-rt 2026.2.0 (ships libsycl.so.9).

Wheels the tests write, holding real ELF objects compiled here with `cc`: `elf_object` links a shared object
against stub libraries made for each wanted soname (a stub has that DT_SONAME), then removes the stubs, so the
object needs a library nothing here provides; `write_wheel` packs files into a wheel with its RECORD."""

from __future__ import annotations

import base64
import hashlib
import shutil
import subprocess
import tempfile
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from tests.support.pypi_wheels import INTEL_SYCL_RT_2025, INTEL_SYCL_RT_2026, VLLM_XPU_KERNELS, PinnedWheel, real_wheel

PINS: dict[str, PinnedWheel] = {"kernels": VLLM_XPU_KERNELS, "sycl8": INTEL_SYCL_RT_2025, "sycl9": INTEL_SYCL_RT_2026}


def wheel(name: str) -> Path:
    """The cached real wheel `name` (kernels, sycl8, sycl9)."""
    return real_wheel(PINS[name])


def setuptools_project(name: str, *, dependencies: Sequence[str] = (), setuptools: str = "py-modules = []\n") -> str:
    """A pyproject.toml building `name` 1.0 with setuptools (`setuptools`: the lines of its [tool.setuptools])."""
    deps = f"dependencies = [{', '.join(repr(d).replace(chr(39), chr(34)) for d in dependencies)}]\n" if dependencies else ""
    return ('[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n'
            f'[project]\nname = "{name}"\nversion = "1.0"\n{deps}[tool.setuptools]\n{setuptools}')


def elf_object(needs: Sequence[str], *, soname: str = "", runpath: str = "") -> bytes:
    """A real x86-64 shared object (compiled by `cc`) whose DT_NEEDED are `needs` (in that order, then libc),
    with DT_SONAME `soname` and DT_RUNPATH `runpath` when given. Each needed library is a stub built for the
    link and removed after it."""
    with tempfile.TemporaryDirectory(prefix="elf-") as tmp:
        work = Path(tmp)
        (work / "stub.c").write_text("int stub_symbol(void) { return 0; }\n")
        (work / "obj.c").write_text("int object_symbol(void) { return 1; }\n")
        stubs = work / "stubs"
        stubs.mkdir()
        for so in needs:
            subprocess.run(["cc", "-shared", "-fPIC", f"-Wl,-soname,{so}", "-o", str(stubs / so), "stub.c"],
                           cwd=work, check=True, timeout=120)
        argv = ["cc", "-shared", "-fPIC", "-o", "obj.so", "obj.c", f"-L{stubs}", "-Wl,--no-as-needed",
                *(f"-l:{so}" for so in needs)]
        if soname:
            argv.append(f"-Wl,-soname,{soname}")
        if runpath:
            argv += [f"-Wl,-rpath,{runpath}", "-Wl,--enable-new-dtags"]
        subprocess.run(argv, cwd=work, check=True, timeout=120)
        shutil.rmtree(stubs)  # linked and removed: nothing here provides them
        return (work / "obj.so").read_bytes()


def write_wheel(folder: Path, name: str, version: str, files: Mapping[str, bytes], *,
                tag: str = "py3-none-any", requires: Sequence[str] = ()) -> Path:
    """A wheel of `files` (paths inside the wheel) with METADATA, WHEEL and RECORD."""
    dist = name.replace("-", "_")
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(
        f"Requires-Dist: {r}\n" for r in requires)
    every = {**files, f"{dist}-{version}.dist-info/METADATA": meta.encode(),
             f"{dist}-{version}.dist-info/WHEEL": f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: "
                                                  f"{'true' if tag.endswith('any') else 'false'}\nTag: {tag}\n".encode()}
    record = "".join(f"{n},sha256={base64.urlsafe_b64encode(hashlib.sha256(b).digest()).rstrip(b'=').decode()},"
                     f"{len(b)}\n" for n, b in every.items()) + f"{dist}-{version}.dist-info/RECORD,,\n"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{dist}-{version}-{tag}.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for n, b in every.items():
            z.writestr(n, b)
        z.writestr(f"{dist}-{version}.dist-info/RECORD", record)
    return path
