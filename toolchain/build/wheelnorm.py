"""Normalize a built wheel in place so that the same contents always give the same bytes.

What varies between two builds of the same sources, and what is fixed here:
  entry-order   entries sorted by name, the .dist-info directory last and its RECORD the very last entry
                (the wheel spec asks archivers to put .dist-info at the end);
  timestamps    every entry dated SOURCE_DATE_EPOCH (UTC; zip cannot store times before 1980);
  permissions   0644, or 0755 when the file had any executable bit;
  record        RECORD regenerated with the sha256 and size of every entry, in archive order;
  zip-layout    anything else in the archive (compression level, extra fields, comments, creator system).

`normalize_wheel()` returns the names of the normalizations that changed something (the lock records them);
a wheel that is already normal is left untouched, so normalizing twice gives identical bytes.
"""

from __future__ import annotations

import base64
import collections
import contextlib
import csv
import hashlib
import io
import os
import stat
import tempfile
import threading
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from toolchain.core.fs import atomic_write_bytes, sha256_file
from toolchain.errors import BuildError

NORMALIZATIONS = ("entry-order", "timestamps", "permissions", "record", "zip-layout")
ZIP_MIN_EPOCH = 315532800  # 1980-01-01T00:00:00Z, the earliest time a zip entry can carry
ZIP_MAX_EPOCH = 4354819198  # 2107-12-31T23:59:58Z, the latest
_BLOCK = 1 << 20
IN_MEMORY_LIMIT = 256 << 20  # a wheel up to this size is normalized in memory, a larger one through a file


DateTime = tuple[int, int, int, int, int, int]  # what zipfile.ZipInfo stores


def zip_date_time(epoch: int) -> DateTime:
    """The zip date_time for `epoch` (UTC), clamped to what zip can store (seconds are even)."""
    clamped = min(max(int(epoch), ZIP_MIN_EPOCH), ZIP_MAX_EPOCH)
    t = time.gmtime(clamped)
    return (t.tm_year, t.tm_mon, t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec - t.tm_sec % 2)


def source_date_epoch(default: int = ZIP_MIN_EPOCH) -> int:
    """The timestamp written into rebuilt wheels: $SOURCE_DATE_EPOCH when it is a number, else `default`."""
    value = os.environ.get("SOURCE_DATE_EPOCH", "")
    return int(value) if value.strip().isdigit() else default


def normalize_wheel(path: Path, epoch: int | None = None) -> list[str]:
    """Rewrite the wheel at `path` atomically in normal form; return the normalizations that changed it.

    `epoch` is the timestamp for every entry (default: $SOURCE_DATE_EPOCH, else 1980-01-01).
    """
    path = Path(path)
    date_time = zip_date_time(source_date_epoch() if epoch is None else epoch)
    try:
        with zipfile.ZipFile(path) as zin:
            infos = zin.infolist()
            record_name = _record_name(path, infos)
            ordered = sorted((i for i in infos if i.filename != record_name),
                             key=lambda i: _sort_key(i.filename, record_name))
            old_record = zin.read(record_name)
            # written in memory when the wheel is not large (one write of the whole file, no seek and write
            # of each entry's header to the file), else to a temporary file beside it
            in_memory = path.stat().st_size <= IN_MEMORY_LIMIT
            with (contextlib.nullcontext(None) if in_memory else _scratch_file(path)) as scratch:
                out: IO[bytes]
                with (io.BytesIO() if scratch is None else open(scratch, "w+b")) as out:
                    new_record = _write_normalized(zin, ordered, record_name, date_time, out)
                    if _same_bytes(out, path):
                        return []
                    applied = _differences(infos, ordered, record_name, date_time, old_record, new_record)
                    if isinstance(out, io.BytesIO):
                        atomic_write_bytes(path, out.getvalue(), mode=0o644)
                        return applied or ["zip-layout"]
                    out.flush()
                    os.fchmod(out.fileno(), 0o644)
                    os.fsync(out.fileno())
                assert scratch is not None
                os.replace(scratch, path)
                return applied or ["zip-layout"]
    except zipfile.BadZipFile as exc:
        raise BuildError(f"{path}: not a valid wheel (zip) file: {exc}",
                         hint="the build backend wrote a broken archive; check the build log") from None


def _same_bytes(out: IO[bytes], path: Path) -> bool:
    """Whether what was written to `out` is byte for byte the file at `path`."""
    if out.tell() != path.stat().st_size:
        return False
    digest = hashlib.sha256()
    out.seek(0)
    for block in iter(lambda: out.read(_BLOCK), b""):
        digest.update(block)
    return digest.hexdigest() == sha256_file(path)


def _record_name(path: Path, infos: list[zipfile.ZipInfo]) -> str:
    records = [i.filename for i in infos
               if i.filename.count("/") == 1 and i.filename.endswith(".dist-info/RECORD")]
    if len(records) != 1:
        found = "none" if not records else ", ".join(records)
        raise BuildError(f"{path}: not a wheel: expected one <name>-<version>.dist-info/RECORD, found {found}",
                         hint="normalize only the .whl files a build backend wrote")
    return records[0]


def _sort_key(name: str, record_name: str) -> tuple[int, str]:
    dist_info = record_name.split("/", 1)[0] + "/"
    return (1 if name.startswith(dist_info) else 0, name)


def _mode(info: zipfile.ZipInfo) -> int:
    """The normal Unix mode for an entry: directories 0755, executables 0755, other files 0644."""
    mode = info.external_attr >> 16
    if info.is_dir():
        return stat.S_IFDIR | 0o755
    if stat.S_ISLNK(mode):
        return stat.S_IFLNK | 0o777
    return stat.S_IFREG | (0o755 if mode & 0o111 else 0o644)


