"""The box as build and smoke see it: GPUs, driver, render nodes, kernel, GPU firmware, Level Zero and the
compute runtime, installed oneAPI and oneCCL, memory. Everything is read as files under one root folder
(`TOOLCHAIN_HOST_ROOT`, default `/`), so a test describes a B70 box with a folder; nothing here runs a command.

`HostFacts` is what a lock records at build and a smoke report at serve (and what a lock-to-lock bisect
compares); `toolchain doctor` turns the same facts into ok / warn / missing lines with a fix.
"""

from __future__ import annotations

import os
from pathlib import Path

from toolchain.core.devices import Card, find_cards
from toolchain.core.record import field, record
from toolchain.core.regex import Regex
from toolchain.core.serial import meta

HOST_ROOT_ENV = "TOOLCHAIN_HOST_ROOT"
LIB_DIRS = ("usr/lib/x86_64-linux-gnu", "usr/lib64", "usr/lib", "usr/local/lib", "lib/x86_64-linux-gnu")
ONEAPI = "opt/intel/oneapi"
DPKG_STATUS = "var/lib/dpkg/status"
LOADER_PACKAGES = ("libze1", "level-zero")
COMPUTE_RUNTIME_PACKAGES = ("libze-intel-gpu1", "intel-level-zero-gpu", "intel-opencl-icd")
FW_VERSION = Regex(r"found\s+(?:release\s+)?(\d+\.\d+\.\d+)|version:\s*(\d+\.\d+\.\d+)")
VERSION_DIR = Regex(r"^\d{4}\.\d+(\.\d+)*$")


def host_root() -> Path:
    """The folder read as `/`: $TOOLCHAIN_HOST_ROOT (a fake host in tests, a mounted box's image), else `/`."""
    return Path(os.environ.get(HOST_ROOT_ENV) or "/")


@record
class HostFacts:
    """What the box is, in plain strings (a lock and a report record it; a bisect compares two)."""
    kernel: str = ""
    gpus: tuple[str, ...] = ()           # "card0 BMG-G31 (B70 class), device 0xe223 at 0000:03:00.0"
    drivers: tuple[str, ...] = ()        # the kernel driver of each GPU (xe, i915)
    guc: str = ""
    huc: str = ""
    level_zero: str = ""                 # the loader's version (libze_loader.so.1.X.Y, or its package)
    compute_runtime: str = ""            # the GPU driver's user-space runtime (package version or library)
    oneapi: tuple[str, ...] = ()         # compiler versions installed under /opt/intel/oneapi
    oneccl: tuple[str, ...] = ()         # oneCCL versions installed under /opt/intel/oneapi
    memory_total: int = 0                # bytes
    # bytes; changes by the minute: a lock and a report (`to_table(facts, kebab=True)`) do not keep it
    memory_available: int = field(default=0, metadata=meta(skip=True))


def gather(root: Path | None = None, memo_dir: Path | None = None) -> HostFacts:
    """The box's facts (`memo_dir`: the Level Zero and compute runtime versions remembered there, see
    `runtime_versions`)."""
    root = host_root() if root is None else root
    cards = find_cards(root)
    guc, huc = firmware(root)
    total, avail = memory(root)
    level_zero, runtime = runtime_versions(root, memo_dir)
    return HostFacts(kernel=_read(root / "proc/sys/kernel/osrelease"),
                     gpus=tuple(c.describe() for c in cards), drivers=tuple(c.driver or "none" for c in cards),
                     guc=guc, huc=huc, level_zero=level_zero, compute_runtime=runtime,
                     oneapi=versions_in(root / ONEAPI / "compiler"), oneccl=versions_in(root / ONEAPI / "ccl"),
                     memory_total=total, memory_available=avail)


def runtime_versions(root: Path, memo_dir: Path | None = None) -> tuple[str, str]:
    """(Level Zero loader, compute runtime): from dpkg's status file (hundreds of kB, read once for both) or
    the names in the library folders (thousands, each folder listed once for both). With `memo_dir`, they are
    remembered there while that file and those folders are unchanged (dpkg replaces its status file when a
    package is installed or removed; a library added, removed or renamed changes its folder): 3-4 ms of every
    build that writes a lock (a warm build into a new --out, each bisect step)."""
    from toolchain.core.probe_memo import remembered

    def compute() -> tuple[list[str], list[str]]:
        status = _read_bytes(root / DPKG_STATUS)
        libs = _lib_names(root)
        return ([level_zero_loader(root, status, libs), compute_runtime(root, status, libs)],
                [str(root / DPKG_STATUS), *(str(root / d) for d in LIB_DIRS)])

    level_zero, runtime = remembered(memo_dir, "host-runtimes", {"root": str(root)}, compute)
    return level_zero, runtime


