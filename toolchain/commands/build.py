"""`toolchain build`: build a recipe's wheels (or rebuild what a lock records) and write the lock."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from toolchain.build.remoteopen import open_remote
from toolchain.build.stack import BuildOptions, BuiltComponent, WheelSource
from toolchain.commands import options
from toolchain.console import UI, CommandResult, Grid, literal
from toolchain.core import toml as tomlio
from toolchain.core.serial import to_data, to_table
from toolchain.errors import BuildError, UsageError
from toolchain.lock import PYLOCK_NAME, Lock, LockedComponent, read_lock
from toolchain.pipeline.build import build_stack_components
from toolchain.recipe.load import Recipe, only_components
from toolchain.release import BUNDLES_DIR
from toolchain.sources.mirrors import parse_rewrites

SOURCES = {WheelSource.BUILT: "compiled", WheelSource.LOCAL_CACHE: "cached", WheelSource.REMOTE_CACHE: "downloaded",
           WheelSource.PREBUILT: "prebuilt (never compiled)"}  # the summary's words for BuiltComponent.source


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("build", help="build the recipe's wheels and write the lock",
                       description="Build each component's wheel (from the wheel cache when its inputs are "
                                   "unchanged) and write stack.lock.toml and pylock.toml beside the wheels.")
    options.add_recipe(p)
    options.add(p, "cache-dir", "mirror", "out", "remote-cache", "push",
                "remote-insecure", "no-compiler-cache", "builds-at-once", "no-resolve",
                help={"out": "output directory: wheels/, logs/, the locks and the bundle (default: dist/<recipe>); "
                             "it must be new, empty or an earlier build's output"})
    p.add_argument("--component", action="append", default=[], metavar="NAME",
                   help="build only this component (repeatable); the lock records the components built")
    p.add_argument("--from-lock", type=Path, metavar="LOCK", help="rebuild exactly what a lock records")
    p.add_argument("--no-cache", action="store_true", help="build every component again (results still stored)")
    p.add_argument("--fresh-sources", action="store_true", help="prepare source trees again from the mirrors")
    p.add_argument("--bundle", action="store_true",
                   help=f"also write a reproducible bundle (wheels, locks, SBOM, tarball) into OUT/{BUNDLES_DIR}/")
    p.add_argument("--with-deps", action="store_true",
                   help="with --bundle: put the locked dependency files into the bundle (installs air-gapped)")
    p.add_argument("--image", metavar="NAME[:TAG]",
                   help="then make the lock's image (`toolchain image`) and load it into --image-load (podman)")
    p.add_argument("--image-base", metavar="IMAGE@sha256:DIGEST",
                   help="with --image: the base for a lock that records none (an overlay's base is its own)")
    p.add_argument("--image-load", choices=("podman", "docker"), default="podman",
                   help="with --image: the engine to load it into (default podman)")
    p.set_defaults(handler=handle)


def build_options(args: argparse.Namespace, recipe: Recipe, **overrides: Any) -> BuildOptions:
    out = (args.out or Path("dist") / recipe.name).resolve()
    opts: dict[str, Any] = dict(out_dir=out, cache_dir=options.cache_dir(args), rewrites=parse_rewrites(args.mirror),
                                use_cache=not getattr(args, "no_cache", False),
                                fresh_sources=getattr(args, "fresh_sources", False), verbose=args.verbose,
                                remote=options.remote_request(args),
                                resolve=not getattr(args, "no_resolve", False),
                                compiler_cache=not getattr(args, "no_compiler_cache", False),
                                builds_at_once=getattr(args, "builds_at_once", None) or 0)
    opts.update(overrides)
    return BuildOptions(**opts)


def handle(args: argparse.Namespace, ui: UI) -> CommandResult:
    with tomlio.parses_remembered(options.cache_dir(args) / "memo"):  # (a warm build parses no TOML)
        return _build(args, ui)


def _build(args: argparse.Namespace, ui: UI) -> CommandResult:
    old: Lock | None = None
    if args.from_lock:
        if args.recipe:
            raise UsageError("--from-lock and --recipe exclude each other", hint="the lock names its recipe")
        from toolchain.pipeline.verify import recipe_from_lock  # (a rebuild from a lock only)

        old = read_lock(args.from_lock)
        recipe = recipe_from_lock(old, args.patches_dir, args.recipes_dir, options.cache_dir(args))  # the lock's parts agree, or exit 2
    else:
        recipe = options.recipe_from_args(args)
    if args.component:
        if args.from_lock:
            raise UsageError("--component and --from-lock exclude each other",
                             hint="a lock rebuilds the components it records")
        recipe = only_components(recipe, args.component)
    if args.with_deps and not args.bundle:
        raise UsageError("--with-deps needs --bundle", hint="toolchain build --bundle --with-deps")
    if args.with_deps and args.no_resolve:
        raise UsageError("--with-deps needs the resolved closure; it excludes --no-resolve")
    build = build_options(args, recipe)
    remote = open_remote(recipe.cache, build.remote)  # a bad URL is refused before anything is built
    if args.push and remote is None:
        raise UsageError("--push needs a remote cache", hint="pass --remote-cache oci://HOST[:PORT]/NAMESPACE, "
                                                         "set $TOOLCHAIN_REMOTE_CACHE or [cache] remote in the recipe")
    ui.step(f"building recipe [bold]{literal(recipe.name)}[/] → {literal(str(build.out_dir))}")
    lock, built = build_stack_components(recipe, build, ui, expect=old)  # from a lock: its hashes, or exit 1
    data = lock_summary(lock)
    if lock.recipe_partial:
        data["partial"] = list(lock.recipe_partial)
    for entry, b in zip(data["components"], built, strict=False):
        entry["source"], entry["pushed"] = b.source.value, b.pushed
    if remote is not None:
        data["remote"] = remote.summary()
        why = remote.push_off or remote.off
        if args.push == "required" and why:
            raise BuildError(f"--push: nothing more was pushed to {remote.settings.url}: {why} (the wheels and "
                             f"the lock {lock.path} were written)",
                             hint="fix what the warning above names and build again (what is cached is not "
                                  "compiled again); --push=best-effort lets a push fail with a warning")
    if args.bundle:
        from toolchain.release.bundle import write_bundle

        bundle = write_bundle(lock, build.out_dir / BUNDLES_DIR, patches_dir=recipe.all_patches_dirs,
                              with_deps=args.with_deps, cache_dir=build.cache_dir,
                              input_dirs=list(dict.fromkeys([recipe.path.parent, *(o.dir for _, o in recipe.origins)])))
        data["bundle"] = str(bundle)
        if args.with_deps:  # the closure's files are here now: their own objects are read too
            from toolchain.pipeline.audit import audit_closure

            audit_closure(lock, options.cache_dir(args), ui)
    image = ""
    if args.image:
        from toolchain.commands.image import image_and_deliver

        assert lock.path is not None
        made = argparse.Namespace(tag=args.image, base=args.image_base, python=None, engine="podman",
                                  load=args.image_load, push=False, insecure=False, oci_dir=None,
                                  cache_dir=args.cache_dir)
        data["image"], _, image = image_and_deliver(lock.path, made, ui)
        from toolchain.image.make import BASE_DIGEST
        from toolchain.lock.buildrecord import add_to_record

        made_image = data["image"]  # (the base under the name given: the build record's, never the image's)
        add_to_record(lock.path, "image", {"name": made_image["image"], "digest": made_image["digest"],
                                           "base": f"{made_image['base']}@{made_image['labels'][BASE_DIGEST]}"})
    tables = (summary_grid(f"{recipe.name}: {lock.path}", lock, built),)
    summary = f"[green]lock:[/] {literal(str(lock.path))}" + (
        f"\n[green]bundle:[/] {literal(data['bundle'])}" if "bundle" in data else "") + (f"\n{image}" if image else "")
    return CommandResult(data, 0, summary, tables)


def summary_grid(title: str, lock: Lock, built: list[BuiltComponent]) -> Grid:
    """The build summary: whole wheel names, 12 hex digits of commit and sha256, where each wheel came from
    (a wheel from a cache says when and how long its build was), and what that build cost."""
    return Grid(title, ("component", "commit", "describe", "wheel", "sha256", "from", "build cost"),
                tuple((c.name, c.commit[:12], c.describe, c.wheel.file, c.wheel.sha256[:12], provenance(b),
                       build_cost(c)) for c, b in zip(lock.components, built, strict=False)))


def provenance(b: BuiltComponent) -> str:
    """"compiled", or "cached (built in 41 min on 2026-11-30)" / "downloaded (...)" for a wheel from a cache."""
    how = SOURCES[b.source]
    if b.source is WheelSource.BUILT:
        return how
    when = f" on {time.strftime('%Y-%m-%d', time.gmtime(b.built_at))}" if b.built_at else ""
    return f"{how} (built in {duration(b.seconds)}{when})" if b.seconds else how


def duration(seconds: float) -> str:
    """41 min, 1 h 5 min, 12 s."""
    if seconds < 60:
        return f"{seconds:.0f} s" if seconds >= 1 else f"{seconds:.1f} s"
    minutes = round(seconds / 60)
    return f"{minutes // 60} h {minutes % 60} min" if minutes >= 60 else f"{minutes} min"


def lock_summary(lock: Lock) -> dict[str, Any]:
    return {"ok": True, "recipe": lock.recipe_name, "lock": str(lock.path),
            "pylock": str(lock.wheels_dir.parent / PYLOCK_NAME),
            "components": [{"name": c.name, "commit": c.commit, "describe": c.describe, "wheel": c.wheel.file,
                            "sha256": c.wheel.sha256, "size": c.wheel.size, "cache-key": c.cache_key,
                            "path": str(lock.wheel_path(c)), "jobs": c.jobs,
                            "compiler-cache": to_table(c.compiler_cache, kebab=True),
                            "metrics": to_table(c.metrics, kebab=True)}
                           for c in lock.components],
            **closure_summary(lock)}


def build_cost(c: LockedComponent) -> str:
    """One cell of the build summary: jobs, cost and the compiler cache of the build that made the wheel."""
    parts = [f"{c.jobs} jobs"] if c.jobs else []
    if c.metrics.wall_seconds:
        parts.append(c.metrics.summary())
    if c.compiler_cache.launcher != "none" or c.compiler_cache.note:
        parts.append(c.compiler_cache.summary())
    return "\n".join(parts) or "-"


def closure_summary(lock: Lock) -> dict[str, Any]:
    """The resolved dependencies as `--json` shows them (`resolved: false` when the lock has none)."""
    if lock.closure is None:
        return {"resolved": False}
    return {"resolved": True, "resolver": lock.closure.resolver, "resolved-at": lock.closure.resolved_at,
            "notes": list(lock.closure.notes),
            "dependencies": to_data(lock.closure.dists, kebab=True),
            "built-against": {c.name: [to_table(b, kebab=True) for b in c.built_against]
                              for c in lock.components if c.built_against}}

