"""The native ABI audit: what pip cannot see. Every shared object of the built and prebuilt wheels of a lock is
read once for its `DT_NEEDED` sonames, its RUNPATH/RPATH and the compiler stamps of its `.comment` section; the
closure's wheels are known by their file lists (the zip central directory, toolchain.resolve.wheelfiles: no
gigabytes to read a name) and their own objects are read where they are fetched anyway (smoke, bundles with
their dependencies, `toolchain lock --audit`). Each needed soname then gets a verdict from the policy
(toolchain.resolve.verdicts, toolchain/data/native-policy.toml): provided, expected from the run host, missing.
oneAPI 2025 ships `libsycl.so.8` and 2026 `libsycl.so.9` (vLLM #11734, bitsandbytes #1991): a kernels wheel
built with one does not load with the other, and the metadata says nothing of it.

The ELF reading is pyelftools', imported only when a wheel not audited before is read; audits are cached by
the wheel's sha256 (`<cache>/native/<sha256>.json`), so a warm build reads JSON and never imports it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, Protocol

from toolchain.core.fs import atomic_write_text
from toolchain.core.record import field, record
from toolchain.core.regex import Regex
from toolchain.core.serial import from_data, meta, to_data
from toolchain.core.trust import read_sealed, sealed
from toolchain.errors import BuildError
from toolchain.resolve.closure import LockedDist
from toolchain.resolve.wheelfiles import SO_NAME

if TYPE_CHECKING:
    from toolchain.core.proc.runner import Completed

NATIVE_DIR = "native"  # under the cache directory
AUDIT_VERSION = 2  # 2: RUNPATH/RPATH recorded
ELF_MAGIC = b"\x7fELF"
INTEL_COMPILER = Regex(r"oneAPI DPC\+\+/C\+\+ Compiler (\d{4}\.\d+)(?:\.\d+)*")


@record
class SharedObject:
    """One ELF shared object inside a wheel: its path, soname, needed libraries and compiler stamps."""
    # inside the wheel: vllm_xpu_kernels/_xpu_C.abi3.so
    path: str = field(metadata=meta(key="file"))
    soname: str = field(default="", metadata=meta(omit_default=True))  # DT_SONAME, "" when it has none
    needed: tuple[str, ...] = ()   # DT_NEEDED
    compilers: tuple[str, ...] = ()  # .comment strings (the compiler stamps)
    runpath: tuple[str, ...] = field(default=(), metadata=meta(omit_default=True))  # DT_RUNPATH, else DT_RPATH


@record
class WheelAudit:
    """The shared objects of one wheel (none for a pure-Python wheel)."""
    wheel: str                     # file name
    sha256: str
    dist: str = ""                 # distribution name and version, as the lock names it: "intel-sycl-rt 2025.3.3"
    role: str = ""                 # built | prebuilt | dependency
    objects: tuple[SharedObject, ...] = ()
    # a closure wheel known by its file list alone: the paths of its shared objects (no ELF read)
    libraries: tuple[str, ...] = field(default=(), metadata=meta(omit_default=True))
    # the sonames its objects need that the run host is expected to provide (the policy's verdict at build)
    host_provides: tuple[str, ...] = field(default=(), metadata=meta(key="host-provides", omit_default=True))

    def provides(self) -> set[str]:
        """The sonames this wheel's files answer: each file's name and its DT_SONAME."""
        return ({PurePosixPath(o.path).name for o in self.objects} | {o.soname for o in self.objects if o.soname}
                | {PurePosixPath(p).name for p in self.libraries})


@record
class Providers:
    """Where a target finds libraries besides the closure: setvars' library path and the loader's."""
    oneapi_version: str = ""
    oneapi: Mapping[str, str] = field(default_factory=dict)   # soname -> directory (setvars' LD_LIBRARY_PATH)
    system: Mapping[str, str] = field(default_factory=dict)   # soname -> path (ldconfig -p, the default dirs)
    installed: Mapping[str, str] = field(default_factory=dict)  # soname -> the target interpreter's distribution
    # that installed it (read for a base image, whose stack the wheels are installed over)


def audit_wheel(path: Path, sha256: str, cache_dir: Path | None, *, dist: str = "", role: str = "") -> WheelAudit:
    """The wheel's shared objects, from the cache when this sha256 was read before."""
    cached = (cache_dir / NATIVE_DIR / f"{sha256}.json") if cache_dir is not None else None
    known = _cached_objects(cached) if cached is not None else None
    if known is not None:
        return WheelAudit(path.name, sha256, dist, role, known)
    objects = tuple(_read_wheel(path))
    if cached is not None:
        atomic_write_text(cached, sealed(cached.stem, {"audit-version": AUDIT_VERSION, "wheel": path.name,
                                                       "objects": to_data(objects)}))
    return WheelAudit(path.name, sha256, dist, role, objects)


