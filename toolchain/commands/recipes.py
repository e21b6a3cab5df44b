"""`toolchain recipes`: list the recipes with their descriptions."""

from __future__ import annotations

import argparse
from typing import Any

from toolchain.commands import options
from toolchain.console import UI, CommandResult, Grid
from toolchain.errors import UsageError
from toolchain.recipe.load import list_recipes


def Table(*args: Any, **kwargs: Any) -> Any:
    from rich.table import Table as _Table

    return _Table(*args, **kwargs)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("recipes", help="list the recipes with their descriptions",
                       description="List the recipes: yours (--recipes-dir, $TOOLCHAIN_RECIPES_DIR or ./recipes), then "
                                   "the shipped ones your recipes do not hide, each with its description.")
    options.add(p, "recipes-dir")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace, ui: UI) -> CommandResult:
    if args.recipes_dir is not None and not args.recipes_dir.is_dir():
        raise UsageError(f"--recipes-dir {args.recipes_dir}: not a directory",
                         hint="pass the directory that holds the recipes (NAME.toml)")
    # yours first, then the shipped ones (the order the recipes are searched in); by name within each folder
    rows = list_recipes(args.recipes_dir)
    # a recipe's text, shown as written (plain text: no markup, no emoji); the description wraps at spaces
    table = Grid("recipes", ("name", "found in", "description"), tuple((n, w, d) for n, d, w in rows), prose=True)
    return CommandResult({"recipes": [{"name": n, "description": d, "found-in": w} for n, d, w in rows]}, 0, "",
                         (table,))
