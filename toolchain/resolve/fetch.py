"""Getting exactly the locked files: every dependency file is fetched once (pip download, hashes required,
no index) into `<lock dir>/wheels/deps/`, and installs name each file with its sha256 (`--require-hashes`),
so a file that differs from the lock, or a dependency the lock does not name, is an error, never a download."""

from __future__ import annotations

import errno
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

from toolchain.core.fs import atomic_write_text, sha256_file
from toolchain.core.proc import CommandFailed, run
from toolchain.errors import TestFailed, TransientError
from toolchain.resolve.closure import LockedDist
from toolchain.resolve.failure import classify, host_of, raise_classified

FETCH_TIMEOUT = 3600
FETCHING = "fetching the locked dependency files"


def hashed_requirements(entries: Iterable[tuple[str, str]]) -> str:
    """A pip requirements file of (file path or `name @ URL`, sha256) lines, every one with its hash."""
    return "".join(f"{where} --hash=sha256:{sha}\n" for where, sha in entries)


def fetch_dists(dists: Sequence[LockedDist], dest: Path, log: Path) -> dict[str, Path]:
    """{name: local file} of every locked dependency, downloaded into `dest` unless already there with the
    locked sha256. Raises TestFailed naming each file that is missing or differs from the lock, TransientError
    for a network failure or a full disk."""
    try:
        return _fetch(dists, dest, log)
    except OSError as exc:  # our own writes (the folder, the requirements file)
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise TransientError(f"{FETCHING} failed: no space left on device ({exc.filename or dest})",
                                 kind="disk-full", hint="free space there and run the same command again") from None
        raise


def _fetch(dists: Sequence[LockedDist], dest: Path, log: Path) -> dict[str, Path]:
    dest.mkdir(parents=True, exist_ok=True)
    want = [d for d in dists if not _have(dest / d.file, d.sha256)]
    if want:
        reqs = dest / ".fetch-requirements.txt"
        atomic_write_text(reqs, hashed_requirements((f"{d.name} @ {d.url}", d.sha256) for d in want))
        try:
            run([sys.executable, "-m", "pip", "download", "--no-input", "--progress-bar", "off", "--no-deps",
                 "--no-index", "--require-hashes", "--isolated", "-d", str(dest), "-r", str(reqs)], log=log,
                timeout=FETCH_TIMEOUT)
        except CommandFailed as exc:
            raise_classified(exc.tail, what=FETCHING, log=log, disk_fallback=str(dest), leave=("hash",))
            failure = classify(exc.tail)
            if failure is not None and failure.kind == "hash":
                named = [d for d in want if d.file in exc.tail or d.name in exc.tail.lower()] or want
                raise TestFailed(f"{FETCHING} failed: hash mismatch: "
                                 f"{', '.join(f'{d.file} from {host_of(d.url) or d.url}' for d in named)} has "
                                 f"another sha256 than the lock records",
                                 hint="the index changed or damaged the file since the lock was made: find out why "
                                      "(ask its owner); `toolchain lock --lock LOCK --refresh` pins what it serves "
                                      f"now (log: {log})") from None
            raise TestFailed(f"the locked dependency files could not be fetched with their sha256 checked:\n"
                             f"{exc.tail}", hint=f"a file differs from the lock or is gone from its index; "
                                                 f"`toolchain lock --lock LOCK --refresh` resolves again (log: {log})") from None
    problems = [f"{d.file}: {'missing' if not (dest / d.file).is_file() else 'sha256 ' + sha256_file(dest / d.file)}"
                f", the lock records {d.sha256}" for d in dists if not _have(dest / d.file, d.sha256)]
    if problems:
        raise TestFailed("dependency files do not match the lock:\n" + "\n".join(f"  - {p}" for p in problems),
                         hint="remove them and fetch again, or re-resolve with `toolchain lock --lock LOCK --refresh`")
    return {d.name: dest / d.file for d in dists}


def _have(path: Path, sha: str) -> bool:
    return path.is_file() and sha256_file(path) == sha
