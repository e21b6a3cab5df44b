"""A wheel cache entry's `entry.json`, declared once: `EntryMeta`'s fields are its keys (kebab-case, as the lock
writes the same tables), how each is written and read back, and what a usable entry holds there (`check`).

Entries written before this declaration spelled the top-level keys in snake_case (`build_seconds`,
`built_against`, `compiler_cache`, `jobs_source`); they are read as the same keys, and checked the same way.
"""

from __future__ import annotations

import json
import math
from typing import Any

from toolchain.build.built_against import BuiltAgainst
from toolchain.build.ccache import CacheReport
from toolchain.build.metrics import BuildMetrics
from toolchain.core.checks import SHA256, SIZE, STR, STRS
from toolchain.core.record import MISSING, field, fields, record
from toolchain.core.redact import redact_data
from toolchain.core.serial import Check, from_data, meta, schema, to_table

_NUMBER: Check = ("a finite non-negative number", lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)
                  and math.isfinite(v) and v >= 0)
_WHEEL: Check = ("a wheel file name", lambda v: isinstance(v, str) and v.endswith(".whl") and "/" not in v
                 and v not in (".", ".."))


def _reads_as(cls: type) -> Check:
    """A table (or null: none) that reads back into `cls`, each value of its field's kind: a string, or a
    finite non-negative number (an int where the field holds one)."""
    def ok(value: object) -> bool:
        if value is None:
            return True
        if not isinstance(value, dict):
            return False
        try:
            read: object = from_data(cls, value, kebab=True, unknown_ok=True)
        except (TypeError, ValueError):
            return False
        for f in fields(cls):
            got, default = getattr(read, f.name), f.default
            kind = type(default) if default is not MISSING else str
            if kind is str and not isinstance(got, str):
                return False
            if kind in (int, float) and not (_NUMBER[1](got) and (kind is float or isinstance(got, int))):
                return False
        return True
    return (f"a {cls.__name__} table", ok)


def _each_reads_as(cls: type) -> Check:
    return (f"an array of {cls.__name__} tables",
            lambda v: isinstance(v, list) and all(v_ is not None and _reads_as(cls)[1](v_) for v_ in v))


def _table(cls: type) -> Any:
    return lambda value: from_data(cls, value or {}, kebab=True, unknown_ok=True)


@record
class EntryMeta:
    """What a wheel cache entry records beside its wheel (`entry.json`). `put` fills the first four."""

    wheel: str = field(default="", metadata=meta(check=_WHEEL))
    sha256: str = field(default="", metadata=meta(check=SHA256))
    size: int = field(default=0, metadata=meta(check=SIZE))
    stored: float = field(default=0.0, metadata=meta(check=_NUMBER))  # time.time() when it was stored
    component: str = field(default="", metadata=meta(check=STR))
    commit: str = field(default="", metadata=meta(check=STR))
    describe: str = field(default="", metadata=meta(check=STR))
    version: str = field(default="", metadata=meta(check=STR))
    build_seconds: float = field(default=0.0, metadata=meta(check=_NUMBER))
    normalizations: tuple[str, ...] = field(default=(), metadata=meta(check=STRS))
    env: dict[str, str | None] = field(default_factory=dict)  # the build env, secrets masked
    command: tuple[str, ...] = ()
    built_against: tuple[BuiltAgainst, ...] = field(default=(), metadata=meta(check=_each_reads_as(BuiltAgainst)))
    # the build requirements the source declared: a build served from the entry checks them again (issue 39)
    build_requires: tuple[str, ...] = field(default=(), metadata=meta(omit_default=True, check=STRS))
    compiler_cache: CacheReport = field(default=CacheReport(), metadata=meta(check=_reads_as(CacheReport),
                                                                             load=_table(CacheReport)))
    metrics: BuildMetrics = field(default=BuildMetrics(), metadata=meta(check=_reads_as(BuildMetrics),
                                                                        load=_table(BuildMetrics)))
    jobs: int = field(default=0, metadata=meta(check=SIZE))
    jobs_source: str = field(default="", metadata=meta(check=STR))
    # a prebuilt wheel's pin (build/prebuilt_wheels.PrebuiltFile's table)
    prebuilt: dict[str, Any] = field(default_factory=dict, metadata=meta(omit_default=True, load=dict))
    # an entry downloaded from a remote cache: its url, manifest digest and when (build/remotecache.py)
    remote: dict[str, Any] = field(default_factory=dict, metadata=meta(
        omit_default=True, check=("a table", lambda v: v is None or isinstance(v, dict)), load=lambda v: dict(v or {})))


ENTRY_SCHEMA = schema(EntryMeta, kebab=True)
WHOLE = ("wheel", "sha256", "size")  # what an entry needs to be one (the rest reads back with its default)


def _spelled(data: dict[str, Any]) -> list[tuple[str, Any]]:
    """(key as declared, value) of each key, old snake_case spellings included."""
    return [(k.replace("_", "-"), v) for k, v in data.items()]


def entry_problem(data: dict[str, Any], *, whole: bool = True) -> str:
    """Why `entry.json`'s data cannot be used ("" when it can): without a valid wheel, sha256 and size (`whole`),
    or with an optional field of the wrong type (a `build-seconds` of "fast" would fail every build it serves)."""
    given = _spelled(data)
    if whole:
        missing = [k for k in WHOLE if not any(key == k and ENTRY_SCHEMA[k][1][1](v) for key, v in given)]
        if missing:
            return f"has no valid {', '.join(missing)}"
    bad = sorted({key for key, v in given if key in ENTRY_SCHEMA and key not in WHOLE and not ENTRY_SCHEMA[key][1][1](v)})
    return f"has a malformed {', '.join(bad)}" if bad else ""


def read_entry(data: dict[str, Any]) -> EntryMeta:
    """`entry.json`'s data (`entry_problem` found none) as an `EntryMeta`; keys it does not declare stay unread."""
    return from_data(EntryMeta, dict(_spelled(data)), kebab=True, unknown_ok=True)


def entry_json(entry: EntryMeta) -> str:
    """`entry.json`'s text: the declared keys, secrets masked."""
    return json.dumps(redact_data(to_table(entry, kebab=True)), indent=2, sort_keys=True)


__all__ = ["ENTRY_SCHEMA", "EntryMeta", "entry_json", "entry_problem", "read_entry"]
