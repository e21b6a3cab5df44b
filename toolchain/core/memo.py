"""Remembered answers of slow probes (the target interpreter, the sourced oneAPI environment), valid while
the files and directories they depend on are unchanged (compared by mtime, inode and size).

A warm no-op build must not pay for starting interpreters and sourcing setvars again; a `pip install` into
the target (the site-packages directory changes) or a new oneAPI version (its directory changes) makes the
next build probe again."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

from toolchain.core.fs import atomic_write_text, sha256_bytes
from toolchain.core.noop import stat_key

T = TypeVar("T")


def remembered(memo_dir: Path | None, kind: str, identity: dict[str, Any] | None,
               compute: Callable[[], tuple[T, Iterable[str] | None]]) -> T:
    """`compute()` returns (value, paths it depends on); the value must come back from JSON as it went in
    (str, int, bool, lists and str-keyed dicts of those), since a remembered one is read from JSON.
    Paths of None mean: use the value but do not remember it (e.g. it holds a secret)."""
    if memo_dir is None or identity is None:
        return compute()[0]
    key = sha256_bytes(json.dumps([kind, identity], sort_keys=True).encode())[:24]
    path = Path(memo_dir) / f"{kind}-{key}.json"
    try:
        saved = json.loads(path.read_text())
        if all(stat_key(p) == s for p, s in saved["watch"].items()):
            found: T = saved["value"]  # written by the branch below from a value of the same T
            return found
    except (OSError, ValueError, KeyError, TypeError):
        pass
    value, watch = compute()
    if watch is None:
        return value
    atomic_write_text(path, json.dumps({"value": value, "watch": {p: stat_key(p) for p in sorted(set(watch))}}))
    return value
