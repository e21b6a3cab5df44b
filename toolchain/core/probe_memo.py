"""Remembered answers of slow probes (the target interpreter, the sourced oneAPI environment, the host's
runtimes, ...). Like ccache's direct mode or ninja's depfiles, the probe itself reports every input it
consulted (a file read, a folder listed, a path found absent), and the memo records that list with one
`stat_key` each (device, inode, size, mtime and ctime in ns, mode); a lookup re-checks all of them, and a
change to any of them runs the probe again. What is not a file (the environment variables that shape the
answer) is part of the memo's identity. The ctime is what a program cannot set back: a file rewritten in place
with its size and mtime restored (`touch -d`, `os.utime`, disk rot repaired by a copy) has a new one.

A warm no-op build must not pay for starting interpreters and sourcing setvars again; what the probe read
changed (a `pip install`, a .pth or METADATA edited, a file setvars sources rewritten) makes the next build
probe again."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from toolchain.core.fs import atomic_write_text, sha256_bytes, sha256_file
from toolchain.core.trust import RACY_NS, read_sealed, sealed

T = TypeVar("T")


def stat_key(path: str | os.PathLike[str]) -> list[int] | None:
    """What tells a path's change apart, from one `stat` (following a symbolic link): device, inode, size,
    mtime_ns, ctime_ns, mode; None when it is absent (its creation is a change too)."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_mode]


Inputs = Iterable[str] | Mapping[str, list[int] | None]



def remembered(memo_dir: Path | None, kind: str, identity: dict[str, Any] | None,
               compute: Callable[[], tuple[T, Inputs | None]], *, racy: bool = False) -> T:
    """`compute()` returns (value, every path it read the value from: its inputs, or a mapping of each to its
    `stat_key` taken before it was read: a file that changed while it was read is then a change at the next
    lookup, as git distrusts a racily clean entry; the others are stat'ed when compute returns); the value must come back
    from JSON as it went in (str, int, bool, lists and str-keyed dicts of those), since a remembered one is
    read from JSON. Inputs of None mean: use the value but do not remember it (e.g. it holds a secret). A
    remembered value is taken only from a file of this user's that no one else can write (`_read`), and only
    while every input it records has the stat_key it had when the value was computed.

    With `racy` (a probe that cannot stat its inputs before it reads them: a shell sourcing setvars), an input
    whose ctime is at or after the moment `compute` started (less RACY_NS) may have changed after it was read,
    as git distrusts a racily clean entry: the value is used but not remembered, and the next run probes again."""
    if memo_dir is None or identity is None:
        return compute()[0]
    path = _path(memo_dir, kind, identity)
    saved = _read(path)
    try:
        if saved is not None and all(stat_key(p) == s for p, s in saved["inputs"].items()):
            found: T = saved["value"]  # written by the branch below from a value of the same T
            return found
    except (KeyError, TypeError, AttributeError):
        pass
    started = time.time_ns()
    value, inputs = compute()
    if inputs is None:
        return value
    before = inputs if isinstance(inputs, Mapping) else {}
    recorded = {p: before[p] if p in before else stat_key(p) for p in sorted(set(inputs))}
    if racy and any(s is not None and s[4] >= started - RACY_NS for s in recorded.values()):
        return value  # (changed while the probe ran, or just before: not known to be what it read)
    atomic_write_text(path, sealed(path.stem, {"value": value, "inputs": recorded}, indent=None))
    return value


def forget(memo_dir: Path, kind: str, identity: dict[str, Any]) -> None:
    """Drop what is remembered of `kind` for `identity` (the next lookup computes it)."""
    _path(memo_dir, kind, identity).unlink(missing_ok=True)


def _path(memo_dir: Path, kind: str, identity: dict[str, Any]) -> Path:
    key = sha256_bytes(json.dumps([kind, identity], sort_keys=True).encode())[:24]
    return Path(memo_dir) / f"{kind}-{key}.json"


def file_sha256(memo_dir: Path | None, path: Path) -> str:
    """The sha256 of a file, remembered under `memo_dir` while its stat_key stays (a rewritten file has a new
    ctime, whatever its size and mtime say): one stat instead of reading a wheel of hundreds of MB."""
    name = os.path.abspath(path)

    def compute() -> tuple[str, list[str] | None]:
        before = stat_key(name)
        digest = sha256_file(Path(name))
        return digest, [name] if stat_key(name) == before else None  # (changed while read: not remembered)

    return remembered(memo_dir, "sha256", {"path": name}, compute)


def _read(path: Path) -> dict[str, Any] | None:
    """A memo file the cache's trust rule trusts (core/trust.py `read_sealed`: in folders no one else can write,
    filed under its own key, its checksum unchanged): anything else could have been planted, renamed over
    another's or edited, and is computed again (and replaced) instead of trusted."""
    saved = read_sealed(path, path.stem)
    return saved if saved is not None and isinstance(saved.get("inputs"), dict) else None
