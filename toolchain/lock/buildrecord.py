"""The build record beside a lock (`build-record.toml`): what the lock's build measured and where this
machine keeps things (timings, memory, when it resolved, absolute paths), which no digest, bundle or image
holds; written with the lock, read back only when it is that lock's own and core/trust's rule allows."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from toolchain.core import toml as tomlio
from toolchain.core.fs import atomic_write_text, sha256_bytes
from toolchain.core.record import replace
from toolchain.core.serial import merged, to_table

if TYPE_CHECKING:
    from toolchain.resolve.closure import Closure


class Recorded(Protocol):
    """What the build record is made from and laid over: a lock (a record with its closure; no import of
    `toolchain.lock`, which imports this module)."""

    @property
    def closure(self) -> Closure | None: ...


_L = TypeVar("_L", bound=Recorded)

RECORD_NAME = "build-record.toml"  # beside the lock: what its build measured and where this machine keeps things


RECORD_HEADER = ("# What the build of stack.lock.toml measured and where this machine keeps things (timings, memory,\n"
                 "# when it resolved, absolute paths). Not part of the lock: no digest, bundle or image holds it.\n")


def record_dict(lock: Recorded, lock_sha256: str) -> dict[str, Any]:
    """The build record of `lock` (whose text has `lock_sha256`): its fields declared `record` or `portable`,
    as they are, in the lock's own tables (`[resolve]` for the closure's)."""
    out: dict[str, Any] = {"lock-sha256": lock_sha256, **to_table(lock, kebab=True, part="record")}
    if lock.closure is not None and (resolve := to_table(lock.closure, kebab=True, part="record")):
        out["resolve"] = resolve
    return out


_IGNORED_RECORDS: dict[str, str] = {}  # a build record not read back -> the warning (record_warnings), this run


def read_record(lock_path: Path, lock_text_bytes: bytes) -> dict[str, Any]:
    """The build record beside a lock, when it is that lock's (its `lock-sha256` is the lock text's): {} when
    there is none, or it is another lock's or unreadable (a lock copied or unpacked elsewhere has none). Read
    only as `record_bytes` allows (a file of yours alone: else one warning, `record_warnings`)."""
    raw = record_bytes(lock_path)
    if raw is None:
        return {}
    try:
        data = tomlio.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomlio.TOMLDecodeError):
        return {}
    return data if data.get("lock-sha256") == sha256_bytes(lock_text_bytes) else {}


def record_bytes(lock_path: Path) -> bytes | None:
    """The bytes of the build record beside a lock; None when there is none, or it is not read. It names this
    machine's paths a rebuild uses (the recipe files, setvars), so it is read only when core/trust's rule for a
    file of the out folder allows (`problem(invoker=True)`: a regular file of yours, root's or sudo's caller's
    that no one else may write), opened without following a final link and without blocking (a FIFO), checked
    on the descriptor; anything else is ignored, with one warning naming it and the fix (`record_warnings`)."""
    import errno

    from toolchain.core.fs import NotRegular, open_regular
    from toolchain.core.trust import problem

    path, raw = lock_path.parent / RECORD_NAME, b""
    try:
        with open_regular(path) as (fh, st):
            why = problem(st, shared=False, invoker=True)
            if not why:
                raw = fh.read()
    except FileNotFoundError:
        return None
    except NotRegular:
        why = "not a regular file"
    except OSError as exc:
        why = "a symbolic link" if exc.errno == errno.ELOOP else f"not readable ({exc.strerror or exc})"
    if why:
        _IGNORED_RECORDS.setdefault(str(path), (
            f"{path} is not read (it is {why}): the lock's timings and this machine's paths (recipe files, "
            f"setvars) are left out; remove it (`rm {path}`) and build again to write your own, and keep "
            f"{path.parent} writable by you alone (chmod go-w)"))
        return None
    return raw


def add_to_record(lock_path: Path, key: str, table: dict[str, Any]) -> None:
    """Put `table` under `key` in the build record beside the lock, when that record is the lock's own
    (atomically; `with_record` reads back only the lock's fields, so a table of another kind stays the record's:
    e.g. the image `build --image` made, with its base under the name given)."""
    record = read_record(lock_path, lock_path.read_bytes())
    if record:
        atomic_write_text(lock_path.parent / RECORD_NAME, RECORD_HEADER + tomlio.dumps({**record, key: table}))


def record_warnings() -> list[str]:
    """The warnings of build records `read_record` ignored since the last call (each path once a run)."""
    found = [w for w in _IGNORED_RECORDS.values() if w]
    _IGNORED_RECORDS.update(dict.fromkeys(_IGNORED_RECORDS, ""))  # (said: not again this run)
    return found


def with_record(lock: _L, record: dict[str, Any]) -> _L:
    """`lock` with what its build record says put back (the lock's own values where it says nothing)."""
    if not record:
        return lock
    out = merged(lock, {k: v for k, v in record.items() if k not in ("lock-sha256", "resolve")}, kebab=True)
    if out.closure is not None and isinstance(record.get("resolve"), dict):
        out = replace(out, closure=merged(out.closure, record["resolve"], kebab=True))
    return out
