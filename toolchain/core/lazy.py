"""A package's lazy exports: names it offers that are imported from its modules on first use, so that importing
one module of the package does not load the others (PEP 562's module `__getattr__`).

A package keeps its map as `_LAZY` (name -> the submodule it lives in; tests/test_public_names.py resolves
every one), lists the names in `__all__`, imports them under TYPE_CHECKING for the type checker, and sets
`__getattr__ = lazy_exports(__name__, _LAZY)`."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping


def lazy_exports(package: str, lazy: Mapping[str, str]) -> Callable[[str], object]:
    """The package's module `__getattr__`: a name of `lazy` from its submodule, any other an AttributeError."""

    def __getattr__(name: str) -> object:
        if name in lazy:
            return getattr(importlib.import_module(f"{package}.{lazy[name]}"), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