def _cached_objects(cached: Path) -> tuple[SharedObject, ...] | None:
    """The objects a native record remembers, when the cache's trust rule (core/trust.py) trusts it and it is
    whole; None for a miss (the wheel is read again and the record replaced)."""
    raw = read_sealed(cached, cached.stem)  # (filed under its own key, unchanged)
    try:
        if isinstance(raw, dict) and raw.get("audit-version") == AUDIT_VERSION:
            return tuple(from_data(SharedObject, o) for o in raw["objects"])
    except (ValueError, KeyError, TypeError, AttributeError):
        pass
    return None


def audit_wheels(built: Sequence[tuple[Path, str, str, str]], deps: Sequence[LockedDist], cache_dir: Path,
                 deps_dir: Path, log: Path, *, read_deps: bool = True) -> list[WheelAudit]:
    """Audits of the built wheels [(file, sha256, "name version", role)] and of the closure's wheels. With
    `read_deps`, a dependency's objects are read from its file:// path, from `deps_dir`, or fetched there (hashes
    checked) when its audit is not cached yet; without, a dependency is known by its file list alone
    (wheelfiles: the zip central directory, by range requests), so nothing is downloaded to read a name.
    Sdists have no shared objects to read before they are built."""
    audits = [audit_wheel(path, sha, cache_dir, dist=dist, role=role) for path, sha, dist, role in built]
    wheels = [d for d in deps if d.is_wheel]
    if not read_deps:
        from toolchain.resolve.wheelfiles import libraries_of_all

        listed = libraries_of_all(wheels, cache_dir, deps_dir, log)
        return audits + [WheelAudit(d.file, d.sha256, f"{d.name} {d.version}", "dependency", libraries=libraries)
                         for d, libraries in zip(wheels, listed, strict=True)]
    todo = [d for d in wheels if _cached_objects(cache_dir / NATIVE_DIR / f"{d.sha256}.json") is None
            and not (d.local_path() and Path(d.local_path()).is_file()) and not (deps_dir / d.file).is_file()]
    if todo:
        from toolchain.resolve.fetch import fetch_dists

        fetch_dists(todo, deps_dir, log)
    for d in wheels:
        local = Path(d.local_path()) if d.local_path() and Path(d.local_path()).is_file() else deps_dir / d.file
        audits.append(audit_wheel(local, d.sha256, cache_dir, dist=f"{d.name} {d.version}", role="dependency"))
    return audits


class Runs(Protocol):
    """What the probe needs of a target: a build `Runtime` or smoke's target."""

    def run(self, argv: Sequence[str], *, capture: bool = ..., check: bool = ...) -> Completed: ...
    def script(self, name: str) -> str: ...


