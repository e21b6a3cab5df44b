"""Which entries of the local wheel cache `toolchain cache prune --older-than AGE --keep-size SIZE` removes
(`prune_local`): found without following a symbolic link, evicted by `WheelCache.evict` (nothing deleted through a
link). The remote cache's rule is sharing/retention.py; both word ages and sizes the same way."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol, TypeVar

from toolchain.core.record import record
from toolchain.sharing.retention import age_text, size_text


@record
class LocalEntry:
    """One entry of the local wheel cache as the local rule sees it: its folder, bytes and when stored."""
    path: Path
    key: str
    component: str
    wheel: str
    size: int
    stored: float  # entry.json's `stored`, else the folder's mtime (an entry whose entry.json is not trusted)


@record
class LocalPruned:
    """What a prune of the local cache saw and did."""
    verdicts: tuple[tuple[LocalEntry, bool, str], ...]  # (entry, removed, why), newest first
    refused: tuple[str, ...]   # symbolic links met on the way: not followed, nothing removed through them
    freed: int                 # bytes removed (0 in a dry run)


def local_entries(cache_dir: Path) -> tuple[list[LocalEntry], list[str]]:
    """The local wheel cache's entries, newest first, found without following a symbolic link (a link met
    is named in the second list, and nothing under it is looked at)."""
    from toolchain.build.cache import WHEELS_DIR, read_meta

    root = Path(cache_dir) / WHEELS_DIR
    links: list[str] = []
    found: list[LocalEntry] = []
    if root.is_symlink():
        return [], [str(root)]
    for fan in _folders(root, links):
        if len(fan.name) != 2:
            continue  # locks/ and what else lives beside the fan-out folders
        for entry in _folders(fan, links):
            if entry.name.startswith("."):  # a write or an eviction under way
                continue
            _, meta = read_meta(entry / "entry.json")
            size = 0
            with os.scandir(entry) as it:
                for f in it:
                    if f.is_file(follow_symlinks=False):
                        size += f.stat(follow_symlinks=False).st_size
            stored = meta.stored if meta is not None and meta.stored else os.lstat(entry).st_mtime
            found.append(LocalEntry(entry, entry.name, meta.component if meta else "", meta.wheel if meta else "",
                                    size, float(stored)))
    return sorted(found, key=lambda e: (e.stored, e.key), reverse=True), links


def _folders(parent: Path, links: list[str]) -> list[Path]:
    """The real folders in `parent` (a symbolic link is added to `links`, never entered)."""
    out = []
    try:
        with os.scandir(parent) as it:
            for e in it:
                if e.is_symlink():
                    links.append(e.path)
                elif e.is_dir(follow_symlinks=False):
                    out.append(Path(e.path))
    except OSError:
        pass
    return sorted(out)


class Kept(Protocol):
    """What the local rule reads of an entry: its bytes and when it was stored (or last used)."""
    @property
    def size(self) -> int: ...
    @property
    def stored(self) -> float: ...


E = TypeVar("E", bound=Kept)


def decide_local(entries: Sequence[E], now: float, older_than: float | None,
                 keep_size: int | None) -> list[tuple[E, bool, str]]:
    """(entry, remove, why) for each of `entries` (newest first): the wheel cache's entries, the link cache's
    files (linkprune.py). `keep_size`: the newest entries are kept while
    their total stays within it; `older_than`: what was stored before now - AGE goes. Both: an entry goes when
    it is older than AGE and beyond the size kept, as `--keep N` and `--older-than` combine remotely."""
    out: list[tuple[E, bool, str]] = []
    total = 0
    for e in entries:
        total += e.size
        within = keep_size is not None and total <= keep_size
        recent = older_than is not None and e.stored >= now - older_than
        if within:
            out.append((e, False, f"among the newest {size_text(keep_size or 0)}"))
        elif recent:
            out.append((e, False, f"stored {age_text(now - e.stored)} ago: within {age_text(older_than or 0)}"))
        else:
            why = [f"stored {age_text(now - e.stored)} ago"] if older_than is not None else []
            why += [f"beyond the newest {size_text(keep_size)}"] if keep_size is not None else []
            out.append((e, True, ", ".join(why)))
    return out


def prune_local(cache_dir: Path, *, older_than: float | None, keep_size: int | None, dry_run: bool,
                warn: Callable[[str], None]) -> LocalPruned:
    """Apply the local rule to the wheel cache under `cache_dir`: each entry that goes is evicted (renamed out
    of the way, then deleted: `WheelCache.evict`, which deletes nothing reached through a symbolic link)."""
    from toolchain.build.cache import WheelCache

    entries, links = local_entries(cache_dir)
    verdicts = decide_local(entries, time.time(), older_than, keep_size)
    cache, freed = WheelCache(cache_dir, warn), 0
    for entry, remove, _ in verdicts:
        if remove and not dry_run and cache.evict(entry.key, entry.path):  # (where it is, in whichever fan-out)
            freed += entry.size
    return LocalPruned(tuple(verdicts), tuple(links), freed)


__all__ = ["Kept", "LocalEntry", "LocalPruned", "decide_local", "local_entries", "prune_local"]
