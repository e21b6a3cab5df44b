"""`toolchain update`: resolve each component's `ref` to a commit and write it into the recipe file,
keeping comments and layout (tomlkit). The file is replaced atomically and only when something changed."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import tomlkit

from toolchain.core.fs import atomic_write_text
from toolchain.errors import RecipeError
from toolchain.recipe.model import Recipe


class RefResolver(Protocol):
    """What `update` needs of the sources: a ref's current commit (toolchain.sources.mirrors.Mirrors)."""

    def resolve(self, url: str, ref: str) -> str: ...


def update_recipe(recipe: Recipe, mirrors: RefResolver, *, only: Sequence[str] = (), ui=None) -> list[dict]:
    doc = tomlkit.parse(recipe.path.read_text(encoding="utf-8"))
    names = list(only) or [c.name for c in recipe.components]
    changes = []
    for name in names:
        comp = recipe.component(name)
        if not comp.ref:
            raise RecipeError(f"{recipe.path.name}: components.{name}.ref: not set, so there is nothing to resolve",
                              hint="set ref to a branch or tag")
        new = mirrors.resolve(comp.url, comp.ref)
        table = doc.get("components", {}).get(name)
        if table is None:  # the component comes from the recipe this one extends: override it here
            doc.setdefault("components", tomlkit.table())
            table = tomlkit.table()
            doc["components"][name] = table
        changed = new != comp.commit
        if changed:
            table["commit"] = new
        changes.append({"component": name, "ref": comp.ref, "old": comp.commit, "new": new, "changed": changed})
    if any(c["changed"] for c in changes):
        atomic_write_text(recipe.path, tomlkit.dumps(doc))
    return changes
