"""The one serializer of the frozen dataclasses that go to JSON and TOML (locks, bisect state, reports).

`to_data(obj)` gives plain data: a dataclass becomes a table of its fields (`kebab=True`: `field_name` is
written `field-name`, as TOML files here spell keys), tuples and lists become lists, a Path its string, a
mapping a table; `from_data(cls, data)` is the way back for a dataclass whose fields are plain values, tuples,
Paths or such dataclasses (an unknown key is an error naming it). Hand-written `to_dict`s remain where a
report shows something other than the fields (a property, a shortened path)."""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar, Union

T = TypeVar("T")
Data = Union[None, bool, int, float, str, list["Data"], dict[str, "Data"]]


def to_data(obj: object, *, kebab: bool = False) -> Data:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {_key(f.name, kebab): to_data(getattr(obj, f.name), kebab=kebab) for f in dataclasses.fields(obj)}
    if isinstance(obj, (tuple, list)):
        return [to_data(x, kebab=kebab) for x in obj]
    if isinstance(obj, Mapping):
        return {str(k): to_data(v, kebab=kebab) for k, v in obj.items()}
    if isinstance(obj, Path):
        return str(obj)
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    raise TypeError(f"cannot serialize {type(obj).__name__}: {obj!r}")


def to_table(obj: object, *, kebab: bool = False) -> dict[str, Data]:
    """`to_data` of a dataclass: its table."""
    data = to_data(obj, kebab=kebab)
    if not isinstance(data, dict):
        raise TypeError(f"{type(obj).__name__} is not a dataclass")
    return data


def from_data(cls: type[T], data: Mapping[str, Any], *, kebab: bool = False) -> T:
    """`cls(**data)`, lists as tuples, strings as Paths and tables as dataclasses where the field says so."""
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls.__name__} is not a dataclass")
    hints = typing.get_type_hints(cls)
    fields = {_key(f.name, kebab): f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise TypeError(f"unknown key(s) for {cls.__name__}: {', '.join(unknown)}")
    return cls(**{fields[k]: _value(hints[fields[k]], v, kebab) for k, v in data.items()})


def _value(hint: object, value: Any, kebab: bool) -> Any:
    union = typing.get_origin(hint) in (Union, types.UnionType)
    kinds = [a for a in typing.get_args(hint) if a is not type(None)] if union else [hint]
    for kind in kinds:
        if isinstance(value, Mapping) and isinstance(kind, type) and dataclasses.is_dataclass(kind):
            return from_data(kind, value, kebab=kebab)
        if isinstance(value, str) and kind is Path:
            return Path(value)
        if isinstance(value, list) and typing.get_origin(kind) is tuple:
            item = typing.get_args(kind)[0] if typing.get_args(kind) else object
            return tuple(_value(item, v, kebab) for v in value)
    return tuple(value) if isinstance(value, list) else value


def _key(name: str, kebab: bool) -> str:
    return name.replace("_", "-") if kebab else name
