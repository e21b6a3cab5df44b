"""The shared-object file names a locked wheel holds, read from its zip central directory and nothing else:
a local file (a file:// URL, a find-links folder, `wheels/deps/`) directly, a remote one by HTTP range requests
(its last 256 KiB, then the directory if it starts before that): a few hundred KB, not the 900 MB torch wheel.
Cached by the wheel's sha256 under `<cache>/native/files-<sha256>.json`, so each file is read once per machine.

The names answer "which sonames does the closure provide"; the wheel's own ELF objects are read where the file
is fetched anyway (smoke, bundles with their dependencies, `toolchain lock --audit`). A server that does not
serve ranges gets the whole file fetched as pip fetches locked files (hash checked)."""

from __future__ import annotations

import io
import re
import struct
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from toolchain.core.fs import atomic_write_text
from toolchain.core.redact import redact_url
from toolchain.core.regex import Regex
from toolchain.core.trust import read_sealed, sealed
from toolchain.errors import TransientError
from toolchain.resolve.closure import LockedDist

FILES_VERSION = 1
SO_NAME = Regex(r"\.so(\.\d+)*$")  # a shared object's file name (libx.so, libx.so.1.2)
TAIL = 256 * 1024
TIMEOUT = 60
READERS = 8  # wheels whose file lists are read at once (each its thread's HTTP session)
EOCD, EOCD64_LOCATOR = b"PK\x05\x06", b"PK\x06\x07"


def cached_path(cache_dir: Path, sha256: str) -> Path:
    """Where the listing of a wheel's files (by the wheel's sha256) is cached."""
    return cache_dir / "native" / f"files-{sha256}.json"


def libraries_of(dist: LockedDist, cache_dir: Path, deps_dir: Path, log: Path) -> tuple[str, ...]:
    """The paths in `dist`'s wheel whose names are those of shared objects (`.so`, `.so.N`), from the cache,
    the local file, or the remote central directory."""
    cached = cached_path(cache_dir, dist.sha256)
    raw = read_sealed(cached, cached.stem)  # (trusted only as core/trust.py says: else listed again and replaced)
    if isinstance(raw, dict) and raw.get("files-version") == FILES_VERSION and isinstance(raw.get("libraries"), list):
        return tuple(str(n) for n in raw["libraries"])
    local = next((p for p in (Path(dist.local_path()) if dist.local_path() else None, deps_dir / dist.file)
                  if p is not None and p.is_file()), None)
    names = _names(local) if local is not None else _remote_names(dist, deps_dir, log)
    libraries = tuple(sorted(n for n in names if SO_NAME.search(n)))
    atomic_write_text(cached, sealed(cached.stem, {"files-version": FILES_VERSION, "wheel": dist.file,
                                                   "libraries": list(libraries)}))
    return libraries


def libraries_of_all(dists: Sequence[LockedDist], cache_dir: Path, deps_dir: Path,
                     log: Path) -> list[tuple[str, ...]]:
    """`libraries_of` each of `dists`, in order; those not cached are read READERS at once (a closure's ~110
    remote central directories are each a round trip or two: 13 s one after the other, where the first
    resolution of an auto-round lock waited for them)."""
    if len(dists) < 2:
        return [libraries_of(d, cache_dir, deps_dir, log) for d in dists]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(min(READERS, len(dists)), thread_name_prefix="wheelfiles") as pool:
        return list(pool.map(lambda d: libraries_of(d, cache_dir, deps_dir, log), dists))


def _names(wheel: Path | IO[bytes] | io.RawIOBase) -> list[str]:
    import zipfile  # (a warm build lists no wheel: the cache remembers its libraries)

    with zipfile.ZipFile(wheel) as z:
        return [i.filename for i in z.infolist() if not i.is_dir()]


_HTTP = threading.local()  # one session per thread: an audit of 70 wheels makes one TLS setup per host, not 70


def _session() -> Any:
    """This thread's HTTP session (kept alive: its connections and TLS context are reused)."""
    import requests

    if getattr(_HTTP, "session", None) is None:
        _HTTP.session = requests.Session()
    return _HTTP.session


