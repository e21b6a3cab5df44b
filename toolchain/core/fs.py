"""Atomic writes, file locks and hashing: caches survive kill -9 and concurrent runs."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import io
import os
import stat
import time
from collections.abc import Callable, Collection, Iterator
from pathlib import Path
from typing import BinaryIO, TextIO

from toolchain.errors import UsageError

try:  # the interpreter's own sha256 for short texts: a warm build hashes only those, and loads no OpenSSL
    from _sha256 import sha256 as _short_sha256  # type: ignore[import-not-found,unused-ignore]  # (3.11)
except ImportError:  # pragma: no cover  (Python 3.12 and later; hashlib's where neither is built)
    try:
        from _sha2 import sha256 as _short_sha256  # type: ignore[import-not-found,no-redef,unused-ignore]
    except ImportError:
        from hashlib import sha256 as _short_sha256  # type: ignore[assignment,no-redef,unused-ignore]


def sha256_bytes(data: bytes) -> str:
    """The hex sha256 of `data`."""
    digest: str = _short_sha256(data).hexdigest()
    return digest


class NotRegular(OSError):
    """A path that is not a regular file of its own (a FIFO, a device, a symbolic link) where one is read."""


@contextlib.contextmanager
def open_regular(path: Path) -> Iterator[tuple[io.BufferedReader, os.stat_result]]:
    """`path` opened for reading with its stat, when it is a regular file: opened without following a final
    symbolic link (ELOOP) and without blocking (a FIFO planted in a cache would hang a plain open), checked on
    the opened descriptor (NotRegular); core/trust.py adds who may have written it."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegular(f"{path} is not a regular file")
        fh = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with fh:
        yield fh, st


def mine(st: os.stat_result) -> bool:
    """A regular file with one name, owned by this user (or the one who ran sudo), that no one else may write:
    what the tool keeps of what it wrote in its output folder (a log, a wheel); anything else is replaced."""
    return (stat.S_ISREG(st.st_mode) and st.st_nlink == 1 and not st.st_mode & 0o022
            and st.st_uid in (os.geteuid(), invoking_user()[0]))


def open_append(path: Path) -> int:
    """A descriptor appending to `path`, a regular file of this user's with one name, made when absent: opened
    without following a final link and without blocking (a FIFO there would hang the writer), checked on the
    descriptor. A link, FIFO, device or another user's file there is removed and a new file made in its place:
    never written through. (The folder is the caller's to check: a log folder of the tool's own.)"""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    for _ in range(3):
        try:
            fd = os.open(path, flags, 0o644)
        except OSError as exc:
            if exc.errno not in (errno.ELOOP, errno.ENXIO):  # a link (ELOOP); a FIFO no one reads (ENXIO)
                raise
            os.unlink(path)  # (the entry itself: a link's target is never touched)
            continue
        if mine(os.fstat(fd)):
            os.set_blocking(fd, True)
            return fd
        os.close(fd)
        os.unlink(path)
    raise NotRegular(f"{path} is replaced by another process each time it is made: not written")


def open_log(path: Path, *, fresh: bool = False) -> TextIO:
    """A log to append text to (`fresh`: emptied first), its folder made when absent: `open_append`, so a link,
    FIFO or another user's file planted there is replaced, never written through nor waited on."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = open_append(path)
    if fresh:
        os.ftruncate(fd, 0)
    return open(fd, "a", encoding="utf-8", errors="replace")


def read_regular(path: Path) -> bytes:
    """The bytes of `path`, a regular file (`open_regular`). What is read from the cache is read by
    core/trust.py's `read_trusted`, which also asks who may have written it."""
    with open_regular(path) as (fh, _):
        return fh.read()


def sha256_file(path: Path) -> str:
    """The hex sha256 of the file at `path`, read in 1 MiB blocks (one block: as `sha256_bytes`)."""
    with open(path, "rb") as f:
        first = f.read(1 << 20)
        block = f.read(1 << 20)
        if not block:
            return sha256_bytes(first)
        import hashlib  # (OpenSSL's, for a larger file)

        h = hashlib.sha256(first)
        while block:
            h.update(block)
            block = f.read(1 << 20)
    return h.hexdigest()


