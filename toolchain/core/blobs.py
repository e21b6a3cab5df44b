"""Files kept by their sha256: the patches and input files a build read, so that its lock rebuilds on the
machine that built it after the files it names moved (`build --from-lock` finds them here by hash).

`<cache>/files/<sha[:2]>/<sha256>`, content-addressed as the wheel cache is: written through a temporary file
and renamed (whole or absent, kill -9 and concurrent writers leave no half file), hashed on the way in and
checked again when taken out (a damaged copy is no copy).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from toolchain.core import trust
from toolchain.core.fs import DigestMismatch, atomic_copy_verified

FILES_DIR = "files"


def blob_path(cache_dir: Path, sha256: str) -> Path:
    """Where the cache keeps the file with this sha256 (two-character fan-out directories)."""
    return Path(cache_dir) / FILES_DIR / sha256[:2] / sha256


def keep(cache_dir: Path, src: Path, sha256: str) -> None:
    """Keep a copy of `src` (which must hash to `sha256`) unless one is kept already (a stat: a warm build
    writes nothing). A file that changed meanwhile or a cache that cannot be written keeps nothing."""
    dest = blob_path(cache_dir, sha256)
    with contextlib.suppress(OSError):
        if not trust.problem(os.lstat(dest)):  # (one lstat: a copy the rule would refuse is replaced)
            return
    with contextlib.suppress(DigestMismatch, OSError):
        atomic_copy_verified(src, dest, sha256)


def find(cache_dir: Path | None, sha256: str) -> Path | None:
    """The kept copy of the file with this sha256, or None (none kept, or a damaged one)."""
    if cache_dir is None:
        return None
    path = blob_path(cache_dir, sha256)
    import hashlib  # (a warm build takes no blob)

    try:
        with trust.open_trusted(path) as fh:  # (core/trust.py: another user's copy, a FIFO, a link: none kept)
            return path if hashlib.file_digest(fh, "sha256").hexdigest() == sha256 else None
    except OSError:
        return None
