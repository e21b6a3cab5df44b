"""TOML reading (tomllib) and writing (tomli-w) in one place, for the files the tool generates (locks,
pylock.toml, the recipe text a lock records). tomlkit, which keeps a hand-written file's comments and layout,
is only for editing recipes (recipe/update.py): it writes a lock 13x slower and takes 8x longer to import.
`dumps_remembered` keeps what it wrote, so a warm build loads no writer at all; and within
`parses_remembered(memo_dir)` (a build), `loads` keeps what it parsed, keyed by the text's sha256, so a warm
build imports no reader either (tomllib and what it imports, datetime and its patterns, cost more than the
parsing: together about a third of a bare interpreter start)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tomllib import TOMLDecodeError
else:
    def __getattr__(name: str) -> Any:  # `TOMLDecodeError`, imported when an `except` clause asks for it
        if name == "TOMLDecodeError":
            import tomllib

            return tomllib.TOMLDecodeError
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = ["TOMLDecodeError", "dumps", "dumps_remembered", "load_file", "loads", "parses_remembered"]

_PARSES: list[tuple[Path, dict[str, str]]] = []  # the innermost `parses_remembered` block's memo folder and
# what it parsed, to be remembered when the block ends (none: parse each time)


@contextlib.contextmanager
def parses_remembered(memo_dir: Path) -> Iterator[None]:
    """Within the block, `loads` takes what is remembered under `memo_dir` (core/probe_memo: a file of this
    user's that no one else can write, under its own key, unedited), keyed by the sha256 of the text: the same
    text reads back the same data without parsing it. What it parsed is remembered when the block ends without
    an exception (a bad recipe leaves no cache behind); data that JSON would not give back as it was (a date, a
    time, a float that is not finite) or that holds a secret never is."""
    parsed: dict[str, str] = {}
    _PARSES.append((Path(memo_dir), parsed))
    try:
        yield
    finally:
        _PARSES.pop()
    for digest, data in parsed.items():
        _remembered(memo_dir, digest, data)


def loads(text: str) -> dict[str, Any]:
    """Parse TOML text into a dict (remembered within `parses_remembered`)."""
    if not _PARSES:
        return _parse(text)
    import json

    from toolchain.core.fs import sha256_bytes

    memo_dir, parsed = _PARSES[-1]
    digest = sha256_bytes(text.encode())
    saved = _remembered(memo_dir, digest, None)
    if saved:
        found: dict[str, Any] = json.loads(saved)
        return found
    data = _parse(text)
    if _json_exact(data):
        from toolchain.core.redact import holds_secret

        if not holds_secret(data):
            parsed[digest] = json.dumps(data)  # (key order kept: a JSON string inside the memo)
    return data


def _remembered(memo_dir: Path, digest: str, data: str | None) -> str:
    """The JSON text remembered for the TOML text of sha256 `digest` ("": none); `data`: remember it."""
    from toolchain.core.probe_memo import remembered

    def compute() -> tuple[str, list[str] | None]:
        return data or "", None if data is None else []

    return remembered(memo_dir, "toml-parsed", {"text": digest}, compute)


def _parse(text: str) -> dict[str, Any]:
    import tomllib

    return tomllib.loads(text)


def _json_exact(value: object) -> bool:
    """Whether JSON gives `value` back as it is: str, int, bool, finite floats, lists and str-keyed dicts."""
    if isinstance(value, dict):
        return all(isinstance(k, str) and _json_exact(v) for k, v in value.items())
    if isinstance(value, list):
        return all(_json_exact(v) for v in value)
    if isinstance(value, float):
        import math

        return math.isfinite(value)
    return isinstance(value, (str, int, bool))


def load_file(path: Path) -> dict[str, Any]:
    """Parse the UTF-8 TOML file at `path` into a dict."""
    return loads(Path(path).read_text(encoding="utf-8"))


def dumps(data: dict[str, Any]) -> str:
    """Write `data` as TOML, leaving out None values (which TOML cannot hold)."""
    import tomli_w  # only writers pay for it

    return tomli_w.dumps(_drop_none(data))


def dumps_remembered(data: dict[str, Any], memo_dir: Path) -> str:
    """`dumps(data)`, remembered under `memo_dir` while the writer (tomli-w, this module) is the same file.
    Keyed by `repr(data)`: it tells 1 from 1.0 and True, keeps key order, and names dates by type. Data
    holding a secret (a credentialed URL, a secret-named value) is written each time, never remembered."""
    import importlib.util

    from toolchain.core.fs import sha256_bytes
    from toolchain.core.probe_memo import remembered
    from toolchain.core.redact import holds_secret

    if holds_secret(data):  # text holding a secret is never written to the cache
        return dumps(data)

    spec = importlib.util.find_spec("tomli_w")
    writer = [spec.origin, __file__] if spec and spec.origin else None

    def compute() -> tuple[str, list[str] | None]:
        return dumps(data), writer

    return remembered(memo_dir, "toml", {"data": sha256_bytes(repr(data).encode())}, compute)


def _drop_none(value: Any) -> Any:
    """TOML has no null: keys whose value is None are left out."""
    if isinstance(value, dict):
        return {k: _drop_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, (list, tuple)):
        return [_drop_none(v) for v in value]
    return value
