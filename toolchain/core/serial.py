"""The one serializer of the frozen dataclasses that go to JSON and TOML (locks, bisect state, reports).

`to_data(obj)` gives plain data: a dataclass becomes a table of its fields in field order (`kebab=True`:
`field_name` is written `field-name`, as TOML files here spell keys), tuples and lists become lists, a Path its
string, an Enum its value, a mapping a table; `from_data(cls, data)` is the way back for a dataclass whose
fields are plain values, Enums, tuples, Paths, mappings or such dataclasses (an unknown key is an error naming
it; a missing key takes the field's `absent`, else its default).

A field says how it differs from that with `field(..., metadata=meta(...))`: its key (`key="file"`), left out
when it holds its default (`omit_default=True`) or always (`skip=True`: not part of the format), and converters
each way (`dump=`, `load=`: a rounded float, a redacted URL). A format kept in two files (a lock and the build
record beside it) says per field which one holds it: `record=True` (what one run measured: only in the record),
`portable=` (where this machine keeps a thing: the record holds the value, the lock `portable(value, obj)`); `to_table(
obj, part="lock")` and `part="record"` write each file's part, `merged(obj, record_table)` puts the record's back. A format checked before it is read (the lock)
declares there too what a value must be (`check=(what, test)`) and what a missing key reads as (`absent=`):
`schema(cls)` gives the table of checks, and a field is required when it has neither a default nor `absent`.
A key with a dot (`key="recipe.name"`) puts the value in that sub-table. So a format's writer, reader and
schema come from one declaration; what is left by hand (the bisect state's verdict table, a report with
computed entries, the lock's `[resolve]`) uses these for its parts."""

from __future__ import annotations

import builtins
import enum
import sys
import types
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar, Union

from toolchain.core.record import MISSING, fields, is_dataclass, replace

T = TypeVar("T")
Check = tuple[str, Callable[[Any], bool]]  # (what a value must be, the test)
Data = Union[None, bool, int, float, str, list["Data"], dict[str, "Data"]]
_META = "toolchain.serial"


class Meta:
    """How one field is written and read (see the module's docstring). A plain class, not a dataclass: this
    module is imported on the warm path, where a dataclass definition costs a millisecond."""
    __slots__ = ("absent", "check", "dump", "key", "load", "omit_default", "portable", "record", "skip")

    def __init__(self, key: str = "", omit_default: bool = False, skip: bool = False,
                 dump: Callable[[Any], Data] | None = None, load: Callable[[Any], Any] | None = None,
                 check: Check | None = None, absent: object = MISSING, record: bool = False,
                 portable: Callable[[Any, Any], Any] | None = None) -> None:
        self.key, self.omit_default, self.skip, self.dump, self.load = key, omit_default, skip, dump, load
        self.check, self.absent, self.record, self.portable = check, absent, record, portable


def meta(*, key: str = "", omit_default: bool = False, skip: bool = False,
         dump: Callable[[Any], Data] | None = None, load: Callable[[Any], Any] | None = None,
         check: Check | None = None, absent: object = MISSING, record: bool = False,
         portable: Callable[[Any, Any], Any] | None = None) -> dict[str, Meta]:
    """`field(metadata=meta(...))` (core/record's `field`, or `dataclasses.field`)."""
    return {_META: Meta(key, omit_default, skip, dump, load, check, absent, record, portable)}


def rounded(digits: int) -> Callable[[Any], Data]:
    """A `dump` that rounds a float to `digits` (seconds and rates in reports and state files)."""
    return lambda value: round(float(value), digits)


def empty_as_null(value: str) -> Data:
    """A `dump` that writes an empty string as null (a report's "none")."""
    return value or None


class _Field:
    __slots__ = ("default", "key", "meta", "name")

    def __init__(self, name: str, key: str, meta: Meta, default: object) -> None:
        self.name, self.key, self.meta = name, key, meta
        self.default = default  # MISSING when the field has none


def _fields(cls: type, kebab: bool) -> tuple[_Field, ...]:
    cached = _FIELDS.get((cls, kebab))
    if cached is None:
        out = []
        for f in fields(cls):
            m = f.metadata.get(_META, _PLAIN)
            default = f.default_factory() if f.default_factory is not MISSING else f.default
            out.append(_Field(f.name, m.key or _key(f.name, kebab), m, default))
        cached = _FIELDS[(cls, kebab)] = tuple(out)
    return cached


