"""Bisecting a component of an overlay (`[target] base`): every step builds that component alone, over the
image. The recipe's other rebuilt components are left out of the step (the image holds a build of each), so a
step never waits for them and its lock is the image plus the one component under test."""

from __future__ import annotations

from toolchain.recipe.model import Recipe


def only_the_bisected(recipe: Recipe, component: str) -> Recipe:
    """`recipe` with `component` as its only component when it rebuilds over a base image; else unchanged."""
    if not recipe.target.base or not component or len(recipe.components) == 1:
        return recipe
    return recipe.with_only(component)  # (a RecipeError naming the components when there is no such one)
