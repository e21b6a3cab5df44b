"""`toolchain verify-repro`: prove that a stack rebuilds bit for bit.

  --recipe X   build X twice, in different directories, at different times and under a different umask,
               with the wheel cache off (the compiler cache on and shared: the second build compiles from
               a warm cache), and compare every wheel;
  --lock LOCK  rebuild what a published lock records and compare with the hashes it records (and, where its
               wheels are beside it, with the wheels themselves, file by file).

Then the last build's wheels and the lock's resolved closure (--lock: the published lock's; the rebuild does
not resolve again) are installed together into a fresh venv the way smoke installs them: every file with its
sha256 required, `--no-index --no-deps`, then `pip check` — a dependency the lock does not pin is an error.

Exit 0 when every wheel is identical and the install check passes; 1 with the differing wheels, the files
inside them and a content diff, or the install check's error. The build directories are kept on a failure
(and with --keep) so the wheels can be inspected.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolchain.commands import options
from toolchain.console import UI, CommandResult
from toolchain.core.owned import OWNED_MARKER, check_ours, claim, mark, remove_ours
from toolchain.core.record import replace
from toolchain.lock import Lock, read_lock
from toolchain.release.bundle import PATCHES_DIR
from toolchain.release.wheeldiff import (
    ReproReport,
    compare_wheel_sets,
    compare_with_hashes,
    format_report,
)

if TYPE_CHECKING:
    from toolchain.build.stack import BuildOptions
    from toolchain.resolve.closure import Closure

MIN_GAP_SECONDS = 2.0   # zip timestamps have a 2-second resolution: the second build starts in a later slot
SECOND_UMASK = 0o002    # the first build runs under the caller's umask (usually 022)
WORK_ROOT = "repro"  # the builds go under <cache dir>/repro/ by default: nothing is written where it runs (a bundle)
BUILD_DIRS = ("build-1", "build-2", "rebuild", "install-check")

# (out_dir, cache_dir) -> the lock that build wrote
Builder = Callable[[Path, Path], Lock]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("verify-repro",
                       help="build twice (or rebuild a lock) and check the wheels are identical",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    what = p.add_mutually_exclusive_group(required=True)
    options.add_recipe(p, what, help={"recipe": "build this recipe twice and compare"})
    what.add_argument("--lock", metavar="LOCK", type=Path, help="rebuild this stack.lock.toml and compare")
    p.add_argument("--work-dir", type=Path, metavar="DIR",
                   help=f"where the builds go (default: a new directory under <cache dir>/{WORK_ROOT}/, so "
                        "nothing is written where it runs, e.g. in a bundle's directory)")
    options.add(p, "cache-dir", "mirror", help={
        "cache-dir": "the build cache (default: $TOOLCHAIN_CACHE_DIR or ~/.cache/xpu-toolchain, as for `toolchain "
                     "build`): the builds take their sources from its mirror and share its compiler cache (source "
                     "trees and wheels are always made afresh per build); --work-dir's default is under it"})
    p.add_argument("--keep", action="store_true",
                   help="keep the build directories (with --image: the image made again, and its cache) even when "
                        "reproducible")
    p.add_argument("--image", metavar="REF",
                   help="with --lock: make the image of the lock again in a fresh cache and compare its digest with "
                        "REF (made by `toolchain image`; read from podman or docker, else its registry); a difference "
                        "names the first differing file of the layer (and diffoscope's report where installed)")
    p.add_argument("--base", metavar="IMAGE@sha256:DIGEST",
                   help="with --image: the base it was made over (the image names it by digest only; default: "
                        "the lock's, its recipe's [image] base, or that digest under any name podman holds it)")
    p.add_argument("--remote-insecure", "--insecure", dest="insecure", action="store_true",
                   help="with --image: its registry and the base's speak plain HTTP (a trusted private one; "
                        "--insecure: its older name)")
    p.add_argument("--no-diffoscope", action="store_true",
                   help="use the built-in per-file comparison even when diffoscope is installed")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace, ui: UI) -> CommandResult:
    if args.image:
        return _verify_image(args, ui)
    published = read_lock(args.lock) if args.lock else None
    work = _work_dir(args.work_dir, Path(args.lock).resolve().parent.name if args.lock else Path(args.recipe).stem,
                     options.resolve_cache_dir(args.cache_dir) / WORK_ROOT)
    mirror = _shared_mirror(args.cache_dir)
    from toolchain.build.cache import shared_folder_warnings

    for warning in shared_folder_warnings(options.resolve_cache_dir(args.cache_dir)):  # the user's cache, once
        ui.warn(warning)
    diffoscope = False if args.no_diffoscope else None
    built: list[Lock] = []

    def keep(lock: Lock) -> Lock:
        built.append(lock)
        return lock

    if published is not None:
        report = verify_lock(published, lambda out, cache: keep(_rebuild_lock(published, out, cache, args, ui)),
                             work, ui, mirror=mirror, use_diffoscope=diffoscope)
    else:
        report = verify_builds(lambda out, cache: keep(_build_recipe(args.recipe, out, cache, args, ui)),
                               work, ui, mirror=mirror, use_diffoscope=diffoscope)
    installed = check_install(built[-1], published, work / BUILD_DIRS[3], ui)
    ok = report.ok and installed["ok"] is not False
    kept = not ok or args.keep
    if not kept:  # what was removed is not named as if it were there
        _remove_builds(work)
        report = replace(report, label_a=_removed(report.label_a, work),
                                     label_b=_removed(report.label_b, work))
        installed = {k: v for k, v in installed.items() if k not in ("log", "python")}
    data = {"ok": ok, "mode": "lock" if args.lock else "recipe",
            "work-dir": str(work) if kept else None, **report.to_dict(), "install": installed}
    summary = format_report(report) + "\n" + _install_summary(installed) + (
        f"\nbuilds kept in {work}" if kept else "\nthe builds were removed (--keep keeps them)")
    return CommandResult(data=data, exit_code=0 if ok else 1, summary=summary)


def _verify_image(args: argparse.Namespace, ui: UI) -> CommandResult:
    """`--lock LOCK --image REF`: the image made again from the lock, in a fresh cache, against REF."""
    from toolchain.errors import UsageError
    from toolchain.image.repro import verify_image

    if not args.lock:
        raise UsageError("--image needs --lock LOCK: the lock (with its wheels beside it) the image is made again from")
    work = _work_dir(args.work_dir, "image", options.resolve_cache_dir(args.cache_dir) / WORK_ROOT)
    try:
        found = verify_image(args.lock, args.image, work, ui, insecure=args.insecure, base=args.base,
                             use_diffoscope=False if args.no_diffoscope else None)
    except UsageError:  # (bad input, e.g. a base it cannot find: nothing was made worth keeping)
        if not args.keep:
            remove_ours(work, "--work-dir")
        raise
    kept = not found["ok"] and "layer" in found  # (the two layers, to compare); nothing else is worth keeping
    if not (kept or args.keep):
        remove_ours(work, "--work-dir")
    summary = (f"[green]reproducible:[/] {args.image} is {found['given']}, rebuilt from {args.lock}" if found["ok"]
               else f"[red]NOT reproducible:[/] {args.image} is {found['given']}, rebuilt {found['rebuilt']}\n"
                    f"first difference: {found['first-difference']}"
                    + (f"\ndiffoscope: {found['diffoscope']}" if found.get("diffoscope") else "")
                    + (f"\nkept for comparing: {work} ({_size(work)}; remove it when done)" if kept or args.keep
                       else ""))
    return CommandResult(data={**found, "mode": "image", "work-dir": str(work)}, exit_code=0 if found["ok"] else 1,
                         summary=summary)


def _size(folder: Path) -> str:
    """The bytes under `folder`, for a person (a kept work folder)."""
    from toolchain.build.jobs import format_size

    return format_size(sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink()))


def check_install(rebuilt: Lock, published: Lock | None, where: Path, ui: UI) -> dict[str, Any]:
    """Install `rebuilt`'s wheels and the closure of `published` (or `rebuilt`'s own) together into a fresh
    venv at `where`, exactly as smoke does (`toolchain.smoke.install`: hashes required, no index, `pip check`).
    {"ok": None} when the lock's target cannot have its venv in that folder of this machine (a container build's
    wheels are for the container's Python)."""
    from toolchain.errors import ToolError, UsageError
    from toolchain.smoke import install
    from toolchain.smoke.session import spec_from_lock
    from toolchain.target import make_runtime

    lock = replace(rebuilt, closure=published.closure) if published is not None else rebuilt
    source = f"the closure of {published.path}" if published is not None else "its own closure"
    if lock.closure is None:
        source = "no closure: the lock pins no dependencies, so its wheels alone"
    info: dict[str, Any] = {"ok": None, "closure": source, "files": 0,
                            "dependencies": len(lock.closure.dists) if lock.closure is not None else 0}
    try:  # (a lock of a container that cannot be entered again is skipped too, as it always was)
        spec = spec_from_lock(lock)
        runtime = make_runtime(spec, ui)
        venv = runtime.venv_at(where / "venv")
    except UsageError:
        info["skipped"] = (f"the wheels were built in a {lock.target.runtime} container for its Python; install "
                           f"them there (`toolchain smoke --lock LOCK` installs them the same way)")
        return info
    shutil.rmtree(where, ignore_errors=True)
    where.mkdir(parents=True)
    log = where / "install.log"
    info["log"] = str(log)
    if published is not None and published.path is not None and lock.closure is not None:
        _seed_deps(published.path.parent, rebuilt, lock)
    ui.step(f"installing the {'rebuilt' if published is not None else 'built'} wheels and {source} into a fresh "
            f"venv (sha256 required, no index)")
    try:
        with runtime:
            env = runtime.make_venv(spec.python, venv, log)
            steps = install.install(lock, env, log)
            environment = install.environment(lock, env, log)
            install.require_environment(environment, env.python)
    except ToolError as err:
        info.update(ok=False, error=str(err), hint=err.hint or "")
        return info
    info.update(ok=True, files=len(steps), python=env.python,
                installed=[{k: r[k] for k in ("name", "role", "installed", "installed-sha256")}
                           for r in environment["locked"]])
    return info


