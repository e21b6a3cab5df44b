"""`@record`: a frozen dataclass whose `__eq__`, `__hash__` and `__repr__` are shared functions.

`dataclasses.dataclass` writes the source of every method of every class and compiles it (`exec`) when the
class is made: a warm build imports some fifty frozen dataclasses, and compiling their methods was the
largest part of its start (parsing the generated `__repr__`'s f-strings alone cost more than the whole of a
bare interpreter start). A record is a dataclass all the same (`dataclasses.fields`, `replace`, `asdict` and
`core/serial` see no difference); only its `__init__` is generated, and the rest behaves exactly as a frozen
dataclass's: fields compared and hashed as a tuple (those with `compare=False` left out; `hash=` as
dataclasses read it), the repr `Name(field=value, ...)` of the fields with `repr=True`, another class never
equal, and any assignment or deletion after `__init__` set each field once is FrozenInstanceError (mypy sees
a frozen dataclass: `dataclass_transform(frozen_default=True)`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import FrozenInstanceError, dataclass, field, fields
from typing import Any, TypeVar, cast, dataclass_transform, overload

T = TypeVar("T")


def _eq(self: Any, other: Any) -> Any:  # (bool, or NotImplemented for another class, as dataclasses answer)
    if other.__class__ is not self.__class__:
        return NotImplemented
    names = self.__record_compare__
    return tuple(getattr(self, n) for n in names) == tuple(getattr(other, n) for n in names)


def _hash(self: Any) -> int:
    return hash(tuple(getattr(self, n) for n in self.__record_hash__))


def _repr(self: Any) -> str:
    shown = ", ".join(f"{n}={getattr(self, n)!r}" for n in self.__record_repr__)
    return f"{self.__class__.__qualname__}({shown})"


def _setattr(self: Any, name: str, value: object) -> None:
    if name in self.__dict__ or name not in self.__record_fields__:  # (__init__ sets each field once)
        raise FrozenInstanceError(f"cannot assign to field {name!r}")
    object.__setattr__(self, name, value)


def _delattr(self: Any, name: str) -> None:
    raise FrozenInstanceError(f"cannot delete field {name!r}")


@overload
def record(cls: type[T], /) -> type[T]:
    """`@record`: the class made a record."""


@overload
def record(*, kw_only: bool = False) -> Callable[[type[T]], type[T]]:
    """`@record(kw_only=True)`: the decorator making a record whose fields are all passed by name."""


@dataclass_transform(frozen_default=True, field_specifiers=(field,))
def record(cls: type[T] | None = None, /, *, kw_only: bool = False) -> type[T] | Callable[[type[T]], type[T]]:
    """`@dataclass(frozen=True)` as far as anyone can tell, with only `__init__` generated (see the module).

    `@record(kw_only=True)`: every field is passed by name (a wide record, whose positional order no caller
    should have to count)."""
    if cls is None:
        return lambda c: _make(c, kw_only)
    return _make(cls, kw_only)


def _make(cls: type[T], kw_only: bool) -> type[T]:
    made = dataclass(eq=False, repr=False, kw_only=kw_only)(cls)  # frozen by the shared __setattr__ below
    every = fields(cast("Any", made))
    shared: dict[str, object] = {
        "__record_fields__": frozenset(f.name for f in every),
        "__record_compare__": tuple(f.name for f in every if f.compare),
        "__record_hash__": tuple(f.name for f in every if (f.compare if f.hash is None else f.hash)),
        "__record_repr__": tuple(f.name for f in every if f.repr),
        "__eq__": _eq, "__hash__": _hash, "__repr__": _repr, "__setattr__": _setattr, "__delattr__": _delattr,
    }
    for name, value in shared.items():
        setattr(made, name, value)
    return made
