"""`toolchain lock`: the closure of an existing lock's wheels resolved again and written into it."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from toolchain.console import UI
from toolchain.core.fs import give_to_invoking_user
from toolchain.core.record import replace
from toolchain.lock import Lock, read_lock, write_lock
from toolchain.pipeline.audit import audit_native
from toolchain.pipeline.verify import recipe_from_lock
from toolchain.target import make_runtime


def relock(lock_path: Path, cache_dir: Path, patches_dir: Path | Sequence[Path] | None, recipes_dir: Path | None, ui: UI, *,
           refresh: bool = False, audit: bool = False) -> Lock:
    """`toolchain lock`: the closure of an existing lock's built wheels with the recipe's [resolve] (the kept
    one, or resolved again when `refresh`), written into the lock in place; the ABI check runs before anything
    is written (with `audit`, the closure's own shared objects are fetched and read too)."""
    from toolchain.lock import verify_wheels
    from toolchain.pipeline.outdir import holding_out_dir
    from toolchain.resolve.run import resolve_built

    read_lock(lock_path)  # (a missing or broken lock: said before anything, the folder's lock included, is written)
    # the lock's folder is a build's output folder: a build writing it, or another `toolchain lock`, takes turns
    with holding_out_dir(Path(lock_path).parent, ui):
        lock = read_lock(lock_path)
        verify_wheels(lock)
        recipe = recipe_from_lock(lock, patches_dir, recipes_dir, cache_dir)
        assert lock.path is not None
        built = [(c.name, lock.wheel_path(c), c.built_against) for c in lock.components]
        base = None
        if recipe.target.base:  # the image is read again: what it holds now is what the overlay runs on
            from toolchain.build.plan import probe_target
            from toolchain.resolve.image_closure import overlay_closure
            from toolchain.target.baseenv import read_base

            with make_runtime(recipe.target, ui) as runtime, \
                    ui.status(f"reading what the base image {recipe.target.base} holds"):
                base = read_base(runtime, probe_target(runtime, None, None), recipe.target.base, recipe.target.python)
            closure = overlay_closure(base, built)
        else:
            closure = resolve_built(recipe, lock.target, built, cache_dir, lock.path.parent / "logs", ui,
                                    refresh=refresh)
        relocked = replace(lock, closure=closure, base=base)
        write_lock(replace(relocked, native=audit_native(relocked, lock.path.parent, recipe, None,
                                                                     cache_dir, ui, read_deps=audit)),
                   lock.path.parent)
        give_to_invoking_user(lock.path.parent)
        return read_lock(lock.path)
