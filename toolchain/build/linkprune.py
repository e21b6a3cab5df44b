"""Which files of the link cache (`<cache>/links`, build/linkcache.py) `toolchain cache prune --older-than AGE
--keep-size SIZE` removes (`prune_links`), by the local wheel cache's rule (localprune.decide_local) applied to
the link cache alone: its remembered link outputs (`<key[:2]>/<key>`) and remembered hashes (`stat/<hash>`),
each dated by its last use (a hit sets the output's mtime, as ccache's LRU does), so `--older-than 30d` removes
what no build used for 30 days and `--keep-size` keeps the most recently used up to SIZE. Temporaries of
writers killed mid-write (`.tmp-*`, an hour old) go whatever the rule.

Only what the link script made is touched: a regular file with one name, owned by this user, named as the
script names it (64 hex digits, in the fan-out folder of its first two), in a real folder of the cache. Nothing
is reached through a symbolic link: each folder is opened without following one (a link met is named and
skipped) and each file is removed by name within the folder so opened, after checking it is still the file
listed. A file of another user (a cache shared with a group) is neither read by the link script nor removed
here. Removing is one unlink: a build that already opened the entry reads it whole; one that looks it up
after finds none and links for real (a miss, never a failure).

Without a prune, a build that stored a new link keeps the link cache within the compiler cache's own bound
(`keep_within`: ccache's `max_size`, 5 GiB unless its ccache.conf or CCACHE_MAXSIZE says otherwise; none when
it is 0), the most recently used kept, as ccache keeps its own objects.
"""

from __future__ import annotations

import contextlib
import os
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from toolchain.build.linkcache import own
from toolchain.build.localprune import decide_local
from toolchain.core.record import record

if TYPE_CHECKING:
    from toolchain.build.ccache import CompilerCache

STAT_DIR = "stat"  # the remembered hashes of large inputs (linkcache.file_hash)
STALE = 3600.0  # a temporary this old is a killed writer's: a link's output is written in seconds
_HEX = frozenset("0123456789abcdef")
_OPEN_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@record
class LinkFile:
    """One file of the link cache as the rule sees it."""
    folder: str  # its folder in the link cache: a fan-out folder or `stat`
    name: str
    kind: str    # "link" (a remembered output) or "hash" (a remembered hash)
    size: int
    stored: float  # its mtime: when it was written or (a link) last used
    ino: int


@record
class LinksPruned:
    """What a prune of the link cache saw and did."""
    verdicts: tuple[tuple[LinkFile, bool, str], ...]  # (file, removed, why), most recently used first
    refused: tuple[str, ...]  # symbolic links and folders of other users met: not entered, nothing removed
    temporaries: int          # stale temporaries removed (or, in a dry run, found)
    freed: int                # bytes removed (0 in a dry run)


def _key_name(name: str) -> bool:
    return len(name) == 64 and set(name) <= _HEX


def _ours(st: os.stat_result) -> bool:
    """What the link script made is a regular file of this user's with one name that no one else may write."""
    return stat.S_ISREG(st.st_mode) and own(st) and st.st_nlink == 1


@contextlib.contextmanager
def _folder(parent: int | None, name: str, refused: list[str], shown: str) -> Iterator[int | None]:
    """A descriptor of the folder `name` in `parent` (None: a path), opened without following a symbolic link
    and only when it is this user's; None (named in `refused` when it exists) otherwise."""
    try:
        fd = os.open(name, _OPEN_DIR, dir_fd=parent)
    except FileNotFoundError:
        yield None
        return
    except OSError:  # a symbolic link (ELOOP), not a folder, unreadable
        refused.append(shown)
        yield None
        return
    try:
        st = os.fstat(fd)
        if not own(st):
            refused.append(shown)
            yield None
        else:
            yield fd
    finally:
        os.close(fd)