def cards(root: Path) -> list[Card]:
    """The Intel GPUs the host root's sysfs shows (the one card discovery, scripts/cards.py)."""
    return find_cards(root)


def _uc_files(dri: Path, name: str) -> list[Path]:
    """`dri/*/gt*/uc/NAME` in order, as `sorted(dri.glob(...))` finds them, without the patterns a glob compiles."""
    found = []
    for card in _listed(dri):
        for gt in _listed(dri / card):
            if gt.startswith("gt") and (dri / card / gt / "uc" / name).exists():
                found.append(dri / card / gt / "uc" / name)
    return sorted(found)


def _listed(folder: Path) -> list[str]:
    """The names of the folders in `folder` ([] when it cannot be listed)."""
    try:
        return [e.name for e in os.scandir(folder) if e.is_dir()]
    except OSError:
        return []


def firmware(root: Path) -> tuple[str, str]:
    """(GuC, HuC) versions from debugfs (xe: dri/N/gt0/uc, i915: dri/N/gt/uc); "" where not readable
    (debugfs is root-only on most boxes)."""
    found = []
    for name in ("guc_info", "huc_info"):
        version = ""
        for f in _uc_files(root / "sys/kernel/debug/dri", name):
            m = FW_VERSION.search(_read(f))
            if m:
                version = m.group(1) or m.group(2)
                break
        found.append(version)
    return found[0], found[1]


def memory(root: Path) -> tuple[int, int]:
    """Total and available memory in bytes, from the host root's /proc/meminfo ((0, 0) when unreadable)."""
    total = avail = 0
    for line in _read(root / "proc/meminfo").splitlines():
        key, _, value = line.partition(":")
        if key in ("MemTotal", "MemAvailable") and value.split() and value.split()[0].isdigit():
            if key == "MemTotal":
                total = int(value.split()[0]) * 1024
            else:
                avail = int(value.split()[0]) * 1024
    return total, avail


# (dpkg's status file and the names in each of LIB_DIRS, when the caller read them already)
Libs = tuple[tuple[str, ...], ...]


def level_zero_loader(root: Path, status: bytes | None = None, libs: Libs | None = None) -> str:
    """The Level Zero loader's version: from dpkg's status where a package has it, else from the library's file name."""
    return dpkg_version(root, LOADER_PACKAGES, status) or _library_version(root, "libze_loader.so.1.", libs)


def compute_runtime(root: Path, status: bytes | None = None, libs: Libs | None = None) -> str:
    """The Intel compute runtime's version (the Level Zero GPU driver): from dpkg's status, else the library's file name."""
    return dpkg_version(root, COMPUTE_RUNTIME_PACKAGES, status) or _library_version(root, "libze_intel_gpu.so.1.", libs)


def dpkg_version(root: Path, packages: tuple[str, ...], status: bytes | None = None) -> str:
    """`<package> <version>` of the first of `packages` dpkg lists as installed."""
    text = _read_bytes(root / DPKG_STATUS) if status is None else status
    for name in packages:  # found by name, not by parsing the whole (megabytes) file; only its stanza decoded
        start = _stanza_start(text, f"Package: {name}\n".encode())
        if start < 0:
            continue
        end = text.find(b"\n\n", start)
        stanza = text[start:end if end >= 0 else len(text)].decode("utf-8", "replace")
        fields = dict(line.split(": ", 1) for line in stanza.splitlines() if ": " in line and not line[0].isspace())
        if "installed" in fields.get("Status", "").split():
            return f"{name} {fields.get('Version', '')}"
    return ""


def _stanza_start(text: bytes, line: bytes) -> int:
    """Where `line` starts a line of `text` (-1: nowhere)."""
    at = text.find(line)
    while at > 0 and text[at - 1] != 0x0A:  # (not at a line's start: "Package: x" inside another field)
        at = text.find(line, at + 1)
    return at


def _lib_names(root: Path) -> Libs:
    """The names in each of LIB_DIRS (none where it cannot be listed)."""
    out = []
    for d in LIB_DIRS:
        try:
            out.append(tuple(os.listdir(root / d)))
        except OSError:
            out.append(())
    return tuple(out)


def _library_version(root: Path, prefix: str, libs: Libs | None = None) -> str:
    for names in _lib_names(root) if libs is None else libs:
        for name in sorted(n for n in names if n.startswith(prefix)):
            return name[len(prefix) - 2:]  # "1.21.9" of libze_loader.so.1.21.9
    return ""


def versions_in(folder: Path) -> tuple[str, ...]:
    """The version-named folders in `folder` (oneAPI components install one per version), sorted; () when unreadable."""
    try:
        return tuple(sorted(p.name for p in folder.iterdir() if VERSION_DIR.match(p.name)))
    except OSError:
        return ()


def _read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace").strip()
    except OSError:
        return ""
