"""`toolchain update`: pin each component's `ref` to its current commit, in the recipe file."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from toolchain.commands import options
from toolchain.console import UI, CommandResult, literal
from toolchain.errors import UsageError
from toolchain.sources.mirrors import parse_rewrites

if TYPE_CHECKING:
    from toolchain.recipe.model import Recipe
    from toolchain.sources.mirrors import Mirrors


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("update", help="pin each component's `ref` to its current commit in the recipe file",
                       description="Fetch each component's `ref` and write the commit it points at into the "
                                   "recipe file as `commit`, keeping the file's comments and layout.")
    options.add_recipe(p)
    options.add(p, "cache-dir", "mirror")
    p.add_argument("--component", action="append", default=[], help="only this component (repeatable)")
    p.add_argument("--fetchcontent", action="append", default=[], metavar="NAME",
                   help="pin this FetchContent dependency of the one --component at the commit of the tag its "
                        "CMake files declare, through the mirror (repeatable)")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace, ui: UI) -> CommandResult:
    from toolchain.recipe.update import update_recipe
    from toolchain.sources.mirrors import Mirrors
    from toolchain.sources.rewrites import recipe_rewrites

    recipe = options.recipe_from_args(args, pinned=False)  # update pins components that have no commit yet
    cache = options.cache_dir(args)
    mirrors = Mirrors(cache, recipe_rewrites(recipe, cache) + parse_rewrites(args.mirror), ui=ui)
    if args.fetchcontent:
        return _pin_fetchcontent(args, recipe, mirrors, ui)
    changes = update_recipe(recipe, mirrors, only=args.component, ui=ui)
    summary = "\n".join(literal(f"{c['component']}: {c['ref']} {c['old'][:12]} → {c['new'][:12]}")
                        for c in changes if c["changed"])
    return CommandResult({"ok": True, "recipe": str(recipe.path), "changes": changes}, 0,
                         summary or "every component is already at the head of its ref")


def _pin_fetchcontent(args: argparse.Namespace, recipe: Recipe, mirrors: Mirrors, ui: UI) -> CommandResult:
    from toolchain.build.fetchcontent_update import update_fetchcontent

    if len(args.component) != 1:
        raise UsageError("--fetchcontent pins dependencies of one component: pass exactly one --component",
                         hint="e.g. toolchain update --recipe ark-cpu --component auto-round-lib --fetchcontent dnnl")
    pins = update_fetchcontent(recipe, args.component[0], args.fetchcontent, mirrors)
    summary = "\n".join(literal(f"{c['component']} FetchContent {c['name']}: {c['tag']} → {c['new'][:12]}"
                                 + ("" if c["old"] != c["new"] else " (already pinned)")) for c in pins)
    return CommandResult({"ok": True, "recipe": str(recipe.path), "fetchcontent": pins}, 0, summary)
