"""Per-commit prebuilt wheels for bisect (mozregression's and Chromium's bisect-builds' trick): a component with
`prebuilt-index = URL` names an index (PEP 503, a find-links page or a folder) whose wheels carry the commit as a
local version (`+g<hex>`, as setuptools-scm and vLLM's per-commit wheels do). A step whose commit has a wheel
there takes it, sha256 checked, instead of compiling; the other steps build."""

from __future__ import annotations

from toolchain.build.prebuilt_wheels import commit_wheel
from toolchain.recipe.model import Recipe


def with_commit_wheel(recipe: Recipe, component: str) -> Recipe:
    """`recipe` with `component` taken from its prebuilt-index when a wheel of its pinned commit is there
    (a prebuilt {url, sha256}, so the step's lock records it as prebuilt); else `recipe` unchanged."""
    if not component:
        return recipe
    comp = recipe.component(component)
    if not comp.prebuilt_index or not comp.commit:
        return recipe
    found = commit_wheel(comp.prebuilt_index, comp.dist or comp.name, comp.commit, f"{component}@{comp.commit[:12]}")
    if found is None:
        return recipe
    return recipe.with_prebuilt_wheel(component, found.url, found.sha256)