def target_providers(runtime: Runs, python: str, oneapi_dirs: Sequence[str], oneapi_version: str, *,
                     installed: bool = False, memo_dir: Path | None = None) -> Providers:
    """The target's system loader path (`ldconfig -p` and the default library folders) and the sonames in
    setvars' library path, as the target's interpreter lists them; with `installed`, also the shared objects
    of every distribution that interpreter has installed (a base image's stack: torch's libtorch_xpu.so,
    intel-sycl-rt's libsycl.so.N under the environment's lib/), by their RECORD.

    `memo_dir` (only for a target whose files are this machine's: the host): the listing is remembered there
    while ldconfig's cache and every folder listed are unchanged, so a build into a new --out starts no
    interpreter and no ldconfig to list the same libraries again. An `installed` listing is never remembered
    (a `pip install` changes it without touching those)."""
    def compute() -> tuple[dict[str, dict[str, str]], list[str]]:
        r = runtime.run([python, runtime.script("libraries.py"), *(["--installed"] if installed else []),
                         ":".join(SYSTEM_LIB_DIRS), *oneapi_dirs], capture=True, check=False)
        try:
            return probe_listing(r.stdout), [LOADER_CACHE, *SYSTEM_LIB_DIRS, *oneapi_dirs]
        except (ValueError, IndexError, AttributeError) as exc:
            raise BuildError(f"listing the target's libraries failed (exit {r.returncode}): "
                             f"{(r.stderr or r.stdout)[-300:].strip()}",
                             hint="check [target] python runs in the target") from exc

    if memo_dir is None or installed:
        raw = compute()[0]
    else:
        from toolchain.core.probe_memo import remembered

        identity = {"python": python, "oneapi-dirs": list(oneapi_dirs), "path": os.environ.get("PATH", "")}
        raw = remembered(memo_dir, "loader", identity, compute)
    return Providers(oneapi_version, dict(raw.get("oneapi", {})), dict(raw.get("system", {})),
                     dict(raw.get("installed", {})))


def _read_wheel(path: Path) -> Iterable[SharedObject]:
    import io
    import zipfile

    with zipfile.ZipFile(path) as z:
        for info in z.infolist():
            name = info.filename
            if info.is_dir() or not SO_NAME.search(name):
                continue
            with z.open(info) as f:
                if f.read(4) != ELF_MAGIC:
                    continue
            yield read_elf(name, io.BytesIO(z.read(info)))


def read_elf(name: str, stream: Any) -> SharedObject:
    """Read the soname, DT_NEEDED entries and compiler stamps of the ELF file in `stream`."""
    from elftools.elf.dynamic import DynamicSection
    from elftools.elf.elffile import ELFFile

    elf = ELFFile(stream)
    needed: list[str] = []
    soname = ""
    runpath: list[str] = []
    rpath: list[str] = []
    for section in elf.iter_sections():
        if isinstance(section, DynamicSection):
            for tag in section.iter_tags():
                if tag.entry.d_tag == "DT_NEEDED":
                    needed.append(str(getattr(tag, "needed", "")))
                elif tag.entry.d_tag == "DT_SONAME":
                    soname = str(getattr(tag, "soname", ""))
                elif tag.entry.d_tag == "DT_RUNPATH":
                    runpath += [d for d in str(getattr(tag, "runpath", "")).split(":") if d]
                elif tag.entry.d_tag == "DT_RPATH":
                    rpath += [d for d in str(getattr(tag, "rpath", "")).split(":") if d]
    comment = elf.get_section_by_name(".comment")
    stamps: list[str] = []
    if comment is not None:
        for raw in comment.data().split(b"\0"):
            text = raw.decode("utf-8", "replace").strip()
            if text and text not in stamps:
                stamps.append(text)
    return SharedObject(name, soname, tuple(needed), tuple(stamps), tuple(runpath or rpath))


# ---- the target's library paths --------------------------------------------------------------------------

# What `ldconfig -p` prints comes from its cache; with the default library folders, what the probe lists
LOADER_CACHE = "/etc/ld.so.cache"
SYSTEM_LIB_DIRS = ("/lib64", "/usr/lib64", "/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib", "/usr/lib")

def library_dirs(env: Mapping[str, str | None]) -> list[str]:
    """setvars' library path (LD_LIBRARY_PATH as the toolchain environment sets it)."""
    return [d for d in (env.get("LD_LIBRARY_PATH") or "").split(":") if d]


def probe_listing(stdout: str) -> dict[str, dict[str, str]]:
    """The probe's JSON line: {"system"|"oneapi"|"installed": {soname: where}}."""
    raw = json.loads(stdout.strip().splitlines()[-1])
    return {k: {str(n): str(w) for n, w in dict(raw.get(k, {})).items()} for k in ("system", "oneapi", "installed")}
