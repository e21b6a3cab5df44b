"""`@record`: a frozen dataclass made without `dataclasses`, whose `__eq__`, `__hash__`, `__repr__` and
`__init__` are shared functions.

`dataclasses.dataclass` writes the source of every method of every class and compiles it (`exec`) when the
class is made, and importing it imports `inspect` (and with it `ast`, `dis`, `tokenize`): a warm build
imports some sixty records, and making them so was about a fifth of its run. A record reads its fields from
the class's annotations itself (a field's default, or `field(...)` from this module or from `dataclasses`) and
its `__init__` is one function for every record, following a plan made once per class: positional fields in
order, then `kw_only` ones by name, defaults and `default_factory`, `init=False` fields set to their default,
then `__post_init__`; the same `TypeError`s as a dataclass's `__init__` for a missing, repeated or unknown
argument.

It is a dataclass all the same: `dataclasses.fields`, `replace`, `asdict` and `is_dataclass` see one (the
class's `__dataclass_fields__`, made by `dataclasses` itself the first time anyone asks, so only code that
imported `dataclasses` pays for it); `fields` and `replace` here are the same without that import. The rest
behaves exactly as a frozen dataclass's: fields compared and hashed as a tuple (those with `compare=False` left
out; `hash=` as dataclasses read it), the repr `Name(field=value, ...)` of the fields with `repr=True`, another
class never equal, and any assignment or deletion after `__init__` set each field once is
`dataclasses.FrozenInstanceError` (mypy sees a frozen dataclass: `dataclass_transform(frozen_default=True)`).
Not supported (refused when the class is made): a record inheriting fields from a dataclass or a record,
`InitVar` and `KW_ONLY` annotations."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any, TypeVar, dataclass_transform, overload

T = TypeVar("T")


class _Missing:
    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()  # a field without a default (or factory): what `dataclasses.MISSING` is to dataclasses


class Field:
    """One field of a record, as `dataclasses.Field` describes one (the same attribute names; `MISSING` is
    this module's)."""

    __slots__ = ("compare", "default", "default_factory", "hash", "init", "kw_only", "metadata", "name", "repr",
                 "type")

    def __init__(self, default: Any = MISSING, default_factory: Any = MISSING, init: bool = True,
                 repr: bool = True, hash: bool | None = None, compare: bool = True,
                 metadata: Mapping[str, Any] | None = None, kw_only: Any = MISSING) -> None:
        if default is not MISSING and default_factory is not MISSING:
            raise ValueError("cannot specify both default and default_factory")
        self.name = ""
        self.type: Any = ""  # (the annotation: a string under `from __future__ import annotations`)
        self.default, self.default_factory, self.init, self.repr = default, default_factory, init, repr
        self.hash, self.compare, self.kw_only = hash, compare, kw_only
        self.metadata: Mapping[str, Any] = metadata if metadata is not None else {}

    def __repr__(self) -> str:
        return f"Field(name={self.name!r}, default={self.default!r}, kw_only={self.kw_only!r})"


def field(*, default: Any = MISSING, default_factory: Callable[[], Any] | Any = MISSING, init: bool = True,
          repr: bool = True, hash: bool | None = None, compare: bool = True,
          metadata: Mapping[str, Any] | None = None, kw_only: bool | Any = MISSING) -> Any:
    """A field of a record with more than a default: `dataclasses.field`'s arguments and meaning."""
    return Field(default, default_factory, init, repr, hash, compare, metadata, kw_only)


class _Plan:
    """What a record's shared methods follow (the class's `__record__`, made once by `_make`): its fields, the
    positional ones, each field's (name, default, default_factory, init), and the names compared, hashed and
    shown."""

    __slots__ = ("compare", "fields", "hash", "init", "positional", "post_init", "repr", "specs")

    def __init__(self, specs: tuple[Field, ...], positional: tuple[str, ...], post_init: bool) -> None:
        self.specs, self.positional, self.post_init = specs, positional, post_init
        self.fields = frozenset(f.name for f in specs)
        self.init = tuple((f.name, f.default, f.default_factory, f.init) for f in specs)
        self.compare = tuple(f.name for f in specs if f.compare)
        self.hash = tuple(f.name for f in specs if (f.compare if f.hash is None else f.hash))
        self.repr = tuple(f.name for f in specs if f.repr)


def _eq(self: Any, other: Any) -> Any:  # (bool, or NotImplemented for another class, as dataclasses answer)
    if other.__class__ is not self.__class__:
        return NotImplemented
    names = self.__record__.compare
    return tuple(getattr(self, n) for n in names) == tuple(getattr(other, n) for n in names)


def _hash(self: Any) -> int:
    return hash(tuple(getattr(self, n) for n in self.__record__.hash))


def _repr(self: Any) -> str:
    shown = ", ".join(f"{n}={getattr(self, n)!r}" for n in self.__record__.repr)
    return f"{self.__class__.__qualname__}({shown})"


def _frozen(message: str) -> Exception:
    from dataclasses import FrozenInstanceError  # (only on the way to an error)

    return FrozenInstanceError(message)


def _setattr(self: Any, name: str, value: object) -> None:
    if name in self.__dict__ or name not in self.__record__.fields:  # (__init__ sets each field once)
        raise _frozen(f"cannot assign to field {name!r}")
    object.__setattr__(self, name, value)


def _delattr(self: Any, name: str) -> None:
    raise _frozen(f"cannot delete field {name!r}")


def _init(self: Any, *args: Any, **kwargs: Any) -> None:
    cls = self.__class__
    plan: _Plan = cls.__record__
    positional = plan.positional
    if len(args) > len(positional):
        raise TypeError(f"{cls.__qualname__}.__init__() takes {len(positional) + 1} positional arguments but "
                        f"{len(args) + 1} were given")
    for name, value in zip(positional, args, strict=False):  # (fewer arguments than fields: the rest by name)
        if name in kwargs:
            raise TypeError(f"{cls.__qualname__}.__init__() got multiple values for argument {name!r}")
        kwargs[name] = value
    given = self.__dict__
    missing = []
    for name, default, factory, init in plan.init:
        value = kwargs.pop(name, MISSING) if init else MISSING
        if value is MISSING:
            if default is not MISSING:
                value = default
            elif factory is not MISSING:
                value = factory()
            elif init:
                missing.append(name)
                continue
            else:
                continue  # (an init=False field without a default stays unset, as in a dataclass)
        given[name] = value
    if kwargs:
        raise TypeError(f"{cls.__qualname__}.__init__() got an unexpected keyword argument {next(iter(kwargs))!r}")
    if missing:
        raise TypeError(f"{cls.__qualname__}.__init__() missing {len(missing)} required argument(s): "
                        + ", ".join(repr(n) for n in missing))
    if plan.post_init:
        self.__post_init__()


class _DataclassView:
    """`__dataclass_fields__` (and `__dataclass_params__`) of a record, made by `dataclasses` on first use:
    the fields of a throwaway dataclass declared as the record is, so `dataclasses`' functions see a
    dataclass of their own making."""

    def __init__(self, attr: str) -> None:
        self.attr = attr

    def __get__(self, obj: object, owner: type) -> Any:
        import dataclasses

        specs: tuple[Field, ...] = owner.__record__.specs  # type: ignore[attr-defined]
        ns: dict[str, Any] = {"__annotations__": {f.name: f.type for f in specs}, "__module__": owner.__module__}
        for f in specs:
            ns[f.name] = dataclasses.field(
                default=_theirs(f.default, dataclasses.MISSING), init=f.init, repr=f.repr, hash=f.hash,
                default_factory=_theirs(f.default_factory, dataclasses.MISSING), compare=f.compare,
                metadata=f.metadata or None, kw_only=_theirs(f.kw_only, dataclasses.MISSING))
        shadow: Any = dataclasses.dataclass(init=False, repr=False, eq=False)(type(owner.__name__, (), ns))
        type.__setattr__(owner, "__dataclass_fields__", shadow.__dataclass_fields__)
        type.__setattr__(owner, "__dataclass_params__", shadow.__dataclass_params__)
        return getattr(owner, self.attr)


def _theirs(value: Any, missing: Any) -> Any:
    return missing if value is MISSING else value


def _ours(value: Any, missing: Any) -> Any:
    return MISSING if value is missing else value


def _converted(theirs: Any, missing: Any) -> Field:
    """A `dataclasses.Field` as a record's."""
    spec = Field(_ours(theirs.default, missing), _ours(theirs.default_factory, missing), theirs.init, theirs.repr,
                 theirs.hash, theirs.compare, theirs.metadata, _ours(theirs.kw_only, missing))
    spec.name, spec.type = theirs.name, theirs.type
    return spec


def _is_classvar(annotation: object) -> bool:
    if isinstance(annotation, str):
        head = annotation.strip().split("[", 1)[0].strip()
        return head.rsplit(".", 1)[-1] == "ClassVar"
    import typing

    return annotation is typing.ClassVar or typing.get_origin(annotation) is typing.ClassVar


def _spec(cls: type, name: str, annotation: object, kw_only: bool, theirs: ModuleType | None) -> Field:
    """The field `name` of `cls` (`theirs`: an imported dataclasses, whose `field()` may have made its default)."""
    value = cls.__dict__.get(name, MISSING)
    if isinstance(value, Field):
        spec = value
    elif theirs is not None and isinstance(value, theirs.Field):
        spec = _converted(value, theirs.MISSING)
    else:
        spec = Field(default=value)
        spec.name, spec.type, spec.kw_only = name, annotation, kw_only
        if value is not MISSING and type(value).__hash__ is None:
            raise ValueError(f"mutable default {type(value)} for field {name} is not allowed: use default_factory")
        return spec  # (a plain default stays on the class as it is, as a dataclass leaves it)
    spec.name, spec.type = name, annotation
    if spec.kw_only is MISSING:
        spec.kw_only = kw_only
    if spec.default is not MISSING and type(spec.default).__hash__ is None:
        raise ValueError(f"mutable default {type(spec.default)} for field {name} is not allowed: "
                         "use default_factory")
    if spec.default is MISSING:
        delattr(cls, name)
    else:
        setattr(cls, name, spec.default)  # (as a dataclass leaves it: the default on the class)
    return spec


@overload
def record(cls: type[T], /) -> type[T]:
    """`@record`: the class made a record."""


@overload
def record(*, kw_only: bool = False) -> Callable[[type[T]], type[T]]:
    """`@record(kw_only=True)`: the decorator making a record whose fields are all passed by name."""


@dataclass_transform(frozen_default=True, field_specifiers=(field, Field))
def record(cls: type[T] | None = None, /, *, kw_only: bool = False) -> type[T] | Callable[[type[T]], type[T]]:
    """`@dataclass(frozen=True)` as far as anyone can tell, made without `dataclasses` (see the module).

    `@record(kw_only=True)`: every field is passed by name (a wide record, whose positional order no caller
    should have to count)."""
    if cls is None:
        return lambda c: _make(c, kw_only)
    return _make(cls, kw_only)


_SHARED = {"__dataclass_fields__": _DataclassView("__dataclass_fields__"),
           "__dataclass_params__": _DataclassView("__dataclass_params__"),
           "__init__": _init, "__eq__": _eq, "__hash__": _hash, "__repr__": _repr, "__setattr__": _setattr,
           "__delattr__": _delattr}


def _make(cls: type[T], kw_only: bool) -> type[T]:
    for base in cls.__mro__[1:]:
        if "__record__" in base.__dict__ or "__dataclass_fields__" in base.__dict__:
            raise TypeError(f"{cls.__qualname__}: a record does not inherit fields (from {base.__qualname__})")
    theirs = _dataclasses()  # (a dataclasses.Field default was made by an imported dataclasses)
    specs, positional, defaulted = [], [], False
    for name, annotation in cls.__dict__.get("__annotations__", {}).items():  # noqa: RUF063 (no inspect)
        if isinstance(annotation, str):
            if "ClassVar" in annotation and _is_classvar(annotation):
                continue
            if "InitVar" in annotation or "KW_ONLY" in annotation:
                raise TypeError(f"{cls.__qualname__}.{name}: InitVar and KW_ONLY are not supported by @record")
        elif _is_classvar(annotation):
            continue
        spec = _spec(cls, name, annotation, kw_only, theirs)
        specs.append(spec)
        if spec.init and not spec.kw_only:
            if _has_default(spec):
                defaulted = True
            elif defaulted:
                raise TypeError(f"non-default argument {name!r} follows default argument")
            positional.append(name)
    shared = {"__record__": _Plan(tuple(specs), tuple(positional), hasattr(cls, "__post_init__")), **_SHARED}
    if "__match_args__" not in cls.__dict__:
        shared["__match_args__"] = tuple(positional)
    for name, value in shared.items():
        setattr(cls, name, value)
    return cls


def _dataclasses() -> ModuleType | None:
    """The `dataclasses` module where it is imported whole; None where it is not, or where another thread is still
    importing it (a partially initialized module in `sys.modules`: no dataclass can have been made by it yet)."""
    theirs = sys.modules.get("dataclasses")
    if theirs is None or getattr(getattr(theirs, "__spec__", None), "_initializing", False):
        return None
    return theirs


def _has_default(f: Field) -> bool:
    return f.default is not MISSING or f.default_factory is not MISSING


def is_dataclass(obj: object) -> bool:
    """Whether `obj` is a record or a dataclass, or the class of one (`dataclasses.is_dataclass` without
    importing it: a dataclass was made by an imported `dataclasses`)."""
    if hasattr(obj, "__record__"):
        return True
    theirs = _dataclasses()
    return theirs is not None and theirs.is_dataclass(obj)


def fields(obj: object) -> tuple[Field, ...]:
    """The fields of a record or dataclass, or of its class, in order (`dataclasses.fields` without importing
    it; a dataclass's as this module's `Field`s)."""
    plan: _Plan | None = getattr(obj, "__record__", None)
    if plan is not None:
        return plan.specs
    theirs = _dataclasses()
    if theirs is not None and theirs.is_dataclass(obj):
        return tuple(_converted(f, theirs.MISSING) for f in theirs.fields(obj))
    raise TypeError(f"{obj!r} is neither a record nor a dataclass")


def replace(obj: T, /, **changes: Any) -> T:
    """A copy of a record with `changes` (`dataclasses.replace` without importing it)."""
    for f in fields(obj):
        if not f.init:
            if f.name in changes:
                raise ValueError(f"field {f.name} is declared with init=False, it cannot be specified with "
                                 "replace()")
            continue
        if f.name not in changes:
            changes[f.name] = getattr(obj, f.name)
    return obj.__class__(**changes)