_PLAIN = Meta()
_PLAIN_TYPES = frozenset((str, int, float, bool))
_FIELDS: dict[tuple[type, bool], tuple[_Field, ...]] = {}
_HINTS: dict[type, dict[str, Any]] = {}


def to_data(obj: object, *, kebab: bool = False, part: str = "") -> Data:
    """Any value as plain JSON/TOML data: dataclasses as tables, sequences as lists, mappings with string keys
    (`part`: "lock" or "record", the part of a format kept in two files; "" all of it)."""
    if type(obj) in _PLAIN_TYPES or obj is None:  # (most values: asked first; an Enum of str is not a str here)
        return obj  # type: ignore[return-value]  # (one of Data's plain types, by the test above)
    if is_dataclass(obj) and not isinstance(obj, type):
        return to_table(obj, kebab=kebab, part=part)
    if isinstance(obj, (tuple, list)):
        return [to_data(x, kebab=kebab, part=part) for x in obj]
    if isinstance(obj, Mapping):
        return {str(k): to_data(v, kebab=kebab) for k, v in obj.items()}
    if isinstance(obj, enum.Enum):
        return to_data(obj.value, kebab=kebab)
    if isinstance(obj, Path):
        return str(obj)
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    raise TypeError(f"cannot serialize {type(obj).__name__}: {obj!r}")


def to_table(obj: object, *, kebab: bool = False, part: str = "") -> dict[str, Data]:
    """`to_data` of a dataclass: its table (`part="lock"`: without its `record` fields, its `portable` ones as
    `portable` makes them; `part="record"`: only those, each as it is, and the tables holding them)."""
    if not is_dataclass(obj) or isinstance(obj, type):
        raise TypeError(f"{type(obj).__name__} is not a dataclass")
    if part == "record":
        return _record_table(obj, kebab)
    out: dict[str, Data] = {}
    for f in _fields(type(obj), kebab):
        if f.meta.skip or (part == "lock" and f.meta.record):
            continue
        value = getattr(obj, f.name)
        if part == "lock" and f.meta.portable is not None:
            value = f.meta.portable(value, obj)
        if f.meta.omit_default and value == f.default:
            continue
        data = f.meta.dump(value) if f.meta.dump is not None else to_data(value, kebab=kebab, part=part)
        table, key = out, f.key
        if "." in key:
            parent, key = key.split(".", 1)
            sub = table.setdefault(parent, {})
            if not isinstance(sub, dict):
                raise TypeError(f"{type(obj).__name__}: {parent} is both a value and a table")
            table = sub
        table[key] = data
    return out


def _record_table(obj: object, kebab: bool) -> dict[str, Data]:
    """The record's part of `obj` (`to_table(part="record")`): its `record` and `portable` fields as they are;
    a table or an array of tables holding such fields, with only those (an array's tables keep their order,
    and their `name` where they have one, for a reader)."""
    out: dict[str, Data] = {}
    for f in _fields(type(obj), kebab):
        if f.meta.skip:
            continue
        value = getattr(obj, f.name)
        data: Data = None
        if f.meta.record or f.meta.portable is not None:
            if value == f.default or (f.meta.portable is not None and f.meta.portable(value, obj) == value):
                continue  # (nothing measured; the lock holds it as it is)
            data = f.meta.dump(value) if f.meta.dump is not None else to_data(value, kebab=kebab)
        elif is_dataclass(value) and not isinstance(value, type):
            data = _record_table(value, kebab) or None
        elif isinstance(value, tuple) and value and all(is_dataclass(v) for v in value):
            subs = [_record_table(v, kebab) for v in value]
            if any(subs):
                data = [{**({"name": v.name} if isinstance(getattr(v, "name", None), str) else {}), **s}
                        for v, s in zip(value, subs, strict=True)]
        if data is None:
            continue
        parent, _, key = f.key.rpartition(".")
        sub = out.setdefault(parent, {}) if parent else out
        assert isinstance(sub, dict)
        sub[key] = data
    return out


