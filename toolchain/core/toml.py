"""TOML reading (tomllib / tomli) and writing (tomlkit) in one place."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

TOMLDecodeError = tomllib.TOMLDecodeError


def loads(text: str) -> dict[str, Any]:
    return tomllib.loads(text)


def load_file(path: Path) -> dict[str, Any]:
    return tomllib.loads(Path(path).read_text(encoding="utf-8"))


def dumps(data: dict[str, Any]) -> str:
    import tomlkit  # only writers pay for it

    return tomlkit.dumps(_drop_none(data))


def _drop_none(value: Any) -> Any:
    """TOML has no null: keys whose value is None are left out."""
    if isinstance(value, dict):
        return {k: _drop_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, (list, tuple)):
        return [_drop_none(v) for v in value]
    return value
