"""`toolchain build | plan | update | recipes`: parse arguments, call the stages, shape the result."""

from __future__ import annotations

import argparse
from pathlib import Path

from toolchain.build.cache import CACHE_ENV, default_cache_dir
from toolchain.build.plan import make_plan, plan_to_dict
from toolchain.build.stack import BuildOptions
from toolchain.console import CommandResult
from toolchain.errors import UsageError
from toolchain.lock import Lock, read_lock, verify_wheels
from toolchain.pipeline import build_stack, recipe_from_lock
from toolchain.recipe.load import Recipe, list_recipes, load_recipe
from toolchain.sources.mirrors import parse_rewrites
from toolchain.target import make_runtime

DEFAULT_RECIPE = "demo"


def Table(*args, **kwargs):  # noqa: N802 - rich's Table, imported when a table is made
    from rich.table import Table as _Table

    return _Table(*args, **kwargs)


def register(sub, common) -> None:
    src = argparse.ArgumentParser(add_help=False)
    src.add_argument("--recipe", help=f"recipe name in recipes/ or a path to a .toml file (default: {DEFAULT_RECIPE})")
    src.add_argument("--recipes-dir", type=Path, help="where recipes live (default: ./recipes, or $TOOLCHAIN_RECIPES_DIR)")
    src.add_argument("--patches-dir", type=Path, help="where patches live (default: <recipes-dir>/../patches)")
    src.add_argument("--cache-dir", type=Path, help=f"mirrors, source trees and wheels (default: ${CACHE_ENV} or ~/.cache/xpu-toolchain)")
    src.add_argument("--mirror", action="append", default=[], metavar="FROM=TO",
                     help="rewrite repository URLs starting with FROM to start with TO (repeatable)")

    p = sub.add_parser("build", parents=[common, src], help="build the recipe's wheels and write the lock")
    p.add_argument("--out", type=Path, help="output directory (default: dist/<recipe>)")
    p.add_argument("--from-lock", type=Path, metavar="LOCK", help="rebuild exactly what a lock records")
    p.add_argument("--no-cache", action="store_true", help="build every component again (results still stored)")
    p.add_argument("--fresh-sources", action="store_true", help="prepare source trees again from the mirrors")
    p.add_argument("--bundle", action="store_true", help="also write a reproducible bundle (wheels, locks, SBOM, tarball)")
    p.set_defaults(handler=cmd_build)

    p = sub.add_parser("plan", parents=[common, src], help="show the fully resolved plan; builds nothing")
    p.set_defaults(handler=cmd_plan)

    p = sub.add_parser("update", parents=[common, src], help="pin each component's `ref` to its current commit in the recipe file")
    p.add_argument("--component", action="append", default=[], help="only this component (repeatable)")
    p.set_defaults(handler=cmd_update)

    p = sub.add_parser("recipes", parents=[common, src], help="list the recipes with their descriptions")
    p.set_defaults(handler=cmd_recipes)


def cache_dir(args) -> Path:
    return (args.cache_dir or default_cache_dir()).resolve()


def recipe_from_args(args, *, pinned: bool = True) -> Recipe:
    return load_recipe(args.recipe or DEFAULT_RECIPE, args.recipes_dir, args.patches_dir, pinned=pinned)


def build_options(args, recipe: Recipe, **overrides) -> BuildOptions:
    out = (args.out or Path("dist") / recipe.name).resolve()
    opts = dict(out_dir=out, cache_dir=cache_dir(args), rewrites=parse_rewrites(args.mirror),
                use_cache=not getattr(args, "no_cache", False), fresh_sources=getattr(args, "fresh_sources", False),
                verbose=args.verbose)
    opts.update(overrides)
    return BuildOptions(**opts)


def cmd_build(args, ui) -> CommandResult:
    if args.from_lock:
        if args.recipe:
            raise UsageError("--from-lock and --recipe exclude each other", hint="the lock names its recipe")
        old = read_lock(args.from_lock)
        if any(old.wheel_path(c).exists() for c in old.components):
            verify_wheels(old)
        recipe = recipe_from_lock(old, args.patches_dir, args.recipes_dir)
    else:
        recipe = recipe_from_args(args)
    options = build_options(args, recipe)
    ui.step(f"building recipe [bold]{recipe.name}[/] → {options.out_dir}")
    lock = build_stack(recipe, options, ui)
    data = lock_summary(lock)
    if args.bundle:
        from toolchain.release.bundle import write_bundle

        bundle = write_bundle(lock, options.out_dir.parent, patches_dir=recipe.patches_dir)
        data["bundle"] = str(bundle)
    tables = ()
    if not ui.json_mode:
        table = Table(title=f"{recipe.name}: {lock.path}")
        for col in ("component", "commit", "describe", "wheel", "sha256"):
            table.add_column(col)
        for c in lock.components:
            table.add_row(c.name, c.commit[:12], c.describe, c.wheel.file, c.wheel.sha256[:16])
        tables = (table,)
    summary = f"[green]lock:[/] {lock.path}" + (f"\n[green]bundle:[/] {data['bundle']}" if "bundle" in data else "")
    return CommandResult(data, 0, summary, tables)