def _seed_deps(published_dir: Path, rebuilt: Lock, lock: Lock) -> None:
    """The published lock's dependency files (fetched beside it, or bundled --with-deps) beside the rebuild,
    so the check needs no network when the published side has them (their sha256 is checked on use)."""
    from toolchain.core.fs import atomic_copy
    from toolchain.resolve.closure import DEPS_DIR

    assert lock.closure is not None
    assert rebuilt.path is not None
    for d in lock.closure.dists:
        src, dst = published_dir / DEPS_DIR / d.file, rebuilt.path.parent / DEPS_DIR / d.file
        if src.is_file() and not dst.exists():
            dst.parent.mkdir(parents=True, exist_ok=True)
            atomic_copy(src, dst)


def _removed(label: str, work: Path) -> str:
    """A report's label without the path of a build removed with `work`: "build 1 (/w/build-1/out)" -> "build 1"."""
    return label[:label.index(str(work))].rstrip(" (") if str(work) in label else label


def _install_summary(info: dict[str, Any]) -> str:
    if info["ok"] is None:
        return f"install check skipped: {info.get('skipped', '')}"
    if not info["ok"]:
        return f"install check FAILED ({info['closure']}): {info['error']}"
    return (f"install check: {info['files']} file(s), {info['closure']}, installed together with sha256 required "
            f"and no index in {info.get('python', 'a fresh venv')}")


