"""`toolchain update`: pin each component's `ref` to its current commit, in the recipe file."""

from __future__ import annotations

import argparse

from toolchain.commands import options
from toolchain.console import UI, CommandResult, literal
from toolchain.sources.mirrors import parse_rewrites


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("update", help="pin each component's `ref` to its current commit in the recipe file",
                       description="Fetch each component's `ref` and write the commit it points at into the "
                                   "recipe file as `commit`, keeping the file's comments and layout.")
    options.add_recipe(p)
    options.add(p, "cache-dir", "mirror")
    p.add_argument("--component", action="append", default=[], help="only this component (repeatable)")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace, ui: UI) -> CommandResult:
    from toolchain.recipe.update import update_recipe
    from toolchain.sources.mirrors import Mirrors
    from toolchain.sources.rewrites import recipe_rewrites

    recipe = options.recipe_from_args(args, pinned=False)  # update pins components that have no commit yet
    cache = options.cache_dir(args)
    mirrors = Mirrors(cache, recipe_rewrites(recipe, cache) + parse_rewrites(args.mirror), ui=ui)
    changes = update_recipe(recipe, mirrors, only=args.component, ui=ui)
    summary = "\n".join(literal(f"{c['component']}: {c['ref']} {c['old'][:12]} → {c['new'][:12]}")
                        for c in changes if c["changed"])
    return CommandResult({"ok": True, "recipe": str(recipe.path), "changes": changes}, 0,
                         summary or "every component is already at the head of its ref")
