"""Plan → built components → lock. Components build in dependency order; each result comes from the wheel
cache when its key is there, otherwise from a prepared source tree built inside the target runtime."""

from __future__ import annotations

import contextlib
import shlex
import shutil
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from .buildreqs import check_build_requires
from .cache import WheelCache, copy_wheel
from .errors import BuildError, ToolError
from .fsutil import give_to_invoking_user
from .lock import LOCK_NAME, WHEELS_DIR, Lock, LockedComponent, PatchRef, WheelRef, read_lock, write_lock
from .plan import ComponentPlan, Plan, make_plan
from .recipe import Recipe
from .redact import redact_env
from .run import CommandFailed, merge_env
from .runtime import make_runtime
from .sources import Mirrors, Rewrite
from .trees import SourceTrees


@dataclass(frozen=True)
class BuildOptions:
    out_dir: Path
    cache_dir: Path
    rewrites: tuple[Rewrite, ...] = ()
    use_cache: bool = True       # False: build everything again (verify-repro), still storing results
    fresh_sources: bool = False  # True: prepare source trees again instead of reusing them
    deterministic: bool = True
    verbose: bool = False


@dataclass(frozen=True)
class BuiltComponent:
    plan: ComponentPlan
    describe: str
    wheel: WheelRef
    seconds: float
    cached: bool
    log: Path
    normalizations: tuple[str, ...] = ()


def recipe_rewrites(recipe: Recipe, cache_dir: Path) -> tuple[Rewrite, ...]:
    from .sources import _as_url

    rewrites = [Rewrite(k, _as_url(v if "://" in v else str((recipe.path.parent / v).resolve()) + ("/" if v.endswith("/") else "")))
                for k, v in recipe.mirrors]
    if recipe.demo:
        from .demo import demo_rewrite

        rewrites.append(demo_rewrite(cache_dir))
    return tuple(rewrites)


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


def build_plan(plan: Plan, runtime, mirrors: Mirrors, options: BuildOptions, ui) -> list[BuiltComponent]:
    cache = WheelCache(options.cache_dir)
    trees = SourceTrees(options.cache_dir, mirrors)
    wheels_dir = options.out_dir / WHEELS_DIR
    wheels_dir.mkdir(parents=True, exist_ok=True)
    built = []
    with ui.progress(f"building {plan.recipe.name}", total=len(plan.components)) as bar:
        for cp in plan.components:
            bar.update(description=f"{cp.name} @ {cp.component.commit[:12]}")
            try:
                built.append(build_component(plan, cp, runtime, mirrors, trees, cache, wheels_dir, options, ui))
            except ToolError as err:
                err.component = getattr(err, "component", None) or cp.name  # which component failed
                raise
            bar.update(advance=1)
    return built


def build_component(plan: Plan, cp: ComponentPlan, runtime, mirrors: Mirrors, trees: SourceTrees,
                    cache: WheelCache, wheels_dir: Path, options: BuildOptions, ui) -> BuiltComponent:
    comp = cp.component
    where = f"{plan.recipe.path.name}: components.{comp.name}"
    log = options.out_dir / "logs" / f"{comp.name}.log"
    log.write_text(f"# {comp.name} {comp.url} @ {comp.commit}\n# cache key {cp.cache_key}\n")
    started = time.monotonic()
    entry = cache.get(cp.cache_key) if options.use_cache else None
    cached = entry is not None
    if entry is None:
        mirrors.ensure(comp.url, comp.commit, where=f"{where}.commit")
        for dep in comp.fetchcontent:
            mirrors.ensure(dep.url, dep.commit, where=f"{where}.fetchcontent {dep.name}")
        with cache.building(cp.cache_key):
            entry = cache.get(cp.cache_key) if options.use_cache else None
            cached = entry is not None
            if entry is None:
                _build_into_cache(plan, cp, runtime, mirrors, trees, cache, options, log, ui)
                entry = cache.get(cp.cache_key)
                assert entry is not None
    describe = entry.meta.get("describe") or mirrors.describe(comp.url, comp.commit)
    if cached:
        with open(log, "a") as f:
            f.write(f"# wheel cache hit: {entry.wheel.name} (built in {entry.meta.get('build_seconds', 0):.1f}s)\n")
        ui.info(f"  [green]✓[/] {comp.name}: cached {entry.wheel.name}")
    else:
        ui.info(f"  [green]✓[/] {comp.name}: built {entry.wheel.name} in {time.monotonic() - started:.1f}s")
    copy_wheel(entry, wheels_dir)
    return BuiltComponent(cp, describe, WheelRef(entry.wheel.name, entry.sha256, entry.size),
                          float(entry.meta.get("build_seconds", 0.0)), cached, log,
                          tuple(entry.meta.get("normalizations", ())))


