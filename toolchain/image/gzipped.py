"""The layer's compression, in one place: gzip at GZIP_LEVEL without a name or a time, so a layer's blob is a
pure function of its tar's bytes (for one zlib). The layer is written through it (image/layer.py), and a layer
of the tool's that podman loaded is read back through it (image/base.py): podman keeps a layer uncompressed and
`podman save` cannot give back the gzip it was handed, so the saved tar is compressed again and kept only when
its sha256 is the digest the image's manifest names (a layer the config's history says the tool made)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import IO, TYPE_CHECKING, BinaryIO

if TYPE_CHECKING:
    import gzip

GZIP_LEVEL = 6
HISTORY_COMMENT = "xpu-toolchain image"  # the config's history entry of a layer the tool made
GZIP_TYPES = ("application/vnd.oci.image.layer.v1.tar+gzip", "application/vnd.docker.image.rootfs.diff.tar.gzip")


class Counted:
    """A write-through sink that hashes and counts what passes."""

    def __init__(self, sink: BinaryIO | Counted | gzip.GzipFile) -> None:
        self.sink, self.sha, self.size = sink, hashlib.sha256(), 0

    def write(self, data: bytes) -> int:
        """Hash, count and pass on `data`."""
        self.sha.update(data)
        self.size += len(data)
        self.sink.write(data)
        return len(data)

    def tell(self) -> int:
        """Bytes passed so far (tarfile asks where it starts)."""
        return self.size

    def flush(self) -> None:
        """Nothing is buffered here."""


def gzip_writer(sink: IO[bytes]) -> gzip.GzipFile:
    """A gzip stream into `sink` as every layer of the tool's is compressed."""
    import gzip

    return gzip.GzipFile(filename="", mode="wb", fileobj=sink, compresslevel=GZIP_LEVEL, mtime=0)


def gzip_as_digest(plain: Path, dest: Path, digest: str) -> str:
    """`plain` (a tar) compressed as the tool does into `dest` when the result's sha256 is `digest` (written
    atomically); the digest the compression gave (`digest` when it was kept). Nothing is left at `dest`
    otherwise."""
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    try:
        with open(plain, "rb") as src, open(tmp, "wb") as raw:
            packed = Counted(raw)
            with gzip_writer(packed) as gz:  # type: ignore[arg-type]
                while chunk := src.read(1 << 20):
                    gz.write(chunk)
        made = "sha256:" + packed.sha.hexdigest()
        if made == digest:
            os.replace(tmp, dest)
        return made
    finally:
        tmp.unlink(missing_ok=True)
