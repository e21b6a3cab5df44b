"""`toolchain update --component C --fetchcontent NAME`: a FetchContent pin filled from the tag the sources
declare, resolved through the mirror (a `--mirror` rewrite serves it offline), and written into the recipe file
as a `[[components.C.fetchcontent]]` entry with the declaration quoted beside it; the name leaves the recipe's
`fetchcontent-unused` / `fetchcontent-network` tables of that file. Comments and layout are kept (tomlkit)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol, TypedDict

import tomlkit

from toolchain.core.fs import atomic_write_text
from toolchain.errors import RecipeError
from toolchain.recipe.model import Recipe
from toolchain.sources.cmake_declared import Declared


class TagResolver(Protocol):
    """What this needs of the sources (sources.mirrors.Mirrors): a mirror with the component's commit, and a
    tag's commit in the dependency's repository."""

    def ensure(self, url: str, commit: str | None = None, *, where: str = "") -> Path:
        """The mirror of `url`, fetched if it lacks `commit`."""

    def resolve(self, url: str, ref: str) -> str:
        """The commit `ref` (a branch or tag) of the repository at `url` names now."""


class PinChange(TypedDict):
    """One dependency's line of `toolchain update --json` `fetchcontent`."""

    component: str
    name: str
    url: str
    tag: str
    old: str
    new: str
    declared: str


def update_fetchcontent(recipe: Recipe, component: str, names: Sequence[str],
                        mirrors: TagResolver) -> list[PinChange]:
    """Pin each of `names` at the commit its declared tag names, in the recipe file."""
    from toolchain.sources.cmake_declared import declared_at as read_declared

    comp = recipe.component(component)
    mirror = mirrors.ensure(comp.url, comp.commit, where=f"{recipe.path.name}: components.{component}.commit")
    found = read_declared(mirror, comp.commit, comp.subdir)
    doc = tomlkit.parse(recipe.path.read_text(encoding="utf-8"))
    components = doc.setdefault("components", tomlkit.table(is_super_table=True))
    table = components.get(component)
    if table is None:  # the component comes from the recipe this one extends: override it here
        table = components[component] = tomlkit.table()
    pins = table.get("fetchcontent")
    if pins is None:
        pins = table["fetchcontent"] = tomlkit.aot()
    changes: list[PinChange] = []
    for name in names:
        decl = _the_declaration(found, name, recipe, component)
        commit = mirrors.resolve(decl.repository, decl.tag)
        entry = next((p for p in pins if str(p.get("name", "")).upper() == name.upper()), None)
        old = str(entry.get("commit", "")) if entry is not None else ""
        if entry is None:
            entry = tomlkit.table()
            entry.add(tomlkit.comment(f"{decl.label}; tag -> commit (toolchain update)"))
            entry["name"], entry["url"] = decl.name, decl.repository
            pins.append(entry)
        entry["commit"] = commit
        for key in ("fetchcontent-unused", "fetchcontent-network"):
            stated = table.get(key)
            if stated is not None and decl.name in stated:
                del stated[decl.name]
        changes.append({"component": component, "name": decl.name, "url": decl.repository, "tag": decl.tag,
                        "old": old, "new": commit, "declared": decl.label})
    if any(c["old"] != c["new"] for c in changes):
        atomic_write_text(recipe.path, tomlkit.dumps(doc))
    return changes


def _the_declaration(found: Sequence[Declared], name: str, recipe: Recipe, component: str) -> Declared:
    """The first declaration of `name` with a git repository and tag (the one the build configures first)."""
    usable = [d for d in found if d.name.upper() == name.upper() and d.repository and d.tag
              and "${" not in d.repository + d.tag]
    if not usable:
        names = sorted({d.name for d in found})
        raise RecipeError(f"{recipe.path.name}: components.{component}: no FetchContent_Declare({name} GIT_REPOSITORY "
                          "... GIT_TAG ...) with both known in its CMake files at the pinned commit",
                          hint=f"declared there: {', '.join(names) or 'none'}; pin it by hand with "
                               f"[[components.{component}.fetchcontent]] name/url/commit")
    return usable[0]


__all__ = ["PinChange", "update_fetchcontent"]
