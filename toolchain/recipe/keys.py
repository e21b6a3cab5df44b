"""Each recipe key is declared once: on the model's field it fills, with the TOML type the check accepts.

    setvars_args: tuple[str, ...] = field(default=("--force",), metadata=key(list))

declares the key `setvars-args` (the field's name in kebab-case, or `key(list, "name")`), an array in TOML.
`recipe.validate` reads a table's allowed keys from its model class (`keys_of`); a key that fills no field
(`extends`, `extend-patches`, `drop`) is named where the table is read, as `extra`.
"""

from __future__ import annotations

from typing import Any

from toolchain.core.record import Field, fields, record

_KEY = "toolchain.recipe.key"


@record
class Key:
    """How a recipe writes one field: its key (`""`: the field's name in kebab-case) and its TOML type
    (`object`: any, checked where the value is read)."""
    type: type
    name: str = ""


def key(toml_type: type, name: str = "") -> dict[str, Any]:
    """`field(metadata=key(str))`: the field is filled from a recipe key of this TOML type."""
    return {_KEY: Key(toml_type, name)}


def keys_of(cls: type, **extra: type) -> dict[str, type]:
    """The keys a recipe table read into `cls` may hold, each with its TOML type, in field order; then
    `extra` (keyword names with `_` for `-`), the keys that fill no field of `cls`."""
    out: dict[str, type] = {}
    for f in fields(cls):
        name = key_of(f)
        if name is not None:
            out[name] = f.metadata[_KEY].type
    out.update({name.replace("_", "-"): t for name, t in extra.items()})
    return out


def key_of(f: Field) -> str | None:
    """The recipe key a field is filled from (None: a field no key fills)."""
    k = f.metadata.get(_KEY)
    return (k.name or f.name.replace("_", "-")) if isinstance(k, Key) else None


__all__ = ["Key", "key", "key_of", "keys_of"]
