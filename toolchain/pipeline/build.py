"""The pipeline in one call: recipe → plan → built components → lock, written into the output directory."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolchain.build.cache import WHEELS_DIR, shared_folder_warnings
from toolchain.build.plan import Plan, make_plan
from toolchain.build.remoteopen import open_remote
from toolchain.build.stack import BuildOptions, BuiltComponent, build_plan
from toolchain.console import UI
from toolchain.core import blobs
from toolchain.core.fs import check_dir, give_to_invoking_user
from toolchain.core.group import declare_shared_group
from toolchain.core.owned import safe_name
from toolchain.core.record import replace
from toolchain.core.regex import Regex
from toolchain.core.serial import to_table
from toolchain.core.trust import cache_for_recipe
from toolchain.errors import BuildError, TestFailed
from toolchain.lock import LOCK_NAME, Lock, assemble_lock, lock_file_says, out_files_say, read_lock, write_lock
from toolchain.pipeline.audit import remembered_audit
from toolchain.pipeline.outdir import (
    check_out_dir,
    check_out_dir_unless_building,
    holding_out_dir,
    mark_out_dir,
    previous_lock,
    pylock_agrees,
    pylock_sha256,
    undo_wheels,
    wheel_names,
)
from toolchain.recipe.model import Recipe
from toolchain.resolve.closure import Closure
from toolchain.sources.mirrors import Mirrors
from toolchain.sources.rewrites import recipe_rewrites
from toolchain.target import make_runtime

if TYPE_CHECKING:
    from toolchain.build.remotecache import RemoteCache
    from toolchain.target.base import Runtime
    from toolchain.target.baseenv import BaseEnv

STANDIN_VAR = "TOOLCHAIN_ONEAPI_STANDIN"
_WARNED: set[str] = set()  # the cache folders this process has warned of (shared_folder_warnings)


def build_stack(recipe: Recipe, options: BuildOptions, ui: UI, *, expect: Lock | None = None,
                closure: Closure | None = None) -> Lock:
    """Build `recipe` into `options.out_dir` and write its lock. With `expect` (a rebuild from that lock)
    the result must record the same components, commits and wheels: otherwise TestFailed names each
    difference and no lock is written (the rebuilt wheels stay in the out dir, to compare). `closure`: the
    closure to record instead of resolving one (verify-repro --lock: the published lock's)."""
    return build_stack_components(recipe, options, ui, expect=expect, closure=closure)[0]


def build_stack_components(recipe: Recipe, options: BuildOptions, ui: UI, *, expect: Lock | None = None,
                           closure: Closure | None = None) -> tuple[Lock, list[BuiltComponent]]:
    """build_stack, also returning each component's build result (where its wheel came from: `source`)."""
    runtime = make_runtime(recipe.target, ui)  # (entered once the out folder is held)
    check_job_environment(runtime.inherited_env())  # the job counts a build inherits from here: checked first
    remote = open_remote(recipe.cache, options.remote)  # a bad remote setting: refused before anything is written
    # a folder that is not the tool's: refused before anything is written (a build into it that runs now has
    # written its logs but not yet its marker: waited for, then checked holding the lock)
    check_out_dir_unless_building(options.out_dir)
    check_dir(options.cache_dir, "cache directory")
    declare_shared_group(recipe.cache.shared_group)
    options = replace(options, cache_dir=cache_for_recipe(options.cache_dir))  # (its group may trust the cache)
    with holding_out_dir(options.out_dir, ui):  # one build at a time writes into `out`
        return _build_into(recipe, options, ui, runtime, remote, expect, closure)


def _build_into(recipe: Recipe, options: BuildOptions, ui: UI, runtime: Runtime, remote: RemoteCache | None,
                expect: Lock | None, closure: Closure | None) -> tuple[Lock, list[BuiltComponent]]:
    """build_stack_components, holding the output folder's lock."""
    out = options.out_dir
    logs = out / "logs"
    ours = check_out_dir(out)  # (again, holding the lock: what the last build into it left)
    if options.cache_warnings and str(options.cache_dir) not in _WARNED:  # once per run (a bisect builds many times in one process)
        _WARNED.add(str(options.cache_dir))
        for warning in shared_folder_warnings(options.cache_dir):
            ui.warn(warning)
    if remote is not None and options.use_cache:
        remote.warm_up()  # while the target is probed
    with runtime:
        try:
            with ui.status(f"probing the target ({runtime.describe()}) and sourcing the toolchain"):
                plan = make_plan(recipe, runtime, log_dir=logs, memo_dir=options.cache_dir / "memo")
        except BaseException:
            if logs.is_dir():  # a failed setvars left its log: in an out dir marked as the tool's
                mark_out_dir(out, ours)
            raise
        mark_out_dir(out, ours)  # not before: a bad interpreter leaves no output
        logs.mkdir(parents=True, exist_ok=True)
        base = None
        if recipe.target.base:
            from toolchain.target.baseenv import read_base

            with ui.status(f"reading what the base image {recipe.target.base} holds"):
                base = read_base(runtime, plan.target, recipe.target.base, recipe.target.python,
                                 options.cache_dir / "memo")
        keep_files(plan, options.cache_dir)
        plan = pin_prebuilts(plan, options.cache_dir, logs, ui, expect)
        rewrites = recipe_rewrites(recipe, options.cache_dir) + tuple(options.rewrites)
        mirrors = Mirrors(options.cache_dir, rewrites, log_dir=logs, ui=ui, refresh=options.fresh_sources)
        before = wheel_names(out)
        try:
            built = build_plan(plan, runtime, mirrors, options, ui)
        except BuildError as err:
            if plan.toolchain_env.as_dict().get(STANDIN_VAR) == "1" and standin_is_cause(str(err)):
                err.add_hint(_standin_note(plan.toolchain.setvars), cause=True)
            undo_wheels(out, before, ours)
            raise
        except BaseException:
            undo_wheels(out, before, ours)
            raise
    try:
        return _finish(recipe, options, ui, plan, built, ours, expect, base, closure)
    except TestFailed:
        raise  # a rebuild that differs from its lock: the rebuilt wheels stay to compare (the marker says so)
    except BaseException:
        undo_wheels(out, before, ours)
        raise


def _finish(recipe: Recipe, options: BuildOptions, ui: UI, plan: Plan, built: list[BuiltComponent], ours: set[str],
            expect: Lock | None, base: BaseEnv | None,
            given: Closure | None = None) -> tuple[Lock, list[BuiltComponent]]:
    """The closure, the check against `expect`, the locks and the marker, after every wheel is built (`given`:
    the closure to record as it is)."""
    out, logs = options.out_dir, options.out_dir / "logs"
    path = out / LOCK_NAME
    closure = given  # recorded as given: nothing is resolved
    if closure is None and base is not None:  # the image is the environment: nothing is resolved from an index
        from toolchain.resolve.image_closure import overlay_closure

        closure = overlay_closure(base, [(b.plan.name, out / WHEELS_DIR / b.wheel.file, b.built_against)
                                         for b in built])
        for note in closure.notes:
            ui.warn(note)
    elif closure is None and options.resolve:  # (never the out folder's lock's: that file is checked, not trusted)
        from toolchain.resolve.run import resolve_built

        closure = resolve_built(recipe, plan.target, [(b.plan.name, out / WHEELS_DIR / b.wheel.file,
                                                       b.built_against) for b in built], options.cache_dir, logs, ui,
                                 view=options.index_view)
    lock = assemble_lock(plan, built, closure, base)
    # the box and the native audit, as a cold build finds them: each a remembered probe re-checking its inputs
    from toolchain.target.hostfacts import gather

    lock = replace(lock, host=to_table(gather(memo_dir=options.cache_dir / "memo"), kebab=True))
    lock = replace(lock, native=remembered_audit(lock, out, recipe, plan.toolchain_env,
                                                 options.cache_dir, ui))
    if expect is not None:
        from toolchain.pipeline.verify import rebuild_differences  # (a rebuild from a lock only)

        differences = rebuild_differences(expect, lock)
        if differences:
            mark_out_dir(out, ours | {b.wheel.file for b in built},
                          incomplete=f"the rebuild from {expect.path} does not match it; no lock was written, "
                                     "the rebuilt wheels are in wheels/ to compare")
            raise TestFailed(f"the rebuild from {expect.path} does not match it:\n"
                             + "\n".join(f"  - {d}" for d in differences),
                             hint=f"no lock was written; the rebuilt wheels are in {out / WHEELS_DIR}. The lock was "
                                  "edited, or this stack does not build reproducibly here (`toolchain verify-repro "
                                  "--lock` shows where the wheels differ)")
    memo = options.cache_dir / "memo"
    same: Lock | None = None
    if out_files_say(path, lock, memo):  # the lock and its record, byte for byte what this build writes
        same = replace(lock, path=path.resolve())
    elif (previous := previous_lock(path)) is not None and previous == lock:  # (the lock an earlier build left)
        same = previous
        if not lock_file_says(path, lock, memo):  # equal as read back, not as written (a comment, an unknown
            # key, a value read leniently edited, its mtime kept or not)
            ui.warn(f"{path} is not the lock this build writes (edited or damaged): written again")
            same = None
    pylock = pylock_sha256(out)
    if same is not None and not pylock_agrees(out, pylock):
        ui.warn(f"{out / 'pylock.toml'} does not agree with {path.name} (edited, damaged or missing): written "
                "again from it")
        same = None
    if same is None:
        write_lock(lock, out, memo_dir=options.cache_dir / "memo")
        pylock = pylock_sha256(out)
    keep = {b.wheel.file for b in built}
    for stale in ours - keep:  # (plain names: check_out_dir refused a marker naming a path)
        (out / WHEELS_DIR / safe_name(stale, "the output folder's marker")).unlink(missing_ok=True)
    mark_out_dir(out, keep, pylock=pylock)
    give_to_invoking_user(out)
    return same or read_lock(path), built


def keep_files(plan: Plan, cache_dir: Path) -> None:
    """Keep every local patch and input file the plan reads in the cache by its sha256 (`core.blobs`): the
    lock then rebuilds on this machine after its folder moved (`recipe_from_lock` finds them there)."""
    for comp in plan.components:
        files = [(p.file, p.sha256) for p in comp.patches] + [(i.file, i.sha256) for i in comp.inputs]
        for file, sha in files:
            if file is not None:
                blobs.keep(cache_dir, file, sha)


def pin_prebuilts(plan: Plan, cache_dir: Path, log_dir: Path, ui: UI, recorded: Lock | None = None) -> Plan:
    """The plan with every prebuilt `dist==version` pinned to one file (URL and sha256) from the recipe's
    [resolve] indexes and find-links. A lock rebuilt from (`recorded`) keeps its pin (a rebuild from the lock
    takes exactly its file); otherwise the pin is remembered in the cache like a resolved closure (a warm build
    asks no index; the lock in --out is checked, never trusted); `toolchain lock` pins again."""
    from toolchain.build.plan import prebuilt_plan
    from toolchain.build.prebuilt_wheels import PrebuiltFile

    comps = []
    for cp in plan.components:
        pre = cp.component.prebuilt
        if pre is None or not pre.requirement or cp.prebuilt is not None:
            comps.append(cp)
            continue
        pinned = None
        old = next((c for c in recorded.components if c.name == cp.name), None) if recorded else None
        if old is not None and old.prebuilt.get("requirement") == pre.requirement:
            pinned = PrebuiltFile(old.wheel.file, str(old.prebuilt["url"]), old.wheel.sha256, old.wheel.size,
                                  pre.requirement, str(old.prebuilt.get("index", "")))
        if pinned is None:
            pinned = PrebuiltFile(**_remembered_pin(plan, cp.name, pre.requirement, cache_dir, log_dir, ui))
        comps.append(prebuilt_plan(cp.component, pinned))
    return replace(plan, components=tuple(comps))


def _remembered_pin(plan: Plan, name: str, requirement: str, cache_dir: Path, log_dir: Path,
                    ui: UI) -> dict[str, Any]:
    """The file `requirement` pins (PrebuiltFile's fields), remembered by what it was pinned from (the
    requirement, the recipe's [resolve], the target's Python and platform) with the local find-links it read
    as inputs; a pin whose URL holds a credential is never remembered."""
    from toolchain.core.probe_memo import remembered
    from toolchain.core.redact import holds_secret
    from toolchain.core.serial import to_table
    from toolchain.resolve.closure_memo import local_inputs, target_platform, target_python

    spec = plan.recipe.resolve
    identity = {"requirement": requirement, "resolve": to_table(spec), "python": target_python(spec, plan.target),
                "platform": target_platform(spec, plan.target)}

    def compute() -> tuple[dict[str, Any], list[str] | None]:
        from toolchain.resolve.prebuilt_pin import pin_requirement

        inputs = local_inputs(spec)
        with ui.status(f"pinning the prebuilt {requirement}"):
            pf = pin_requirement(requirement, spec, plan.target, Path(cache_dir) / "resolve",
                                 log_dir / "resolve.log", name)
        found = {"file": pf.file, "url": pf.url, "sha256": pf.sha256, "size": pf.size,
                 "requirement": pf.requirement, "index": pf.index}
        return found, None if holds_secret(found) else inputs

    return remembered(Path(cache_dir) / "memo", "prebuilt-pin", identity, compute)


def check_job_environment(env: Mapping[str, str]) -> None:
    """The job variables (MAX_JOBS, ...) of the environment a host build inherits: a count that is not a
    positive integer is exit 2 naming the variable, before anything is written."""
    from toolchain.build.jobs import JOB_VARIABLES, job_count

    for name in JOB_VARIABLES:
        if env.get(name):
            job_count(env[name], f"the environment's {name}", user=True)


# What a build that failed for want of the real oneAPI says: its compilers, SYCL, its libraries. A missing
# `wheel` or `ninja`, a bad patch or a failing test is not the stand-in's doing and gets no note about it.
_NEEDS_ONEAPI = Regex(r"\b(icx|icpx|dpcpp|sycl|oneapi|cmplr_root|mkl|level[-_ ]zero|ze_loader|libsycl|"
                           r"fsycl|intel-sycl|ocloc)\b", re.I)


def standin_is_cause(message: str) -> bool:
    """Whether a build failure under the oneAPI stand-in is one the real oneAPI would not have had."""
    return bool(_NEEDS_ONEAPI.search(message))


def _standin_note(setvars: str) -> str:
    return (f"the toolchain was the oneAPI STAND-IN ({setvars}), not oneAPI: it sets CMPLR_ROOT and puts an "
            f"`icpx` that only prints a version banner on PATH; it has no `icx`, no SYCL compiler and no oneAPI "
            f"libraries. A component that compiles with them (ARK's setup.py looks for `icx`) builds only with "
            f"the real oneAPI: point [toolchain] setvars at /opt/intel/oneapi/setvars.sh")