def verify_builds(build: Builder, work: Path, ui: UI, *, mirror: Path | None = None,
                  use_diffoscope: bool | None = None) -> ReproReport:
    """Build twice with `build` (different directories, times and umask) and compare the wheels.
    Each build gets its own cache directory; `mirror` (a source mirror directory) is shared by both."""
    one, two = (work / name for name in BUILD_DIRS[:2])
    ui.step(f"first build in {one}")
    first = build(one / "out", _build_cache(one, mirror))
    time.sleep(MIN_GAP_SECONDS)
    ui.step(f"second build in {two} (umask {SECOND_UMASK:03o})")
    old_umask = os.umask(SECOND_UMASK)
    try:
        second = build(two / "out", _build_cache(two, mirror))
    finally:
        os.umask(old_umask)
    return compare_locks(first, second, use_diffoscope=use_diffoscope)


def verify_lock(published: Lock, rebuild: Builder, work: Path, ui: UI, *, mirror: Path | None = None,
                use_diffoscope: bool | None = None) -> ReproReport:
    """Rebuild `published` with `rebuild` and compare with the hashes (and wheels) it records."""
    where = work / BUILD_DIRS[2]
    ui.step(f"rebuilding {published.path} in {where}")
    rebuilt = rebuild(where / "out", _build_cache(where, mirror))
    expected = {c.wheel.file: c.wheel.sha256 for c in published.components}
    originals = {c.wheel.file: published.wheel_path(c) for c in published.components} if published.path else {}
    return compare_with_hashes(expected, _wheel_paths(rebuilt), label_a=f"lock {published.path}",
                               label_b=f"rebuild {rebuilt.path}", originals=originals,
                               use_diffoscope=use_diffoscope)


def compare_locks(a: Lock, b: Lock, *, use_diffoscope: bool | None = None) -> ReproReport:
    report = compare_wheel_sets(_wheel_paths(a), _wheel_paths(b), label_a=f"build 1 ({_where(a)})",
                                label_b=f"build 2 ({_where(b)})", use_diffoscope=use_diffoscope)
    if a.normalizations != b.normalizations:
        report = replace(report, notes=(*report.notes, f"the builds needed different normalizations: {list(a.normalizations)} vs {list(b.normalizations)}"))
    return report


def _wheel_paths(lock: Lock) -> list[Path]:
    return [lock.wheel_path(c) for c in lock.components]


def _where(lock: Lock) -> str:
    return str(lock.path.parent) if lock.path else "?"