def lock_summary(lock: Lock) -> dict:
    return {"ok": True, "recipe": lock.recipe_name, "lock": str(lock.path),
            "pylock": str(lock.path.parent / "pylock.toml"),
            "components": [{"name": c.name, "commit": c.commit, "describe": c.describe, "wheel": c.wheel.file,
                            "sha256": c.wheel.sha256, "size": c.wheel.size, "cache-key": c.cache_key,
                            "path": str(lock.wheel_path(c))} for c in lock.components]}


def cmd_plan(args, ui) -> CommandResult:
    recipe = recipe_from_args(args)
    with make_runtime(recipe.target, ui) as runtime:
        plan = make_plan(recipe, runtime)
    data = plan_to_dict(plan)
    for comp, entry in zip(plan.components, data["components"]):
        entry["argv"], entry["build-env"] = exact_command(plan, comp, runtime.kind, cache_dir(args))
    table = Table(title=f"plan for {recipe.name} ({plan.target.runtime}, python {plan.target.python_version}, "
                        f"oneAPI {plan.toolchain.oneapi_version or 'none'})")
    for col in ("component", "commit", "patches", "command", "cache key"):
        table.add_column(col, overflow="fold")
    for c in data["components"]:
        table.add_row(c["name"], c["commit"][:12], "\n".join(f"{p['path']} {p['sha256'][:12]}" for p in c["patches"]),
                      " ".join(c["argv"]), c["cache-key"][:16])
    return CommandResult(data, 0, "", (table,))


def exact_command(plan, cp, runtime_kind: str, cache: Path) -> tuple[list[str], dict]:
    """The argv and the build env (over the target's base env) a build of `cp` runs. On the host the
    output directory is fresh per build: its random suffix shows as XXXXXXXX."""
    from toolchain.build.stack import _fill, build_env
    from toolchain.sources.trees import SourceTrees

    comp = cp.component
    container = runtime_kind != "host"
    key = SourceTrees.key(comp.commit, cp.patches, comp.subdir)
    src_root = "/toolchain/src" if container else str(cache / "trees" / key)
    src = f"{src_root}/{comp.subdir}" if comp.subdir else src_root
    out = "/toolchain/out" if container else str(cache / "work" / f"{cp.cache_key}-XXXXXXXX")
    deps = {d.name: (f"/toolchain/deps/{d.name}" if container else str(cache / "trees" / SourceTrees.key(d.commit, (), "")))
            for d in comp.fetchcontent}
    env = build_env(plan, cp, src, deps, "0", True)
    if "SOURCE_DATE_EPOCH" in env:
        env["SOURCE_DATE_EPOCH"] = "<committer date of the commit>"
    from toolchain.core.redact import redact_env

    return [_fill(a, python=plan.recipe.target.python, src=src, out=out) for a in comp.command], redact_env(env)


def cmd_update(args, ui) -> CommandResult:
    from toolchain.recipe.update import update_recipe

    recipe = recipe_from_args(args, pinned=False)  # update pins components that have no commit yet
    from toolchain.sources.mirrors import Mirrors
    from toolchain.sources.rewrites import recipe_rewrites

    mirrors = Mirrors(cache_dir(args), recipe_rewrites(recipe, cache_dir(args)) + parse_rewrites(args.mirror), ui=ui)
    changes = update_recipe(recipe, mirrors, only=args.component, ui=ui)
    summary = "\n".join(f"{c['component']}: {c['ref']} {c['old'][:12]} → {c['new'][:12]}" for c in changes if c["changed"])
    return CommandResult({"ok": True, "recipe": str(recipe.path), "changes": changes}, 0,
                         summary or "every component is already at the head of its ref")


def cmd_recipes(args, ui) -> CommandResult:
    rows = list_recipes(args.recipes_dir)
    table = Table(title="recipes")
    table.add_column("name")
    table.add_column("description")
    for name, desc in rows:
        table.add_row(name, desc)
    return CommandResult({"recipes": [{"name": n, "description": d} for n, d in rows]}, 0, "", (table,))

