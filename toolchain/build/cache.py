"""The content-addressed wheel cache, under one cache directory.

Wheel entries (`wheels/<k[:2]>/<key>/`) are written into a temporary directory and renamed into place, so
an entry is whole or absent; a builder holds the key's flock while building, so two builders of one key
build it once, and the kernel drops the lock of a builder killed with SIGKILL. An entry is served only when
its wheel hashes as its entry.json records (checked while it is copied out); anything damaged (a flipped
byte, a truncated wheel, entry.json missing, garbage or with another sha256) is evicted and rebuilt.
Recorded metadata (entry.json) is redacted like a lock.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from toolchain.build.entry import EntryMeta, entry_json, entry_problem, read_entry
from toolchain.core.checks import DIST_FILE, SHA256, SIZE
from toolchain.core.fs import (
    DigestMismatch,
    atomic_copy_verified,
    atomic_write_text,
    file_lock,
    mine,
    open_regular,
    publish_dir,
    sha256_file,
)
from toolchain.core.probe_memo import file_sha256
from toolchain.core.record import field, record, replace
from toolchain.core.serial import meta
from toolchain.core.trust import Untrusted, open_trusted, read_kept, sealed, unseal
from toolchain.errors import BuildError

WHEELS_DIR = "wheels"  # under an out dir: the built wheels, as the lock names them


@record
class WheelRef:
    """A wheel as a lock names it: file name, sha256 and size."""

    file: str = field(metadata=meta(check=DIST_FILE))  # (a lock asks more of it: a wheel's name)
    sha256: str = field(metadata=meta(check=SHA256))
    size: int = field(metadata=meta(check=SIZE))


@record
class CacheEntry:
    """A wheel cache entry: its wheel, digest, size and recorded metadata."""

    key: str
    wheel: Path
    sha256: str
    size: int
    meta: EntryMeta


Warn = Callable[[str], None]


def _no_warning(message: str) -> None:
    pass


class WheelCache:
    """`get` is a cheap structural check (entry.json readable and well-formed, the wheel there with the
    recorded size); the content is checked against the recorded sha256 as it is copied out (`take`).
    A damaged entry of any kind is evicted with a warning that names it: a miss, never a wedge."""

    def __init__(self, root: Path, warn: Warn = _no_warning) -> None:
        self.root = Path(root) / "wheels"
        self.memo = Path(root) / "memo"  # the out wheels' digests, by stat (core/probe_memo.py)
        self.warn = warn

    def _dir(self, key: str) -> Path:
        return self.root / key[:2] / key

    def get(self, key: str) -> CacheEntry | None:
        """The cached wheel for `key`, None when absent; a damaged entry is dropped (with a warning) as a miss."""
        d = self._dir(key)
        meta_file = d / "entry.json"
        if not d.is_dir():
            return None
        problem, meta = read_meta(meta_file)
        if problem == UNTRUSTED:  # another user could have written it: a miss, rebuilt and replaced (`put`)
            return None
        if meta is None:
            self._drop(key, problem)
            return None
        wheel = d / meta.wheel
        try:
            size = wheel.stat().st_size
        except OSError:
            self._drop(key, f"its wheel {meta.wheel} is missing")
            return None
        if size != meta.size:
            self._drop(key, f"its wheel {meta.wheel} has {size} bytes, entry.json records {meta.size}")
            return None
        return CacheEntry(key, wheel, meta.sha256, meta.size, meta)

    def copy_out(self, entry: CacheEntry, dest_dir: Path) -> CacheEntry | None:
        """`entry`, which this process just stored (`put`: its sha256 computed here), with its wheel copied into
        `dest_dir` checked against that sha256 on the way; also from a cache whose folders the trust rule refuses
        (the digest is this process's own, not read from the cache). None when it is gone or differs."""
        try:
            with open_regular(entry.wheel) as (source, _):
                atomic_copy_verified(source, dest_dir / entry.wheel.name, entry.sha256)
        except (OSError, DigestMismatch):
            return None
        return entry

    def take(self, key: str, dest_dir: Path) -> CacheEntry | None:
        """The entry of `key` with its wheel in `dest_dir`, checked against the recorded sha256 on the way
        (a wheel already there that hashes as recorded is kept); None when there is none or it was damaged."""
        entry = self.get(key)
        if entry is None:
            return None
        dest = dest_dir / entry.wheel.name
        try:
            st = os.lstat(dest)
        except FileNotFoundError:
            st = None
        if st is not None and not mine(st) and stat.S_ISREG(st.st_mode):  # another user's, or one others may write
            self.warn(f"{dest} is not a file of yours that only you may write (uid {st.st_uid}, mode "
                      f"{stat.S_IMODE(st.st_mode):o}): replaced from the cache")
        elif st is not None and stat.S_ISREG(st.st_mode) and st.st_size == entry.size:
            if file_sha256(self.memo, dest) == entry.sha256:  # (one stat while the wheel's stat_key stays)
                return entry
            self.warn(f"{dest} does not hash as its cache entry records ({entry.sha256}): replaced from the cache")
        try:
            with open_trusted(entry.wheel) as source:  # (a FIFO, a link or another user's file: a miss)
                atomic_copy_verified(source, dest, entry.sha256)
        except Untrusted:
            return None
        except DigestMismatch as exc:
            self._drop(key, f"its wheel {entry.wheel.name} has sha256 {exc.actual}, entry.json records "
                            f"{entry.sha256}")
            return None
        except FileNotFoundError:  # evicted by another builder meanwhile
            return None
        except OSError as exc:  # writing into dest_dir (the out dir): a full disk, a read-only mount
            raise BuildError(f"cannot write {dest}: {exc.strerror or exc}",
                             hint=f"free space there, or pass another --out than {dest_dir.parent}") from None
        return entry

    def _drop(self, key: str, problem: str) -> None:
        self.warn(f"wheel cache entry {self._dir(key)} is damaged ({problem}); evicted, it will be rebuilt")
        self.evict(key)

    def evict(self, key: str, folder: Path | None = None) -> bool:
        """Remove the entry of `key` (renamed out of the way, then deleted); False, with a warning, when the
        way to it leaves the cache through a symbolic link (nothing out of the cache is deleted). `folder`: where
        the entry was found, when that is not where its key puts it (a fan-out folder it does not belong in)."""
        d = folder if folder is not None and folder.parent.parent == self.root else self._dir(key)
        link = symlink_on_the_way(self.root.parent, d)
        if link is not None:
            self.warn(f"wheel cache entry {d} is not evicted: {link} is a symbolic link (nothing is deleted "
                      "through a link out of the cache)")
            return False
        trash = d.with_name(f".tmp-evict-{key}-{os.urandom(16).hex()}")
        try:
            os.rename(d, trash)
        except FileNotFoundError:
            return True  # already gone (another process evicted or replaced it)
        shutil.rmtree(trash, ignore_errors=True)
        return True

    @contextlib.contextmanager
    def building(self, key: str) -> Iterator[None]:
        """Held while a key is built; leftovers of builders that died holding it are removed."""
        with file_lock(self.root / "locks" / f"{key}.lock"):
            parent = self._dir(key).parent
            if parent.is_dir() and symlink_on_the_way(self.root.parent, parent) is None:
                for stale in [*parent.glob(f".tmp-{key}-*"), *parent.glob(f".tmp-evict-{key}-*")]:
                    shutil.rmtree(stale, ignore_errors=True)
            yield

    def put(self, key: str, wheel: Path, meta: EntryMeta, log: Path | None = None) -> CacheEntry:
        """Store a built wheel (called holding `building(key)`). An existing entry of the key is replaced:
        what was just built wins over what was stored before (`--no-cache` repairs an entry)."""
        final = self._dir(key)
        tmp = final.with_name(f".tmp-{key}-{os.urandom(16).hex()}")
        try:
            tmp.mkdir(parents=True)
            shutil.copyfile(wheel, tmp / wheel.name)
            if log is not None and log.is_file():
                shutil.copyfile(log, tmp / "build.log")
            for written in tmp.iterdir():  # 0644 whatever the umask (002 makes them group-writable: core/trust.py
                os.chmod(written, 0o644)   # would refuse the entry at the next build, rebuilt every time)
            sha, size = sha256_file(tmp / wheel.name), (tmp / wheel.name).stat().st_size
            meta = replace(meta, wheel=wheel.name, sha256=sha, size=size, stored=time.time())
            data = json.loads(entry_json(meta))
            meta = read_entry(data)  # what a later `get` reads back: secrets masked
            atomic_write_text(tmp / "entry.json", sealed(key, data, indent=2))  # (its key and checksum in it)
            if (final.exists() or final.is_symlink()) and not self.evict(key):
                shutil.rmtree(tmp, ignore_errors=True)
                raise BuildError(f"cannot replace the wheel cache entry {final}: the way to it is a symbolic "
                                 "link out of the cache", hint="remove the link, or pass another --cache-dir")
            published = publish_dir(tmp, final)
        except OSError as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            raise BuildError(f"cannot store {wheel.name} in the wheel cache {self.root}: "
                             f"{exc.strerror or exc}",
                             hint="free space there, or pass another --cache-dir (or set $TOOLCHAIN_CACHE_DIR)"
                             ) from None
        if not published:  # another writer of the key won (it did not hold the key's lock)
            raise BuildError(f"the wheel cache entry {final} was written by another process while this one "
                             "held its lock", hint="run the build again")
        return CacheEntry(key, final / wheel.name, sha, size, meta)


def symlink_on_the_way(root: Path, path: Path) -> Path | None:
    """The first symbolic link from `root` (excluded: a cache folder may itself be a link) down to `path`
    (included), or None: what the cache deletes is reached by real folders only."""
    try:
        rel = path.relative_to(root)
    except ValueError:
        return path
    here = root
    for part in rel.parts:
        here = here / part
        if here.is_symlink():
            return here
    return None


def shared_folder_warnings(cache_dir: Path) -> list[str]:
    """One warning (or none) naming the cache folder when it, a folder above it, or a folder in it is one
    another user could write (core/trust.py's rule for folders, walked as ssh's StrictModes walks a path: owned
    by another user, or writable by others and not a sticky folder of this user's or root's, unless the cache
    is declared shared with that group; a link of another user's on the way) or is a symbolic link: one lstat
    each. Nothing under such a folder is read (`core.trust.open_trusted` walks the same way). A run's cache whose
    root or a folder directly in it fails is untrusted as a whole (`core.trust.cache_root`): `cache_dir` is then the private
    folder standing in for it, and the warning names the cache, why, that folder, and the fix. Nothing is deleted
    through a link."""
    from toolchain.core import trust

    stand_in = trust.stands_in_for(cache_dir)
    if stand_in is not None:  # (decided at the run's first look: `core.trust.cache_root`)
        whole = ("nothing in it is read, run or written this run (not its git mirrors, source trees, compiler "
                 "cache, work folder, wheel entries nor records): this run uses a private, empty cache instead, "
                 f"{cache_dir} (yours alone, removed at exit: sources are fetched and wheels built again)")
        return [_untrusted_warning(Path(stand_in[0]), [_short(stand_in[0], stand_in[1])], whole)]
    kept = trust.first_look(cache_dir)  # (what `core.trust.cache_root` just found, else a fresh look)
    found: list[str] = []
    root = os.path.abspath(cache_dir)
    try:
        root_why = trust.folder_problem(root)
        children = kept if kept is not None else trust.cache_children(cache_dir)
    except OSError:
        return []
    if root_why:
        found.append(_short(root, root_why))
    for name, st in children:
        if stat.S_ISLNK(st.st_mode):
            with contextlib.suppress(OSError):
                found.append(f"{name} is a symbolic link (to {os.readlink(cache_dir / name)}): written through, "
                             "nothing deleted there")
        elif stat.S_ISDIR(st.st_mode) and (why := trust.problem(st, folder=True)):
            found.append(f"{name} is {why}")
    if not found:
        return []
    what = "nothing in it is read this run" if root_why else "nothing in such a folder is read"
    return [_untrusted_warning(cache_dir, found, f"{what} (wheel entries, native and closure records, remembered "
                                                 "probes and file copies are rebuilt or probed again instead, and "
                                                 "replaced)")]


def _short(root: str, why: str) -> str:
    return why.replace(f"{root} is ", "it is ", 1) if why.startswith(f"{root} is ") else why


def _untrusted_warning(cache_dir: Path, found: list[str], whole: str) -> str:
    """The one warning of a cache folder another user could write (`found`: why), `whole`: what is done instead."""
    from toolchain.core.group import SHARED_GROUP_ENV

    return (f"cache folder {cache_dir}: {'; '.join(found)}. Another user could plant, rename or swap files "
            f"there: {whole}. Fix: make it and the folders above it yours alone "
            f"(chmod -R go-w {cache_dir}; chown -R $USER), or declare it shared with one group ([cache] "
            f"shared-group = or ${SHARED_GROUP_ENV}); a cache a team shares is an OCI registry ([cache] "
            "remote), whose entries are verified by digest")


UNTRUSTED = "entry.json is not trusted (core/trust.py)"


def read_meta(meta_file: Path) -> tuple[str, EntryMeta | None]:
    """entry.json, or why it cannot be used: it must be sealed (core/trust.py `sealed`) under its entry's key,
    the folder's name, with its content unchanged. Checked as the cache's files are each time it is read; what
    it holds is read once a run while it stays the same file (`read_kept`: an entry is looked up, then taken)."""
    try:
        return read_kept(meta_file, _meta)
    except FileNotFoundError:
        return "entry.json is missing", None
    except Untrusted:
        return UNTRUSTED, None
    except OSError as exc:
        return f"entry.json is unreadable: {exc}", None


def _meta(meta_file: Path, raw: bytes) -> tuple[str, EntryMeta | None]:
    """What `read_meta` makes of the bytes of `meta_file`."""
    data = unseal(raw, meta_file.parent.name)
    if data is None:  # (why not: read as JSON only on this way)
        try:
            doc = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            return f"entry.json is unreadable: {exc}", None
        if not isinstance(doc, dict):
            return "entry.json is not an object", None
        problem = entry_problem(doc)
        return (f"entry.json {problem}" if problem else
                "entry.json is not this key's record as stored (moved from another entry, edited, or written by "
                "a version that did not record its key and checksum)"), None
    problem = entry_problem(data)
    if problem:
        return f"entry.json {problem}", None
    return "", read_entry(data)
