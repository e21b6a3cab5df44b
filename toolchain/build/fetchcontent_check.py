"""Every FetchContent dependency the sources declare is pinned, or left unpinned on purpose, before building.

The component's CMake files are read at its pinned commit (sources/cmake_declared.py); a declaration whose name
the recipe neither pins (`[[components.NAME.fetchcontent]]`) nor lists with a reason (`fetchcontent-unused`:
this configuration never fetches it; `fetchcontent-network`: CMake fetches it itself) is a `RecipeError`
(exit 2) naming the file, the line, the `FetchContent_Declare` and its tag, and how to pin it. Which
declarations a configuration reaches is the recipe's statement, not a guess from CMake's `if()`s: a
dependency stated as unused that a build does reach is not fetched either (FULLY_DISCONNECTED stays on):
CMake >= 3.30 stops at configure, older ones go on without it and the build fails where it needs it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from toolchain.core.record import record
from toolchain.errors import RecipeError
from toolchain.recipe.model import Component
from toolchain.sources.cmake_declared import Declared


@record
class DeclaredRow:
    """One dependency name, as `toolchain plan` lists it: where the sources declare it and how the recipe
    treats it (`pinned` commit, `unused` / `network` with the reason, or `UNPINNED`)."""
    name: str
    declared: tuple[str, ...]   # each declaration's label (file:line FetchContent_Declare(...))
    status: str                 # "pinned" | "unused" | "network" | "UNPINNED" | "not declared"
    detail: str = ""            # the pinned commit or the reason


def rows(comp: Component, declared: Sequence[Declared]) -> tuple[DeclaredRow, ...]:
    """Declared against pinned, one row per name (declared names first, then pins the sources never declare)."""
    pinned = {d.name.upper(): d.commit for d in comp.fetchcontent}
    unused = {n.upper(): r for n, r in comp.fetchcontent_unused}
    network = {n.upper(): r for n, r in comp.fetchcontent_network}
    by_name: dict[str, list[Declared]] = {}
    for d in declared:
        by_name.setdefault(d.name.upper(), []).append(d)
    out = []
    for key, decls in by_name.items():
        labels = tuple(d.label for d in decls)
        if key in pinned:
            out.append(DeclaredRow(decls[0].name, labels, "pinned", pinned[key]))
        elif key in unused:
            out.append(DeclaredRow(decls[0].name, labels, "unused", unused[key]))
        elif key in network:
            out.append(DeclaredRow(decls[0].name, labels, "network", network[key]))
        else:
            out.append(DeclaredRow(decls[0].name, labels, "UNPINNED"))
    for dep in comp.fetchcontent:
        if dep.name.upper() not in by_name:
            out.append(DeclaredRow(dep.name, (), "not declared", dep.commit))
    return tuple(out)


def check_declared(comp: Component, declared: Sequence[Declared], recipe: str) -> None:
    """A RecipeError naming each declaration of an unpinned dependency the recipe says nothing of."""
    bad = [r for r in rows(comp, declared) if r.status == "UNPINNED"]
    if not bad:
        return
    where = f"{recipe}: components.{comp.name}"
    problems = [f"{where}: {label} is not pinned (CMake would fetch it from the network at configure time)"
                for r in bad for label in r.declared]
    names = " ".join(f"--fetchcontent {r.name}" for r in bad)
    raise RecipeError(problems, hint=f"pin it from its tag through the mirror: `toolchain update --recipe {recipe} "
                                     f"--component {comp.name} {names}`, or add [[components.{comp.name}.fetchcontent]] "
                                     "name/url/commit; a dependency this configuration never fetches goes in "
                                     f"[components.{comp.name}.fetchcontent-unused] (or -network) with the reason")


def declared_table(comp: Component, mirror: Path) -> list[dict[str, object]]:
    """Declared against pinned as `toolchain plan --json` shows it (the mirror has the component's commit)."""
    from toolchain.sources.cmake_declared import declared_at

    return [{"name": r.name, "status": r.status, "detail": r.detail, "declared": list(r.declared)}
            for r in rows(comp, declared_at(mirror, comp.commit, comp.subdir))]


__all__ = ["DeclaredRow", "check_declared", "declared_table", "rows"]