@contextlib.contextmanager
def _replacing(path: Path, mode: int = 0o644) -> Iterator[str]:
    """A temporary path beside `path`, renamed over it when the block succeeds (with `mode`: the temporary
    file is private, 0600, while it is written), removed when it fails."""
    import tempfile  # (not on a warm no-op's way: it writes nothing)

    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        yield tmp
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def atomic_write_bytes(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Write to a temporary file in the same directory, fsync, then rename over `path`."""
    with _replacing(path, mode) as tmp, open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def write_if_changed(path: Path, data: bytes, mode: int = 0o644) -> bool:
    """`atomic_write_bytes` unless `path` holds `data` already (compared by size first); True when written.
    A run that changes nothing writes nothing: its output folder's stats stay as they were."""
    try:
        if os.lstat(path).st_size == len(data) and read_regular(path) == data:
            return False
    except OSError:
        pass
    atomic_write_bytes(path, data, mode)
    return True


def atomic_write_text(path: Path, text: str, mode: int = 0o644) -> None:
    """Write `text` as UTF-8 to `path` atomically (a temporary file, then a rename)."""
    atomic_write_bytes(path, text.encode("utf-8"), mode)


def atomic_copy(src: Path, dst: Path, mode: int = 0o644) -> None:
    """Copy `src` to `dst` through a temporary file; `dst` gets `mode` (a wheel, a lock: readable by all)."""
    import shutil

    with _replacing(dst, mode) as tmp:
        shutil.copyfile(src, tmp)


class DigestMismatch(Exception):
    """A copy's content did not hash as expected (nothing was written)."""

    def __init__(self, path: Path, actual: str, expected: str) -> None:
        super().__init__(f"{path}: sha256 {actual}, expected {expected}")
        self.path, self.actual, self.expected = path, actual, expected


def atomic_copy_verified(src: Path | BinaryIO, dst: Path, sha256: str) -> None:
    """Copy `src` (a path, or a file opened for reading) to `dst` (temp then rename), hashing the bytes as they
    stream: when they do not hash to `sha256`, `dst` is left as it was and DigestMismatch is raised. One read
    of `src`, no second pass."""
    import hashlib

    h = hashlib.sha256()
    with _replacing(dst) as tmp:
        with contextlib.ExitStack() as stack:
            fin = stack.enter_context(open(src, "rb")) if isinstance(src, (str, os.PathLike)) else src
            fout = stack.enter_context(open(tmp, "wb"))
            for block in iter(lambda: fin.read(1 << 20), b""):
                h.update(block)
                fout.write(block)
        if h.hexdigest() != sha256:
            raise DigestMismatch(Path(str(getattr(src, "name", src))), h.hexdigest(), sha256)


def publish_dir(tmp_dir: Path, final: Path) -> bool:
    """Move a fully written directory into place. Returns False when another writer won the race
    (its entry is kept, ours is removed): entries are immutable once published."""
    final.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.rename(tmp_dir, final)
        return True
    except OSError:
        if final.is_dir():
            import shutil

            shutil.rmtree(tmp_dir, ignore_errors=True)
            return False
        raise


def check_dir(path: Path, what: str, *, writable: bool = True) -> None:
    """`path` is, or can be made as, a directory (this process can write, when `writable`): else a usage
    error (exit 2) naming `what` (a flag, or what the directory is for)."""
    for p in (path, *path.parents):
        if not p.exists():
            continue
        if not p.is_dir():
            raise UsageError(f"{what} {path}: {p} is a file, not a directory", hint=f"pass a directory as {what}")
        if writable and not os.access(p, os.W_OK | os.X_OK):
            why = "read-only file system" if _read_only(p) else "permission denied"
            raise UsageError(f"{what} {path}: cannot write {p} ({why})",
                             hint="pass a directory on a file system you can write to")
        return


def _read_only(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


class LockWait(OSError):
    """A wait for a lock that ends without it: its holder is another user (`foreign`: at once) or it held it
    past the bound. `holders`: (pid, uid) of each process that holds it, as /proc/locks names them."""

    def __init__(self, path: Path, holders: list[tuple[int, int]], *, foreign: bool, waited: float) -> None:
        who = ", ".join(f"pid {pid} (uid {uid})" for pid, uid in holders) or "a process this one cannot name"
        super().__init__(f"{path} is held by {who}" + ("" if foreign else f" for more than {waited:g}s"))
        self.path, self.holders, self.foreign, self.waited = path, holders, foreign, waited


def lock_holders(fd: int) -> list[tuple[int, int]]:
    """The (pid, uid) of the processes holding a flock on the file open as `fd` (read from /proc/locks, which
    names each lock's pid and device:inode; uid -1 when the pid's owner cannot be read)."""
    st = os.fstat(fd)
    want = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    found = []
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    for line in lines:
        parts = line.split()
        if len(parts) >= 6 and parts[1] == "FLOCK" and parts[5] == want and parts[4].lstrip("-").isdigit():
            pid = int(parts[4])
            try:
                uid = os.stat(f"/proc/{pid}").st_uid
            except OSError:
                uid = -1
            found.append((pid, uid))
    return found


def _same_file(fd: int, path: Path) -> bool:
    try:
        a, b = os.fstat(fd), os.stat(path, follow_symlinks=False)
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


@contextlib.contextmanager
def file_lock(path: Path, *, shared: bool = False, on_wait: Callable[[], None] | None = None,
              timeout: float | None = None, owners: Collection[int] | None = None) -> Iterator[None]:
    """An advisory lock (flock) that the kernel releases when the holder dies, even by kill -9; `on_wait` is
    called (to say so) when another holder makes this one wait. `timeout`: the wait ends after it (LockWait);
    `owners`: a holder whose uid is not among them ends the wait at once (LockWait naming its pid and uid: a
    user who can only read the file could otherwise hold it forever); None: this user, the one who ran sudo,
    root and the members of the cache's declared shared group (`lock_owner`). A lock file removed while this
    one waited (its holder cleaned up) is opened again: the lock is always the file at `path`."""
    mode = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
    while True:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        try:
            _acquire(fd, path, mode, on_wait, timeout, owners)
        except BaseException:
            os.close(fd)
            raise
        if _same_file(fd, path):
            break
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
        on_wait = None  # (said once)
    try:
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def lock_owner(uid: int) -> bool:
    """Whether a lock of the tool's held by `uid` is waited for (`file_lock`'s default): this user's, the sudo
    caller's, root's, or a member's of the cache's declared shared group (core/trust.py); uid -1 (a holder
    whose owner cannot be read: it has just ended) too."""
    if uid in (-1, 0, os.geteuid(), invoking_user()[0]):
        return True
    from toolchain.core import group

    gid = group.shared_group()
    return gid is not None and group.member(uid, gid)


def _acquire(fd: int, path: Path, mode: int, on_wait: Callable[[], None] | None, timeout: float | None,
             owners: Collection[int] | None) -> None:
    try:
        fcntl.flock(fd, mode | fcntl.LOCK_NB)
        return
    except BlockingIOError:
        pass
    if on_wait is not None:
        on_wait()
    started = time.monotonic()
    delay = 0.05
    while True:
        holders = lock_holders(fd)
        foreign = [h for h in holders if (h[1] not in owners if owners is not None else not lock_owner(h[1]))]
        if foreign:
            raise LockWait(path, foreign, foreign=True, waited=time.monotonic() - started)
        if timeout is not None and time.monotonic() - started >= timeout:
            raise LockWait(path, holders, foreign=False, waited=timeout)
        time.sleep(delay)
        delay = min(delay * 2, 1.0)
        try:
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            continue


def lock_held(path: Path) -> bool:
    """Whether a holder of `file_lock(path)` holds it now, asked without writing anything (a lock file that is
    not there was never taken: no one holds it)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


def invoking_user() -> tuple[int, int]:
    """Who should own what the tool writes: the sudo caller when run via sudo, else this process's user."""
    if os.geteuid() == 0 and os.environ.get("SUDO_UID", "").isdigit():
        uid = int(os.environ["SUDO_UID"])
        gid = os.environ.get("SUDO_GID", "")
        return uid, int(gid) if gid.isdigit() else uid
    return os.getuid(), os.getgid()


def give_to_invoking_user(root: Path) -> None:
    """Under sudo, hand a written tree (wheels, locks, logs) to the user who ran sudo."""
    uid, gid = invoking_user()
    if os.geteuid() != 0 or uid == 0:
        return
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            os.lchown(os.path.join(dirpath, name), uid, gid)
    os.lchown(root, uid, gid)