def _build_into_cache(plan, cp: ComponentPlan, runtime, mirrors, trees, cache, options, log, ui) -> None:
    comp = cp.component
    what = f"{comp.name}@{comp.commit[:12]}"
    work = Path(options.cache_dir) / "work"
    for stale in work.glob(f"{cp.cache_key}-*"):  # left by a builder killed holding this key's lock (we hold it)
        shutil.rmtree(stale, ignore_errors=True)
    out_tmp = work / f"{cp.cache_key}-{uuid.uuid4().hex[:8]}"
    out_tmp.mkdir(parents=True)
    started = time.monotonic()
    try:
        with contextlib.ExitStack() as stack:
            tree = stack.enter_context(trees.tree(comp.url, comp.commit, cp.patches, subdir=comp.subdir,
                                                  what=what, log=log, fresh=options.fresh_sources))
            deps = {d.name: stack.enter_context(trees.tree(d.url, d.commit, what=f"{d.name}@{d.commit[:12]}",
                                                           log=log)) for d in comp.fetchcontent}
            ws = stack.enter_context(runtime.workspace(tree, out_tmp, deps))
            src = f"{ws.src}/{comp.subdir}".rstrip("/") if comp.subdir else ws.src
            epoch = mirrors.commit_info(comp.url, comp.commit)["epoch"]
            env = build_env(plan, cp, src, ws.deps, epoch, options.deterministic)
            argv = [_fill(a, python=plan.recipe.target.python, src=src, out=ws.out) for a in comp.command]
            check_build_requires(ws, plan.recipe.target.python, src, what, log)
            ui.step(f"building {what} in the {runtime.describe()} (log: {log})")
            try:
                ws.run(argv, env=env, cwd=src, log=log, verbose=options.verbose)
            except CommandFailed as exc:
                raise BuildError(f"building {what} failed (exit {exc.returncode}): {shlex.join(argv)}\n"
                                 f"  log: {log}\n  last lines:\n" + "\n".join("    " + line for line in exc.tail.splitlines()),
                                 hint="read the log; `toolchain plan` shows the exact env and command") from None
        wheel = _the_wheel(out_tmp, comp, log)
        normalizations = _normalize(wheel, epoch) if options.deterministic else []
        cache.put(cp.cache_key, wheel, {
            "component": comp.name, "commit": comp.commit, "describe": mirrors.describe(comp.url, comp.commit), "build_seconds": round(time.monotonic() - started, 3),
            "normalizations": normalizations, "env": redact_env(dict(cp.env)), "command": list(comp.command),
        }, log=log)
    finally:
        shutil.rmtree(out_tmp, ignore_errors=True)


def build_env(plan: Plan, cp: ComponentPlan, src: str, deps: dict[str, str], epoch: str,
              deterministic: bool) -> dict[str, str | None]:
    """toolchain diff < recipe env < component env < version override < determinism < pre-fetched deps."""
    env = merge_env({}, plan.toolchain_env.as_dict(), dict(cp.env))
    env.update({k: None for k, v in plan.toolchain_env.diff if v is None})
    if deterministic:
        from .determinism import deterministic_env

        for k, v in deterministic_env(src, cp.name, int(epoch)).items():
            env[k] = v if k not in ("CFLAGS", "CXXFLAGS") or not env.get(k) else f"{env[k]} {v}"
    cmake_args = [f"-D{d.cmake_var}={deps[d.name]}" for d in cp.component.fetchcontent if not d.env]
    for d in cp.component.fetchcontent:
        if d.env:
            env[d.env] = deps[d.name]
    if cmake_args:
        env["CMAKE_ARGS"] = " ".join(filter(None, [env.get("CMAKE_ARGS") or "", *cmake_args]))
    return env


def _fill(arg: str, **values: str) -> str:
    for k, v in values.items():
        arg = arg.replace("{" + k + "}", v)
    return arg


def _the_wheel(out: Path, comp, log: Path) -> Path:
    from packaging.utils import canonicalize_name, parse_wheel_filename

    wheels = sorted(out.glob("*.whl"))
    if len(wheels) != 1:
        raise BuildError(f"building {comp.name} produced {len(wheels)} wheels in {out} "
                         f"({', '.join(w.name for w in wheels) or 'none'}); expected exactly one",
                         hint=f"the build command must write one wheel to {{out}} (pass --no-deps to pip wheel); log: {log}")
    name = parse_wheel_filename(wheels[0].name)[0]
    if comp.dist and canonicalize_name(comp.dist) != name:
        raise BuildError(f"{comp.name}: the wheel is {wheels[0].name} (distribution {name}), "
                         f"but the recipe says dist = {comp.dist!r}",
                         hint="fix `dist` in the recipe or the subdirectory that is built")
    return wheels[0]


def _normalize(wheel: Path, epoch: str) -> list[str]:
    from .wheelnorm import normalize_wheel

    return list(normalize_wheel(wheel, int(epoch)))


def wheel_version(filename: str) -> str:
    """The version field of a wheel file name (PEP 427: name-version-...); names are already validated."""
    return filename.split("-")[1] if filename.count("-") >= 4 else ""


def assemble_lock(plan: Plan, built: list[BuiltComponent]) -> Lock:
    comps = []
    for b in built:
        c = b.plan.component
        comps.append(LockedComponent(
            name=c.name, url=c.url, ref=c.ref, commit=c.commit, describe=b.describe, subdir=c.subdir,
            after=c.after, dist=c.dist, import_name=c.import_name,
            version=wheel_version(b.wheel.file), install_args=c.install_args,
            patches=tuple(PatchRef(p.path, p.sha256) for p in b.plan.patches),
            env=redact_env(dict(b.plan.env)), command=c.command, cache_key=b.plan.cache_key,
            build_seconds=b.seconds, wheel=b.wheel,
            fetchcontent=tuple({"name": d.name, "url": d.url, "commit": d.commit} for d in c.fetchcontent)))
    norms = sorted({n for b in built for n in b.normalizations})
    return Lock(recipe_name=plan.recipe.name, recipe_path=str(plan.recipe.path), recipe_sha256=plan.recipe.sha256,
                recipe_text=plan.recipe.text, toolchain=plan.toolchain, target=plan.target,
                smoke=plan.recipe.smoke.raw, components=tuple(comps), normalizations=tuple(norms))


__all__ = ["BuildOptions", "BuiltComponent", "build_stack", "LOCK_NAME"]
