"""The runtime closure: after the build, the requirements of the built wheels are resolved (with uv) into one
set of pinned distributions, each with the sha256 of the exact file and where it came from; the lock records
them and every install installs exactly them. The built wheels are taken as given, never from an index.

closure.py  the data (`Closure`, `LockedDist`) and its TOML form
uvpin.py    running the kept resolver (`uv pip compile`) and picking the exact file for the target
torch_abi.py  the check that the closure's torch (and any other `built-against` distribution) is the build the
            compiled wheels were built against

Names are imported from their modules on first use (`_LAZY`: name -> module; tests/test_public_names.py
resolves every one): the lock reads `closure.py` on every build, a warm no-op must not pay for the
resolver's (packaging's requirement and tag machinery).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from toolchain.core.lazy import lazy_exports

if TYPE_CHECKING:
    from toolchain.resolve.closure import Closure, LockedDist
    from toolchain.resolve.torch_abi import check_built_against
    from toolchain.resolve.uvpin import BuiltWheel, resolve_closure

__all__ = ["BuiltWheel", "Closure", "LockedDist", "check_built_against", "resolve_closure"]
_LAZY = {"check_built_against": "torch_abi", "Closure": "closure", "LockedDist": "closure", "BuiltWheel": "uvpin",
         "resolve_closure": "uvpin"}
__getattr__ = lazy_exports(__name__, _LAZY)