def merged(obj: T, table: Mapping[str, Any], *, kebab: bool = False) -> T:
    """`obj` with the record's part (`to_table(obj, part="record")` read back) put back into its fields."""
    if not table:
        return obj
    hints = _hints(type(obj))
    changes: dict[str, Any] = {}
    for f in _fields(type(obj), kebab):
        parent, _, key = f.key.rpartition(".")
        where = table.get(parent, {}) if parent else table
        if f.meta.skip or not isinstance(where, Mapping) or key not in where:
            continue
        value, data = getattr(obj, f.name), where[key]
        if f.meta.record or f.meta.portable is not None:
            changes[f.name] = f.meta.load(data) if f.meta.load is not None else _value(hints[f.name], data, kebab)
        elif is_dataclass(value) and isinstance(data, Mapping):
            changes[f.name] = merged(value, data, kebab=kebab)
        elif isinstance(value, tuple) and isinstance(data, list) and len(data) == len(value):
            changes[f.name] = tuple(merged(v, d, kebab=kebab) if isinstance(d, Mapping) else v
                                    for v, d in zip(value, data, strict=True))
    return replace(obj, **changes) if changes else obj


def schema(cls: type, *, kebab: bool = False) -> dict[str, tuple[bool, Check]]:
    """key: (required, check) of each field of `cls` that declares a `check` (dotted keys as declared)."""
    return {f.key: (f.default is MISSING and f.meta.absent is MISSING, f.meta.check)
            for f in _fields(cls, kebab) if f.meta.check is not None and not f.meta.skip}


def from_data(cls: type[T], data: Mapping[str, Any], *, kebab: bool = False,
              given: Mapping[str, object] | None = None, unknown_ok: bool = False) -> T:
    """`cls(**data)` with keys as its fields name them, lists as tuples, strings as Paths and Enums, tables as
    dataclasses and mappings where the field says so; a key the class does not have is an error naming it
    (`unknown_ok`: left unread); a missing key takes the field's `absent`, else its default.
    `given`: field values by field name, as they are (those the format keeps apart from this table)."""
    if not is_dataclass(cls):
        raise TypeError(f"{cls.__name__} is not a dataclass")
    fields, parents, absent = _reading(cls, kebab)
    if parents:  # a dotted key's value is in its sub-table
        flat: dict[str, Any] = {}
        for key, value in data.items():
            if key in parents and isinstance(value, Mapping):
                flat.update((f"{key}.{k}", v) for k, v in value.items())
            else:
                flat[key] = value
        data = flat
    unknown = sorted(set(data) - set(fields))
    if unknown and unknown_ok:
        data = {k: v for k, v in data.items() if k in fields}
    elif unknown:
        raise TypeError(f"unknown key(s) for {cls.__name__}: {', '.join(unknown)}")
    hints = _hints(cls)
    kwargs: dict[str, Any] = dict(given or {})
    for key, f in absent:
        if key not in data and f.name not in kwargs:
            import copy  # (only where a key is absent)

            kwargs[f.name] = copy.copy(f.meta.absent)
    for key, value in data.items():
        f = fields[key]
        kwargs[f.name] = f.meta.load(value) if f.meta.load is not None else _value(hints[f.name], value, kebab)
    return cls(**kwargs)


def _reading(cls: type, kebab: bool) -> tuple[dict[str, _Field], frozenset[str], tuple[tuple[str, _Field], ...]]:
    """(the fields read, by key; the sub-tables dotted keys name; the fields with an `absent`), once a class."""
    cached = _READING.get((cls, kebab))
    if cached is None:
        fields = {f.key: f for f in _fields(cls, kebab) if not f.meta.skip}
        parents = frozenset(k.split(".", 1)[0] for k in fields if "." in k)
        absent = tuple((k, f) for k, f in fields.items() if f.meta.absent is not MISSING)
        cached = _READING[(cls, kebab)] = (fields, parents, absent)
    return cached


_READING: dict[tuple[type, bool], tuple[dict[str, _Field], frozenset[str], tuple[tuple[str, _Field], ...]]] = {}