def _normal_info(name: str, mode: int, date_time: DateTime) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, date_time=date_time)
    info.create_system = 3  # Unix, so the mode bits are honoured
    info.external_attr = (mode << 16) | (0x10 if stat.S_ISDIR(mode) else 0)
    info.compress_type = zipfile.ZIP_STORED if stat.S_ISDIR(mode) else zipfile.ZIP_DEFLATED
    return info


def _write_normalized(zin: zipfile.ZipFile, ordered: list[zipfile.ZipInfo], record_name: str,
                      date_time: DateTime, dest: IO[bytes]) -> bytes:
    rows: list[tuple[str, str, str]] = []
    with zipfile.ZipFile(dest, "w") as zout:
        for info in ordered:
            new = _normal_info(info.filename, _mode(info), date_time)
            if info.file_size <= DEFLATED_MEMO.largest and new.compress_type == zipfile.ZIP_DEFLATED:
                data = zin.read(info)
                digest = hashlib.sha256(data).digest()
                with zout.open(new, "w") as dst:
                    DEFLATED_MEMO.write(dst, data, digest)
            else:
                sha = hashlib.sha256()
                with zin.open(info) as src, zout.open(new, "w", force_zip64=info.file_size > 0x7FFF0000) as dst:
                    for block in iter(lambda: src.read(_BLOCK), b""):
                        sha.update(block)
                        dst.write(block)
                digest = sha.digest()
            if not info.is_dir():
                rows.append((info.filename, _record_hash(digest), str(info.file_size)))
        rows.append((record_name, "", ""))
        record = _record_bytes(rows)
        zout.writestr(_normal_info(record_name, stat.S_IFREG | 0o644, date_time), record)
    return record


class DeflatedMemo:
    """What zipfile's deflate wrote for an entry's bytes, kept in this process by their sha256 (at most
    `budget` bytes of it, the oldest dropped first): normalizing the wheel of the next commit (a bisect's next
    step, a rebuild) writes the same bytes for every file that did not change without compressing it again.
    The bytes are what the same compressor made of the same content, recorded as it wrote them: a replayed
    entry is byte for byte a compressed one. An entry is always read and hashed; only the compression is
    skipped. Where zipfile's writer is not the one this was made for (no `_compressor`), nothing is kept."""

    def __init__(self, budget: int = 64 << 20, largest: int = 8 << 20) -> None:
        self.budget, self.largest = budget, largest
        self._kept: collections.OrderedDict[bytes, bytes] = collections.OrderedDict()
        self._size = 0
        self._lock = threading.Lock()
        self.replayed = 0  # entries written from what was kept (for tests and benchmarks)

    def write(self, dst: IO[bytes], data: bytes, digest: bytes) -> None:
        """Write `data` (sha256 `digest`) to a zipfile entry open for writing with deflate."""
        inner = getattr(dst, "_compressor", None)
        if inner is None or not hasattr(inner, "compress"):
            dst.write(data)
            return
        with self._lock:
            kept = self._kept.get(digest)
            if kept is not None:
                self._kept.move_to_end(digest)
                self.replayed += 1
        if kept is not None:
            dst._compressor = _Replay(kept)  # type: ignore[attr-defined]
            dst.write(data)  # (the CRC and size of the content, as ever)
            return
        recording = _Recording(inner)
        dst._compressor = recording  # type: ignore[attr-defined]
        dst.write(data)
        dst.close()  # (flushes the compressor: the entry's last bytes)
        self._keep(digest, b"".join(recording.out))

    def clear(self) -> None:
        """Forget everything kept."""
        with self._lock:
            self._kept.clear()
            self._size = 0

    def _keep(self, digest: bytes, compressed: bytes) -> None:
        with self._lock:
            if digest in self._kept or len(compressed) > self.budget:
                return
            self._kept[digest] = compressed
            self._size += len(compressed)
            while self._size > self.budget:
                self._size -= len(self._kept.popitem(last=False)[1])


class _Recording:
    """A compressor that keeps what the one it wraps gives."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.out = inner, list[bytes]()

    def compress(self, data: bytes) -> bytes:
        chunk: bytes = self.inner.compress(data)
        self.out.append(chunk)
        return chunk

    def flush(self) -> bytes:
        chunk: bytes = self.inner.flush()
        self.out.append(chunk)
        return chunk


class _Replay:
    """A compressor that gives, at its flush, what a recorded one gave for the same content."""

    def __init__(self, compressed: bytes) -> None:
        self.compressed = compressed

    def compress(self, data: bytes) -> bytes:
        return b""

    def flush(self) -> bytes:
        return self.compressed


DEFLATED_MEMO = DeflatedMemo()


def _record_hash(digest: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def _record_bytes(rows: list[tuple[str, str, str]]) -> bytes:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerows(rows)
    return buf.getvalue().encode("utf-8")


def _differences(infos: list[zipfile.ZipInfo], ordered: list[zipfile.ZipInfo], record_name: str,
                 date_time: DateTime, old_record: bytes, new_record: bytes) -> list[str]:
    applied = []
    if [i.filename for i in infos] != [i.filename for i in ordered] + [record_name]:
        applied.append("entry-order")
    if any(tuple(i.date_time) != date_time for i in infos):
        applied.append("timestamps")
    if any(i.create_system != 3 or (i.external_attr >> 16) != _mode(i) for i in infos):
        applied.append("permissions")
    if old_record != new_record:
        applied.append("record")
    return applied


@contextlib.contextmanager
def _scratch_file(path: Path) -> Iterator[Path]:
    """A temporary file beside `path` (same filesystem, so os.replace is atomic); gone afterwards."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
