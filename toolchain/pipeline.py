"""The pipeline in one call: recipe → plan → built components → lock, and the way back from a lock to the
recipe it records (with every recorded hash checked)."""

from __future__ import annotations

from pathlib import Path

from toolchain.build.plan import make_plan
from toolchain.build.stack import BuildOptions, build_plan
from toolchain.core.fs import give_to_invoking_user
from toolchain.errors import RecipeError
from toolchain.lock import (
    LOCK_NAME,
    WHEELS_DIR,
    Lock,
    assemble_lock,
    read_lock,
    write_lock,
)
from toolchain.recipe.load import Recipe, load_recipe_text
from toolchain.sources.mirrors import Mirrors
from toolchain.sources.patches import load_series
from toolchain.sources.rewrites import recipe_rewrites
from toolchain.target import make_runtime


def build_stack(recipe: Recipe, options: BuildOptions, ui) -> Lock:
    out = options.out_dir
    logs = out / "logs"
    with make_runtime(recipe.target, ui) as runtime:
        with ui.status(f"probing the target ({runtime.describe()}) and sourcing the toolchain"):
            plan = make_plan(recipe, runtime, log_dir=logs, memo_dir=options.cache_dir / "memo")
        logs.mkdir(parents=True, exist_ok=True)  # not before: a bad interpreter or setvars leaves no output
        rewrites = recipe_rewrites(recipe, options.cache_dir) + tuple(options.rewrites)
        mirrors = Mirrors(options.cache_dir, rewrites, log_dir=logs, ui=ui)
        built = build_plan(plan, runtime, mirrors, options, ui)
    lock = assemble_lock(plan, built)
    path = out / LOCK_NAME
    if not _same_lock(path, lock):
        write_lock(lock, out)
    keep = {b.wheel.file for b in built}
    for stale in (out / WHEELS_DIR).glob("*.whl"):
        if stale.name not in keep:
            stale.unlink()
    give_to_invoking_user(out)
    return read_lock(path)


def _same_lock(path: Path, lock: Lock) -> bool:
    """True when `path` already records exactly `lock` (a warm no-op rewrites nothing)."""
    try:
        old = read_lock(path)
    except Exception:
        return False
    return old == lock and (path.parent / "pylock.toml").is_file()


def recipe_from_lock(lock: Lock, patches_dir: Path | None, recipes_dir: Path | None) -> Recipe:
    """The lock's recorded recipe, after checking that it and every patch still hash as recorded."""
    recorded = Path(lock.recipe_path)  # a bundle records it relative to the project root (cwd)
    pdir = patches_dir or ((recipes_dir or recorded.parent).parent / "patches")
    recipe = load_recipe_text(lock.recipe_text, lock.recipe_name, recorded, pdir)
    problems = []
    if recipe.sha256 != lock.recipe_sha256:
        problems.append(f"recipe text has sha256 {recipe.sha256}, the lock records {lock.recipe_sha256}")
    for comp in lock.components:
        plan_patches = {p.path: p for p in _series(recipe, comp.name)}
        for p in comp.patches:
            have = plan_patches.get(p.path)
            if have is None or have.sha256 != p.sha256:
                problems.append(f"{comp.name}: patch {p.path} has sha256 "
                                f"{have.sha256 if have else '(missing)'}, the lock records {p.sha256}")
    if problems:
        raise RecipeError([f"{lock.path}: {p}" for p in problems],
                          hint="the lock no longer matches its inputs; restore them or build the recipe anew")
    return recipe


def _series(recipe: Recipe, name: str):
    comp = recipe.component(name)
    return load_series(recipe.patches_dir, comp.patches)
