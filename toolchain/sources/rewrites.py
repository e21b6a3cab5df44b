"""The URL rewrites a recipe asks for: its `[mirrors]` table (a relative path against the directory of the
recipe that declared it) and, for the offline demo, the local repositories it is built from."""

from __future__ import annotations

from pathlib import Path

from toolchain.recipe.model import Recipe
from toolchain.sources.demo import demo_rewrite
from toolchain.sources.mirrors import Rewrite, as_url


def recipe_rewrites(recipe: Recipe, cache_dir: Path) -> tuple[Rewrite, ...]:
    """The URL rewrites a recipe's [mirrors] table (paths relative to the recipe that declared them) and demo give."""
    rewrites = [Rewrite(k, as_url(v if "://" in v else str((recipe.origin(f"mirrors.{k}").dir / v).resolve())
                                  + ("/" if v.endswith("/") else "")))
                for k, v in recipe.mirrors]
    if recipe.demo:
        rewrites.append(demo_rewrite(cache_dir))
    return tuple(rewrites)
