"""The content-addressed wheel cache and the prepared source-tree cache, under one cache directory.

Wheel entries (`wheels/<k[:2]>/<key>/`) are written into a temporary directory and renamed into place, so
an entry is whole or absent; a builder holds the key's flock while building, so two builders of one key
build it once, and the kernel drops the lock of a builder killed with SIGKILL.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from toolchain.core.fs import (
    atomic_copy,
    atomic_write_text,
    file_lock,
    publish_dir,
    sha256_file,
)

CACHE_ENV = "TOOLCHAIN_CACHE_DIR"


def default_cache_dir() -> Path:
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "xpu-toolchain"


WHEELS_DIR = "wheels"  # under an out dir: the built wheels, as the lock names them


@dataclass(frozen=True)
class WheelRef:
    file: str
    sha256: str
    size: int


@dataclass(frozen=True)
class CacheEntry:
    key: str
    wheel: Path
    sha256: str
    size: int
    meta: dict


class WheelCache:
    def __init__(self, root: Path) -> None:
        self.root = Path(root) / "wheels"

    def _dir(self, key: str) -> Path:
        return self.root / key[:2] / key

    def get(self, key: str) -> CacheEntry | None:
        d = self._dir(key)
        meta_file = d / "entry.json"
        if not meta_file.is_file():
            return None
        meta = json.loads(meta_file.read_text())
        wheel = d / meta["wheel"]
        if not wheel.is_file() or wheel.stat().st_size != meta["size"]:
            return None
        return CacheEntry(key, wheel, meta["sha256"], meta["size"], meta)

    def verify(self, entry: CacheEntry) -> bool:
        return sha256_file(entry.wheel) == entry.sha256

    def evict(self, key: str) -> None:
        d = self._dir(key)
        if d.is_dir():
            trash = d.with_name(f".tmp-evict-{key}-{uuid.uuid4().hex}")
            os.rename(d, trash)
            shutil.rmtree(trash, ignore_errors=True)

    @contextlib.contextmanager
    def building(self, key: str) -> Iterator[None]:
        """Held while a key is built; leftovers of builders that died holding it are removed."""
        with file_lock(self.root / "locks" / f"{key}.lock"):
            parent = self._dir(key).parent
            if parent.is_dir():
                for stale in parent.glob(f".tmp-{key}-*"):
                    shutil.rmtree(stale, ignore_errors=True)
            yield

    def put(self, key: str, wheel: Path, meta: dict, log: Path | None = None) -> CacheEntry:
        final = self._dir(key)
        tmp = final.with_name(f".tmp-{key}-{uuid.uuid4().hex}")
        tmp.mkdir(parents=True)
        shutil.copyfile(wheel, tmp / wheel.name)
        if log is not None and log.is_file():
            shutil.copyfile(log, tmp / "build.log")
        sha, size = sha256_file(tmp / wheel.name), (tmp / wheel.name).stat().st_size
        meta = dict(meta, wheel=wheel.name, sha256=sha, size=size, stored=time.time())
        atomic_write_text(tmp / "entry.json", json.dumps(meta, indent=2, sort_keys=True))
        publish_dir(tmp, final)
        entry = self.get(key)
        assert entry is not None
        return entry


def copy_wheel(entry: CacheEntry, dest_dir: Path) -> Path:
    dest = dest_dir / entry.wheel.name
    if not (dest.is_file() and dest.stat().st_size == entry.size and sha256_file(dest) == entry.sha256):
        atomic_copy(entry.wheel, dest)
    return dest
