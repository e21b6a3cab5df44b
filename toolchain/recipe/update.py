"""`toolchain update`: resolve each component's `ref` to a commit and write it into the recipe file,
keeping comments and layout (tomlkit). The file is replaced atomically and only when something changed."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, TypedDict

import tomlkit

from toolchain.core.fs import atomic_write_text
from toolchain.errors import RecipeError
from toolchain.recipe.model import Recipe

if TYPE_CHECKING:
    from toolchain.console import UI


class RefResolver(Protocol):
    """What `update` needs of the sources (toolchain.sources.mirrors.Mirrors): a ref's current commit, and
    that commit's subject and `git describe` for the comment beside it."""

    def resolve(self, url: str, ref: str) -> str:
        """The full commit id `ref` (a branch or tag) of the repository at `url` names now."""

    def commit_info(self, url: str, commit: str) -> dict[str, str]:
        """The id, subject, date, epoch and author of `commit` of the repository at `url`."""

    def describe(self, url: str, commit: str) -> str:
        """`git describe` of `commit` (the nearest tag and the distance from it)."""


class Change(TypedDict):
    """One component's line of `toolchain update --json` `changes`."""

    component: str
    ref: str
    old: str
    new: str
    changed: bool


def update_recipe(recipe: Recipe, mirrors: RefResolver, *, only: Sequence[str] = (),
                  ui: UI | None = None) -> list[Change]:
    """Pin each component (those in `only`) at the commit its ref names now, keeping the file's comments."""
    doc = tomlkit.parse(recipe.path.read_text(encoding="utf-8"))
    names = list(only) or [c.name for c in recipe.components]
    changes: list[Change] = []
    for name in names:
        comp = recipe.component(name)
        if not comp.ref:
            raise RecipeError(f"{recipe.path.name}: components.{name}.ref: not set, so there is nothing to resolve",
                              hint="set ref to a branch or tag")
        new = mirrors.resolve(comp.url, comp.ref)
        changed = new != comp.commit
        if changed:
            table = doc.get("components", {}).get(name)
            if table is None:  # the component comes from the recipe this one extends: override it here
                doc.setdefault("components", tomlkit.table(is_super_table=True))
                table = tomlkit.table()
                doc["components"][name] = table
            table["commit"] = _pinned(new, mirrors, comp.url)
        changes.append({"component": name, "ref": comp.ref, "old": comp.commit, "new": new, "changed": changed})
    if any(c["changed"] for c in changes):
        atomic_write_text(recipe.path, tomlkit.dumps(doc))
    return changes


def _pinned(commit: str, mirrors: RefResolver, url: str) -> tomlkit.items.String:
    """The new commit with the comment the shipped recipes keep beside it: its subject and `git describe`
    (the old commit's comment would describe another commit)."""
    item = tomlkit.string(commit)
    subject = mirrors.commit_info(url, commit).get("subject", "")
    describe = mirrors.describe(url, commit)
    note = " ".join(filter(None, [subject, f"({describe})" if describe else ""]))
    if note:
        item.comment(note)
    return item