def _walk(links: int, shown: str, refused: list[str], now: float) -> tuple[list[LinkFile], list[LinkFile]]:
    """(the files the rule decides on, the stale temporaries) of the link cache open as `links`."""
    files: list[LinkFile] = []
    stale: list[LinkFile] = []
    for sub in sorted(os.listdir(links)):
        if not (sub == STAT_DIR or (len(sub) == 2 and set(sub) <= _HEX)):
            continue
        with _folder(links, sub, refused, os.path.join(shown, sub)) as fd:
            if fd is None:
                continue
            for name in os.listdir(fd):
                try:
                    st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                except OSError:
                    continue  # (gone meanwhile)
                if not _ours(st):
                    continue
                kind = "hash" if sub == STAT_DIR else "link"
                found = LinkFile(sub, name, kind, st.st_size, st.st_mtime, st.st_ino)
                if name.startswith(".tmp-"):
                    if st.st_mtime < now - STALE:
                        stale.append(found)
                elif _key_name(name) and (kind == "hash" or name[:2] == sub):
                    files.append(found)
    files.sort(key=lambda f: (f.stored, f.name), reverse=True)
    return files, stale


def _remove(links: int, shown: str, f: LinkFile, refused: list[str]) -> bool:
    """Unlink `f` by name in its folder, reopened without following a link, if it is still the file listed."""
    with _folder(links, f.folder, refused, os.path.join(shown, f.folder)) as fd:
        if fd is None:
            return False
        try:
            st = os.stat(f.name, dir_fd=fd, follow_symlinks=False)
            if st.st_ino != f.ino or not _ours(st):
                return False  # replaced meanwhile (a build wrote the same key again): kept
            os.unlink(f.name, dir_fd=fd)
        except FileNotFoundError:
            return False  # another prune got there first
        return True


def prune_links(links_dir: Path, *, older_than: float | None, keep_size: int | None,
                dry_run: bool) -> LinksPruned:
    """Apply the local rule to the link cache `links_dir` (`<cache>/links`; its own SIZE: the wheels are kept to
    theirs). The cache folder above it may be a symbolic link; the link cache's own folders may not."""
    refused: list[str] = []
    shown, now = str(links_dir), time.time()
    try:
        cache = os.open(Path(links_dir).parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return LinksPruned((), (), 0, 0)
    try:
        with _folder(cache, Path(links_dir).name, refused, shown) as links:
            if links is None:
                return LinksPruned((), tuple(refused), 0, 0)
            files, stale = _walk(links, shown, refused, now)
            verdicts = decide_local(files, now, older_than, keep_size)
            freed = temporaries = 0
            for f, remove, _ in verdicts:
                if remove and not dry_run and _remove(links, shown, f, refused):
                    freed += f.size
            for f in stale:
                temporaries += 1 if dry_run else _remove(links, shown, f, refused)
            return LinksPruned(tuple(verdicts), tuple(dict.fromkeys(refused)), temporaries, freed)
    finally:
        os.close(cache)


def compiler_cache_bound(binary: Path, data_dir: Path) -> int | None:
    """ccache's `max_size` for the cache in `data_dir`, in bytes (None: unbounded, or not known)."""
    from toolchain.core.proc.runner import run
    from toolchain.recipe.buildspec import parse_size

    done = run([str(binary), "--get-config", "max_size"], env={**os.environ, "CCACHE_DIR": str(data_dir)},
               capture=True, check=False, timeout=60)
    try:
        return parse_size(done.stdout.strip()) if done.returncode == 0 else None
    except ValueError:
        return None  # (0: ccache's "no limit")


def keep_within(cc: CompilerCache) -> LinksPruned | None:
    """Keep the link cache of `cc` within its compiler cache's bound (None: no link cache, or no bound)."""
    if cc.links_dir is None or cc.binary is None:
        return None
    bound = compiler_cache_bound(cc.binary, cc.data_dir)
    if bound is None:
        return None
    return prune_links(cc.links_dir, older_than=None, keep_size=bound, dry_run=False)


__all__ = ["STALE", "LinkFile", "LinksPruned", "compiler_cache_bound", "keep_within", "prune_links"]