def _hints(cls: type) -> dict[str, Any]:
    """The class's field types, evaluated (its annotations are strings: `from __future__ import annotations`);
    a type imported for type checking only is `object` (its field reads with `load=`)."""
    hints = _HINTS.get(cls)
    if hints is None:
        own = vars(cls).get("__annotations__", {})
        if any("__annotations__" in vars(base) for base in cls.__mro__[1:-1]):  # (inherited fields: typing's walk)
            unknown: dict[str, Any] = {}
            while hints is None:
                try:
                    hints = typing.get_type_hints(cls, localns=unknown)
                except NameError as exc:
                    if not exc.name or exc.name in unknown:
                        raise
                    unknown[exc.name] = object
        else:
            module = vars(sys.modules[cls.__module__])
            hints = {name: _evaluated(a, module) if isinstance(a, str) else a for name, a in own.items()}
        _HINTS[cls] = hints
    return hints


_EVALUATED: dict[tuple[str, int], Any] = {}  # (an annotation's text, its module's namespace) -> the type


def _evaluated(text: str, module: dict[str, Any]) -> Any:
    """An annotation's text as a type, in its module's namespace: a plain name looked up (most fields: `str`,
    `int`, a record), anything else evaluated once per module and text (as typing.get_type_hints does, without
    compiling every field's text anew); a name the module lacks is `object`."""
    if text.isidentifier():
        found = module.get(text, _NOT_THERE)
        return found if found is not _NOT_THERE else getattr(builtins, text, object)
    key = (text, id(module))
    if key in _EVALUATED:
        return _EVALUATED[key]
    if text.startswith("tuple[") and text.endswith(", ...]") and text[6:-6].isidentifier():  # most of the rest,
        _EVALUATED[key] = types.GenericAlias(tuple, (_evaluated(text[6:-6], module), ...))  # as eval makes it
        return _EVALUATED[key]
    unknown: dict[str, Any] = {}
    while True:
        try:
            value = eval(text, module, unknown)  # (the package's own annotation text)
            break
        except NameError as exc:
            if not exc.name or exc.name in unknown:
                raise
            unknown[exc.name] = object
    _EVALUATED[key] = value
    return value


_NOT_THERE = object()


def _value(hint: object, value: Any, kebab: bool) -> Any:
    for kind, origin, args, record_kind, mapping, enum_kind in _shape(hint):
        if isinstance(value, Mapping):
            if record_kind:
                return from_data(kind, value, kebab=kebab)
            if mapping:
                item = args[1] if len(args) == 2 else object
                return {k: _value(item, v, kebab) for k, v in value.items()}
        if isinstance(value, str) and kind is Path:
            return Path(value)
        if enum_kind and not isinstance(value, kind):
            return kind(value)
        if isinstance(value, int) and not isinstance(value, bool) and kind is float:
            return float(value)
        if isinstance(value, list) and origin is tuple:
            if (len(args) == 2 and args[1] is Ellipsis) or len(args) == 1:
                return tuple(_value(args[0], v, kebab) for v in value)
            if args and len(args) == len(value):
                return tuple(_value(a, v, kebab) for a, v in zip(args, value, strict=True))
            return tuple(value)
    return tuple(value) if isinstance(value, list) else value


_Shape = tuple[tuple[Any, Any, tuple[Any, ...], bool, bool, bool], ...]
_SHAPES: dict[object, _Shape] = {}


def _shape(hint: object) -> _Shape:
    """What `_value` asks of a type hint, once a hint: for each kind it admits (a union's members but None),
    (the kind, its origin, its arguments, whether a dataclass, a mapping, an Enum)."""
    try:
        return _SHAPES[hint]
    except KeyError:
        pass
    except TypeError:  # (an unhashable hint: worked out each time)
        return _shape_of(hint)
    found = _SHAPES[hint] = _shape_of(hint)
    return found


def _shape_of(hint: object) -> _Shape:
    union = typing.get_origin(hint) in (Union, types.UnionType)
    kinds = [a for a in typing.get_args(hint) if a is not type(None)] if union else [hint]
    out = []
    for kind in kinds:
        origin = typing.get_origin(kind)
        out.append((kind, origin, typing.get_args(kind), isinstance(kind, type) and is_dataclass(kind),
                    origin is not None and isinstance(origin, type) and issubclass(origin, Mapping),
                    isinstance(kind, type) and issubclass(kind, enum.Enum)))
    return tuple(out)


def _key(name: str, kebab: bool) -> str:
    return name.replace("_", "-") if kebab else name
