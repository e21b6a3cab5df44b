"""The problems one recipe validation collects (`_Problems`): each names the recipe file and the key, and all
are raised at once as one `RecipeError`; the table-reading helpers every part of the validation shares."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from toolchain.core.names import did_you_mean
from toolchain.core.redact import is_secret
from toolchain.core.regex import ASCII_LETTERS, DIGITS, Chars

ENV_NAME = Chars(ASCII_LETTERS + DIGITS + "_", first=ASCII_LETTERS + "_")  # ^[A-Za-z_][A-Za-z0-9_]*\Z


class _Problems:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.items: list[str] = []
        self.missing = 0  # of `items`: recorded files found nowhere (MissingFiles)

    def add(self, key: str, message: str, *, file: Path | None = None) -> None:
        """A problem with `key`, named against the recipe file that declared it (`file`, default: this)."""
        self.items.append(f"{(file or self.path).name}: {key}: {message}")

    def check_keys(self, table: dict[str, Any], allowed: Mapping[str, type], prefix: str, *,
                   file: Path | None = None) -> None:
        for key, value in table.items():
            where = f"{prefix}{key}"
            if key not in allowed:
                self.add(where, "unknown key" + did_you_mean(key, list(allowed)) + " (remove it or fix the name)",
                         file=file)
                continue
            want = allowed[key]
            ok = isinstance(value, want) and not (want is int and isinstance(value, bool))
            if not ok:
                self.add(where, f"must be {_type_name(want)}, got {_type_name(type(value))} {value!r}", file=file)

    def str_list(self, table: dict[str, Any], key: str, where: str) -> tuple[str, ...]:
        value = table.get(key, [])
        if not isinstance(value, list):
            return ()
        bad = [v for v in value if not isinstance(v, str)]
        if bad:
            self.add(where, f"must be a list of strings; quote {bad[0]!r}")
            return ()
        return tuple(value)

    def env_table(self, table: Any, where: str, *, secrets: bool = False) -> tuple[tuple[str, str], ...]:
        """`secrets`: a secret's name is allowed (a lock's table, whose values were redacted when written)."""
        if not isinstance(table, dict):
            return ()
        out = []
        for k, v in table.items():
            if not ENV_NAME.match(k):
                self.add(f"{where}.{k}", "not a valid environment variable name")
            elif not isinstance(v, str):
                self.add(f"{where}.{k}", f"environment values are strings; write {k} = \"{v}\"")
            elif is_secret(k) and not secrets:
                self.add(f"{where}.{k}", "looks like a secret; recipes are committed and recorded in locks — "
                                         "export it in your environment instead")
            else:
                out.append((k, v))
        return tuple(out)


def _str(table: dict[str, Any], key: str, default: str = "") -> str:
    """table[key] when it is a string (a wrong type is reported by check_keys), else `default`."""
    value = table.get(key, default)
    return value if isinstance(value, str) else default


def _type_name(t: type) -> str:
    return {str: "a string", list: "an array", dict: "a table", int: "an integer", bool: "true or false",
            float: "a number"}.get(t, t.__name__)