def _work_dir(requested: Path | None, label: str, default_root: Path) -> Path:
    """The folder the builds go in, the tool's own (core/owned.py): --work-dir when new, empty or made by an
    earlier verify-repro (else exit 2, nothing touched), or a new one under `default_root`."""
    if requested is not None:
        return claim(Path(os.path.abspath(requested)), "--work-dir").resolve()
    default_root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f"{label}-", dir=default_root)).resolve()
    mark(work)
    return work


def _remove_builds(work: Path) -> None:
    """Remove what verify-repro made in `work` (and `work` itself when that leaves it empty)."""
    check_ours(work, "--work-dir")
    for name in BUILD_DIRS:
        shutil.rmtree(work / name, ignore_errors=True)
    with contextlib.suppress(OSError):
        if sorted(os.listdir(work)) == [OWNED_MARKER]:
            (work / OWNED_MARKER).unlink()
        work.rmdir()


def _build_cache(where: Path, mirror: Path | None) -> Path:
    """Empty `where` and make a cache directory for one build in it (so its source trees are in a directory
    of their own), whose mirror is `mirror` when given (no second clone of the sources)."""
    shutil.rmtree(where, ignore_errors=True)
    cache = where / "cache"
    cache.mkdir(parents=True, exist_ok=True)
    if mirror is not None:
        mirror.mkdir(parents=True, exist_ok=True)
        link = _mirror_dir(cache)
        if not link.exists():
            link.symlink_to(mirror, target_is_directory=True)
    return cache


# The build spine (toolchain.build.stack, .commands, .sources) is imported only when a build runs.
def _mirror_dir(cache_dir: Path) -> Path:
    from toolchain.sources.mirrors import Mirrors

    return Mirrors(cache_dir).root


def _shared_mirror(cache_dir: Path | None) -> Path:
    return _mirror_dir(options.resolve_cache_dir(cache_dir))


def _options(out_dir: Path, cache_dir: Path, args: argparse.Namespace, *, resolve: bool = True) -> BuildOptions:
    from toolchain.build.ccache import DATA_DIR
    from toolchain.build.stack import BuildOptions
    from toolchain.sources.mirrors import parse_rewrites

    # The compiler cache is the user's, shared by both builds: the second one compiles from a warm cache, so a
    # cache that changed an output would show here as a difference.
    shared = options.resolve_cache_dir(args.cache_dir) / DATA_DIR
    return BuildOptions(out_dir=out_dir, cache_dir=cache_dir, rewrites=parse_rewrites(args.mirror),
                        use_cache=False, fresh_sources=True, verbose=args.verbose, compiler_cache_dir=shared,
                        resolve=resolve, cache_warnings=False)  # (its scratch; handle() checks the user's cache)


def _build_recipe(recipe: str, out_dir: Path, cache_dir: Path, args: argparse.Namespace, ui: UI) -> Lock:
    from toolchain.pipeline.build import build_stack
    from toolchain.recipe.load import load_recipe

    return build_stack(load_recipe(recipe, args.recipes_dir, args.patches_dir), _options(out_dir, cache_dir, args), ui)


def _rebuild_lock(lock: Lock, out_dir: Path, cache_dir: Path, args: argparse.Namespace, ui: UI) -> Lock:
    from toolchain.pipeline.build import build_stack
    from toolchain.pipeline.verify import recipe_from_lock

    bundled = lock.path.parent / PATCHES_DIR if lock.path else None  # a bundle carries its patches
    patches_dir = args.patches_dir or ([bundled] if bundled and bundled.is_dir() else None)
    # a file the lock names is looked up as `build --from-lock` does, in the user's cache too (where every build
    # keeps the files it read): the scratch cache builds, it keeps nothing yet
    recipe = recipe_from_lock(lock, patches_dir, args.recipes_dir, options.resolve_cache_dir(args.cache_dir))
    # the published closure is what is checked (check_install, and the native audit of the rebuilt lock):
    # resolving again would ask today's index
    return build_stack(recipe, _options(out_dir, cache_dir, args, resolve=False), ui, closure=_closure_here(lock))


def _closure_here(lock: Lock) -> Closure | None:
    """The published closure for the rebuild's lock, each dependency file already beside the published lock
    (fetched there, or bundled --with-deps) named by its path: the rebuild's native audit reads them with no
    network, as the install check does (`_seed_deps`; it installs the published closure itself)."""
    from toolchain.resolve.closure import DEPS_DIR

    if lock.closure is None or lock.path is None:
        return lock.closure
    here = lock.path.parent / DEPS_DIR
    return replace(lock.closure, dists=tuple(
        replace(d, url=(here / d.file).resolve().as_uri()) if (here / d.file).is_file() else d
        for d in lock.closure.dists))
