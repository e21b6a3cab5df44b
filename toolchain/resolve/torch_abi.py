"""The ABI check: a compiled wheel runs only with the build of torch (or of any other `built-against`
distribution) it was compiled against. intel-xpu-backend-for-triton #6934: kernels built against one torch and
run with another fail with `'_OpNamespace' '_C' object has no attribute ...`. The check compares the exact
version, local build label included (2.14.0+xpu is not 2.14.0+cpu nor 2.14.0), and fails before anything is
served."""

from __future__ import annotations

from collections.abc import Sequence

from toolchain.build.built_against import BuiltAgainst
from toolchain.core.record import record
from toolchain.errors import BuildError
from toolchain.resolve.closure import Closure, canonical_name


class ABIMismatch(BuildError):
    """The closure's build of a distribution differs from the one a compiled component was built against."""


@record
class Compiled:
    """A component and what its build environment had (from the build, or as a lock records it)."""
    component: str
    built_against: tuple[BuiltAgainst, ...]


def check_built_against(compiled: Sequence[Compiled], closure: Closure, built_versions: dict[str, str]) -> None:
    """Raise ABIMismatch naming both versions when the closure (or a built wheel) carries another build.
    `built_versions`: {canonical name: version} of the built wheels (taken as given, they count too)."""
    problems, fixes = [], []
    for comp in compiled:
        for ba in comp.built_against:
            name = canonical_name(ba.name)
            dist = closure.dist(name)
            have = dist.version if dist else built_versions.get(name)
            if have is None:
                problems.append(f"{comp.component} was built against {ba.name} {ba.version}"
                                f"{_abi(ba)}, but the resolved closure has no {ba.name} at all")
                fixes.append(f"make a built wheel require {ba.name}=={ba.version}")
            elif have != ba.version:
                where = f" from {dist.index or dist.url}" if dist else " (a built wheel)"
                problems.append(f"{comp.component} was built against {ba.name} {ba.version}{_abi(ba)}, but the "
                                f"resolved closure has {ba.name} {have}{where}")
                fixes.append(f"resolve {ba.name}=={ba.version} (put the index that serves that build first in "
                             f"[resolve] indexes, e.g. the PyTorch XPU index for +xpu), or rebuild "
                             f"{comp.component} against {ba.name} {have}")
    if problems:
        raise ABIMismatch("ABI mismatch, nothing is served: " + "; ".join(problems),
                          hint="; ".join(dict.fromkeys(fixes)))


def _abi(ba: BuiltAgainst) -> str:
    return f" (C++11 ABI {ba.cxx11_abi})" if ba.cxx11_abi else ""
