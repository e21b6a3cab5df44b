"""TOML reading (tomllib) and writing (tomli-w) in one place, for the files the tool generates (locks,
pylock.toml, the recipe text a lock records). tomlkit, which keeps a hand-written file's comments and layout,
is only for editing recipes (recipe/update.py): it writes a lock 13x slower and takes 8x longer to import.
`dumps_remembered` keeps what it wrote, so a warm build loads no writer at all."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

TOMLDecodeError = tomllib.TOMLDecodeError


def loads(text: str) -> dict[str, Any]:
    """Parse TOML text into a dict."""
    return tomllib.loads(text)


def load_file(path: Path) -> dict[str, Any]:
    """Parse the UTF-8 TOML file at `path` into a dict."""
    return tomllib.loads(Path(path).read_text(encoding="utf-8"))


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