def _remote_names(dist: LockedDist, deps_dir: Path, log: Path) -> list[str]:
    import requests

    where = redact_url(dist.url)
    try:
        http = _session()
        first = http.get(dist.url, headers={"Range": f"bytes=-{TAIL}"}, timeout=TIMEOUT, stream=True)
        if first.status_code == 200:  # no ranges served: the whole file, fetched as locked files are
            first.close()
            return _fetched_names(dist, deps_dir, log)
        first.raise_for_status()
        tail = first.content
        total = _total(first.headers.get("Content-Range", ""), len(tail))
        start = total - len(tail)
        need = _directory_start(tail, start)
        if need < start:
            more = http.get(dist.url, headers={"Range": f"bytes={need}-{start - 1}"}, timeout=TIMEOUT)
            more.raise_for_status()
            if more.status_code != 206 or len(more.content) != start - need:
                raise ValueError(f"asked for bytes {need}-{start - 1}, got {len(more.content)} bytes")
            tail, start = more.content + tail, need
    except requests.RequestException as exc:
        raise TransientError(f"reading the file list of {dist.file} from {where} failed: {exc}", kind="network",
                             hint="check the network and run the same command again") from None
    except (ValueError, struct.error) as exc:
        raise TransientError(f"reading the file list of {dist.file} from {where} failed: the server's answer is "
                             f"not the end of a zip file ({exc})", kind="network",
                             hint="run the same command again; if it persists, the index serves another file") from None
    return _names(_Sparse(total, start, tail))


_FETCHING = threading.Lock()  # fetch_dists into one deps folder, with one log: one at a time (libraries_of_all)


def _fetched_names(dist: LockedDist, deps_dir: Path, log: Path) -> list[str]:
    from toolchain.resolve.fetch import fetch_dists

    with _FETCHING:  # (two at once into the folder found each other's files missing: "do not match the lock")
        got = fetch_dists([dist], deps_dir, log)
    return _names(got[dist.name])


def _total(content_range: str, length: int) -> int:
    """The file's size from `bytes START-END/TOTAL`."""
    m = re.match(r"^bytes\s+\d+-\d+/(\d+)$", content_range.strip())
    if m is None:
        raise ValueError(f"no usable Content-Range ({content_range!r}) for {length} bytes")
    return int(m.group(1))


def _directory_start(tail: bytes, start: int) -> int:
    """Where the central directory begins (an offset in the file), from the end records in `tail`."""
    i = tail.rfind(EOCD)
    if i < 0:
        raise ValueError("no end of central directory record")
    size_cd, offset_cd = struct.unpack("<II", tail[i + 12:i + 20])
    if 0xFFFFFFFF in (size_cd, offset_cd) and tail[i - 20:i - 16] == EOCD64_LOCATOR:
        record = int(struct.unpack("<Q", tail[i - 12:i - 4])[0])
        rel = record - start
        if rel < 0:
            return record  # the zip64 record itself is before the tail: read from there
        (offset_cd,) = struct.unpack("<Q", tail[rel + 48:rel + 56])
    return int(offset_cd)


class _Sparse(io.RawIOBase):
    """A file of `size` bytes of which only [start, size) is known: what zipfile reads to list names."""

    def __init__(self, size: int, start: int, data: bytes) -> None:
        super().__init__()
        self.size, self.start, self.data, self.pos = size, start, data, 0

    def seekable(self) -> bool:
        return True

    def readable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = 0) -> int:
        self.pos = {0: offset, 1: self.pos + offset, 2: self.size + offset}[whence]
        return self.pos

    def read(self, n: int | None = -1) -> bytes:
        if self.pos < self.start:
            raise OSError(f"byte {self.pos} is before the fetched range (from {self.start})")
        end = self.size if n is None or n < 0 else min(self.size, self.pos + n)
        out = self.data[self.pos - self.start:end - self.start]
        self.pos += len(out)
        return out

    def readinto(self, buffer: memoryview | bytearray) -> int:  # type: ignore[override]
        got = self.read(len(buffer))
        buffer[:len(got)] = got
        return len(got)


def prefetch(dists: Sequence[LockedDist], cache_dir: Path, deps_dir: Path, log: Path) -> dict[str, tuple[str, ...]]:
    """{file name: libraries} of each wheel of `dists`."""
    return {d.file: libraries_of(d, cache_dir, deps_dir, log) for d in dists if d.is_wheel}
