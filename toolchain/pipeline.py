"""The pipeline in one call: recipe → plan → built components → lock, and the way back from a lock to the
recipe it records (with every recorded hash checked).

An output directory is the tool's own: it must be new, empty, or one an earlier build wrote (it holds the
`.toolchain-out` marker, or a lock of an older version). The marker records the wheels the tool put in
`wheels/`; only those are ever removed (a wheel the user dropped there stays)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from toolchain.build.cache import WHEELS_DIR, shared_folder_warnings
from toolchain.build.plan import Plan, component_env, make_plan
from toolchain.build.remoteopen import open_remote
from toolchain.build.stack import BuildOptions, BuiltComponent, build_plan
from toolchain.console import UI
from toolchain.core import blobs
from toolchain.core.fs import atomic_write_text, give_to_invoking_user, sha256_bytes
from toolchain.core.redact import redact_argv, redact_text
from toolchain.core.regex import Regex
from toolchain.core.serial import to_table
from toolchain.errors import BuildError, RecipeError, TestFailed, UsageError
from toolchain.lock import (
    LOCK_NAME,
    Lock,
    LockedComponent,
    assemble_lock,
    locked_env,
    read_lock,
    wheel_problems,
    write_lock,
)
from toolchain.recipe.load import default_recipes_dir, load_recipe_text, origins_from_record, patches_dirs_of
from toolchain.recipe.model import Prebuilt, Recipe, Recorded
from toolchain.recipe.validate import MissingFiles
from toolchain.resolve.closure import DEPS_DIR, Closure
from toolchain.resolve.native import WheelAudit
from toolchain.sources.mirrors import Mirrors
from toolchain.sources.rewrites import recipe_rewrites
from toolchain.target import inherits_environment, make_runtime
from toolchain.target.oneapi import ToolchainEnv

if TYPE_CHECKING:
    from toolchain.target.baseenv import BaseEnv

OUT_MARKER = ".toolchain-out"
STANDIN_VAR = "TOOLCHAIN_ONEAPI_STANDIN"


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
    out = options.out_dir
    logs = out / "logs"
    if inherits_environment(recipe.target):  # the build inherits this environment: its job counts checked first
        check_job_environment(os.environ)
    remote = open_remote(recipe.cache, options.remote)  # a bad remote setting: refused before anything is written
    ours = check_out_dir(out)
    check_dir(options.cache_dir, "cache directory")
    for warning in shared_folder_warnings(options.cache_dir):
        ui.warn(warning)
    if remote is not None and options.use_cache:
        remote.warm_up()  # while the target is probed
    with make_runtime(recipe.target, ui) as runtime:
        try:
            with ui.status(f"probing the target ({runtime.describe()}) and sourcing the toolchain"):
                plan = make_plan(recipe, runtime, log_dir=logs, memo_dir=options.cache_dir / "memo")
        except BaseException:
            if out.is_dir():  # a failed setvars left its log: in an out dir marked as the tool's
                _mark_out_dir(out, ours)
            raise
        _mark_out_dir(out, ours)  # not before: a bad interpreter leaves no output
        logs.mkdir(parents=True, exist_ok=True)
        base = None
        if recipe.target.base:
            from toolchain.target.baseenv import read_base

            with ui.status(f"reading what the base image {recipe.target.base} holds"):
                base = read_base(runtime, plan.target, recipe.target.base, recipe.target.python,
                                 options.cache_dir / "memo")
        keep_files(plan, options.cache_dir)
        previous = _previous_lock(out / LOCK_NAME)  # read once: the build writes no lock before _finish
        plan = pin_prebuilts(plan, options.cache_dir, logs, ui, expect or previous)
        rewrites = recipe_rewrites(recipe, options.cache_dir) + tuple(options.rewrites)
        mirrors = Mirrors(options.cache_dir, rewrites, log_dir=logs, ui=ui, refresh=options.fresh_sources)
        before = _wheel_names(out)
        try:
            built = build_plan(plan, runtime, mirrors, options, ui)
        except BuildError as err:
            if plan.toolchain_env.as_dict().get(STANDIN_VAR) == "1" and standin_is_cause(str(err)):
                err.add_hint(_standin_note(plan.toolchain.setvars), cause=True)
            _undo_wheels(out, before, ours)
            raise
        except BaseException:
            _undo_wheels(out, before, ours)
            raise
    try:
        return _finish(recipe, options, ui, plan, built, ours, expect, base, previous, closure)
    except TestFailed:
        raise  # a rebuild that differs from its lock: the rebuilt wheels stay to compare (the marker says so)
    except BaseException:
        _undo_wheels(out, before, ours)
        raise


def _finish(recipe: Recipe, options: BuildOptions, ui: UI, plan: Plan, built: list[BuiltComponent], ours: set[str],
            expect: Lock | None, base: BaseEnv | None, previous: Lock | None,
            given: Closure | None = None) -> tuple[Lock, list[BuiltComponent]]:
    """The closure, the check against `expect`, the locks and the marker, after every wheel is built
    (`previous`: the lock an earlier build left in the out dir; `given`: the closure to record as it is)."""
    out, logs = options.out_dir, options.out_dir / "logs"
    path = out / LOCK_NAME
    closure = given  # recorded as given: nothing is resolved
    if closure is None and base is not None:  # the image is the environment: nothing is resolved from an index
        from toolchain.resolve.image_closure import overlay_closure

        closure = overlay_closure(base, [(b.plan.name, out / WHEELS_DIR / b.wheel.file, b.built_against)
                                         for b in built])
        for note in closure.notes:
            ui.warn(note)
    elif closure is None and options.resolve:
        closure = _recorded_closure(previous, plan, built)
        if closure is not None:  # nothing it was resolved from changed: a warm no-op starts no resolver
            for note in closure.notes:
                ui.warn(note)
        else:
            from toolchain.resolve.run import resolve_built

            closure = resolve_built(recipe, plan.target, [(b.plan.name, out / WHEELS_DIR / b.wheel.file,
                                                           b.built_against) for b in built], options.cache_dir, logs, ui)
    lock = assemble_lock(plan, built, closure, base)
    if previous is not None and previous.host and dataclasses.replace(previous, native=(), host={}) == lock:
        lock = previous  # nothing changed: the box and the native audit it records stand (a warm no-op);
        # a lock of an older version (no [host]) is audited and written once
    else:
        from toolchain.target.hostfacts import gather

        lock = dataclasses.replace(lock, host=to_table(gather(memo_dir=options.cache_dir / "memo"), kebab=True),
                                   native=audit_native(lock, out, recipe, plan.toolchain_env, options.cache_dir, ui))
    if expect is not None:
        differences = rebuild_differences(expect, lock)
        if differences:
            _mark_out_dir(out, ours | {b.wheel.file for b in built},
                          incomplete=f"the rebuild from {expect.path} does not match it; no lock was written, "
                                     "the rebuilt wheels are in wheels/ to compare")
            raise TestFailed(f"the rebuild from {expect.path} does not match it:\n"
                             + "\n".join(f"  - {d}" for d in differences),
                             hint=f"no lock was written; the rebuilt wheels are in {out / WHEELS_DIR}. The lock was "
                                  "edited, or this stack does not build reproducibly here (`toolchain verify-repro "
                                  "--lock` shows where the wheels differ)")
    same = previous if previous is not None and previous == lock else None
    pylock = _pylock_sha256(out)
    if same is not None and not _pylock_agrees(out, pylock):
        ui.warn(f"{out / 'pylock.toml'} does not agree with {path.name} (edited, damaged or missing): written "
                "again from it")
        same = None
    if same is None:
        write_lock(lock, out)
        pylock = _pylock_sha256(out)
    keep = {b.wheel.file for b in built}
    for stale in ours - keep:
        (out / WHEELS_DIR / stale).unlink(missing_ok=True)
    _mark_out_dir(out, keep, pylock=pylock)
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
    [resolve] indexes and find-links. A lock that records the same requirement keeps its pin (a rebuild from
    the lock takes exactly its file; a warm build asks no index); `toolchain lock` pins again."""
    import dataclasses

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
            from toolchain.resolve.prebuilt_pin import pin_requirement

            with ui.status(f"pinning the prebuilt {pre.requirement}"):
                pinned = pin_requirement(pre.requirement, plan.recipe.resolve, plan.target,
                                         Path(cache_dir) / "resolve", log_dir / "resolve.log", cp.name)
        comps.append(prebuilt_plan(cp.component, pinned))
    return dataclasses.replace(plan, components=tuple(comps))


def check_job_environment(env: Mapping[str, str]) -> None:
    """The job variables (MAX_JOBS, ...) of the environment a host build inherits: a count that is not a
    positive integer is exit 2 naming the variable, before anything is written."""
    from toolchain.build.jobs import JOB_VARIABLES, job_count

    for name in JOB_VARIABLES:
        if env.get(name):
            job_count(env[name], f"the environment's {name}", user=True)


def _wheel_names(out: Path) -> set[str]:
    wheels = out / WHEELS_DIR
    return {p.name for p in wheels.iterdir()} if wheels.is_dir() else set()


def _undo_wheels(out: Path, before: set[str], ours: set[str]) -> None:
    """A failed build leaves wheels/ as it found it: the wheels it put there (names that were not there
    before) are removed; the marker keeps listing the last finished build's wheels (`ours`)."""
    for name in _wheel_names(out) - before:
        if name.endswith(".whl"):
            (out / WHEELS_DIR / name).unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        _mark_out_dir(out, ours)


def _pylock_sha256(out: Path) -> str:
    from toolchain.lock import PYLOCK_NAME

    try:
        return sha256_bytes((out / PYLOCK_NAME).read_bytes())
    except OSError:
        return ""


def _pylock_agrees(out: Path, pylock: str) -> bool:
    """pylock.toml (sha256 `pylock`) is the file written with this lock (its sha256 is the one the marker
    recorded when both were written): an edited, damaged or missing one is written again. A digest, not the
    text made again, so a warm no-op imports no TOML writer."""
    recorded = _marker(_marker_text(out)).get("pylock-sha256")
    return bool(recorded) and recorded == pylock


def _marker_text(out: Path) -> str:
    try:
        return (out / OUT_MARKER).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return ""


def _marker(text: str) -> dict[str, object]:
    try:
        doc = json.loads(text)
    except ValueError:
        return {}
    return doc if isinstance(doc, dict) else {}


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


def check_out_dir(out: Path) -> set[str]:
    """Refuse an output directory that is not the tool's own (nothing is written); returns the names of the
    wheels the tool wrote there before (the only ones it may remove)."""
    check_dir(out, "output directory")
    if not out.is_dir():
        return set()
    marker = out / OUT_MARKER
    if marker.is_file():
        try:
            return {str(w) for w in json.loads(marker.read_text(encoding="utf-8")).get("wheels", [])}
        except (ValueError, AttributeError, UnicodeDecodeError, OSError):
            return set()
    if (out / LOCK_NAME).is_file():  # written by a version of the tool before the marker
        try:
            return {c.wheel.file for c in read_lock(out / LOCK_NAME).components}
        except Exception:
            return set()
    entries = sorted(p.name for p in out.iterdir())
    if entries:
        shown = ", ".join(entries[:5]) + (", ..." if len(entries) > 5 else "")
        raise UsageError(f"output directory {out} is not empty and was not written by toolchain "
                         f"(it holds {shown}); nothing was written",
                         hint="pass --out a new or empty directory (or the output of an earlier build)")
    return set()


def _mark_out_dir(out: Path, wheels: set[str], *, incomplete: str = "", pylock: str | None = None) -> None:
    """The marker: the tool's output, the wheels it wrote; `incomplete`: why the last build left no lock;
    `pylock`: the sha256 of the pylock.toml written with the lock (kept from the marker when not given)."""
    out.mkdir(parents=True, exist_ok=True)
    current = _marker_text(out)
    old = _marker(current)
    doc: dict[str, object] = {"written-by": "toolchain build: wheels/, logs/, the locks and bundles/ are its output",
                              "wheels": sorted(wheels)}
    if incomplete:
        doc["incomplete"] = incomplete
    digest = pylock if pylock is not None else old.get("pylock-sha256")
    if digest:
        doc["pylock-sha256"] = digest
    text = json.dumps(doc, indent=2) + "\n"
    if current == text:
        return  # a warm no-op writes nothing
    atomic_write_text(out / OUT_MARKER, text)


def check_dir(path: Path, what: str, *, writable: bool = True) -> None:
    """`path` is, or can be made as, a directory (this process can write, when `writable`): else a usage
    error (exit 2) naming `what` (a flag, or what the directory is for)."""
    for p in (path, *path.parents):
        if not p.exists():
            continue
        if not p.is_dir():
            raise UsageError(f"{what} {path}: {p} is a file, not a directory", hint=f"pass a directory as {what}")
        if writable and not os.access(p, os.W_OK | os.X_OK):
            why = "read-only file system" if _read_only(p) else "permission denied"
            raise UsageError(f"{what} {path}: cannot write {p} ({why})",
                             hint="pass a directory on a file system you can write to")
        return


def _read_only(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def _previous_lock(path: Path) -> Lock | None:
    """The lock an earlier build left at `path`, if it reads back whole: when it records exactly what this build
    makes (and its pylock.toml agrees), a warm no-op rewrites nothing."""
    try:
        return read_lock(path) if path.is_file() else None
    except Exception:
        return None


def _recorded_closure(previous: Lock | None, plan: Plan, built: list[BuiltComponent]) -> Closure | None:
    """The closure `previous` records, when it was resolved from exactly what this build has: the same recipe
    (its [resolve] table), target and built wheels (names, sha256, what they were built against) — the lock
    this build would write with that closure is `previous` itself. `toolchain lock` resolves again on demand."""
    if previous is None or previous.closure is None:
        return None
    bare = dataclasses.replace(previous, native=(), host={})
    return previous.closure if assemble_lock(plan, built, previous.closure) == bare else None


def audit_native(lock: Lock, out: Path, recipe: Recipe, toolchain: ToolchainEnv | None, cache_dir: Path,
                 ui: UI, *, read_deps: bool = False) -> tuple[WheelAudit, ...]:
    """The native audit of the built and prebuilt wheels of `lock` (their ELF objects; cached by sha256) and of
    the closure's (their file lists, read from the zip central directory; with `read_deps` their objects too,
    fetched), then a verdict on each needed soname (toolchain.resolve.verdicts, the shipped policy with the
    recipe's [native]): provided by the lock, setvars' library path (`toolchain`: the captured setvars
    environment; None: not sourced) or the base image; expected from the run host (recorded per wheel as
    host-provides); or missing. Raises NativeABIError for a missing soname an extension module of a component
    loads (at most 10 lines; all of it in logs/native.log); warns of the others and of compiler stamps other
    than the captured oneAPI's."""
    from toolchain.resolve import native, verdicts
    from toolchain.resolve.policy import policy_for

    built = [(out / WHEELS_DIR / c.wheel.file, c.wheel.sha256, f"{c.dist or c.name} {c.version}",
              "prebuilt" if c.prebuilt else "built") for c in lock.components]
    deps = lock.closure.dists if lock.closure is not None else ()
    with ui.status(f"auditing the shared libraries of {len(built) + len(deps)} wheels"):
        audits = native.audit_wheels(built, deps, cache_dir, out / DEPS_DIR, out / "logs" / "native-fetch.log",
                                     read_deps=read_deps)
    if not any(a.objects for a in audits):
        return tuple(audits)
    if lock.closure is None and lock.base is None:
        ui.warn("the lock pins no closure (--no-resolve): the sonames its wheels need are recorded, not checked "
                "(`toolchain lock --lock LOCK` resolves and checks them)")
        return tuple(audits)
    dirs = native.library_dirs(toolchain.as_dict()) if toolchain is not None else []
    with make_runtime(recipe.target, ui) as runtime:
        providers = native.target_providers(runtime, recipe.target.python, dirs,
                                            lock.toolchain.oneapi_version if toolchain is not None else "",
                                            installed=lock.base is not None,  # (the image's stack)
                                            memo_dir=cache_dir / "memo" if runtime.sees_host_paths else None)
    policy = policy_for(recipe.native)
    report = verdicts.check(audits, providers, policy, at="build")
    log = out / "logs" / "native.log"
    atomic_write_text(log, verdicts.full_log(report, "the lock"))
    for stamp in report.stamps:
        ui.warn(stamp)
    verdicts.raise_for(report, "the lock", policy, log)
    for line in verdicts.capped([n.line() for n in report.warnings], log):
        ui.warn(line)
    host = report.of("host")
    if host:
        ui.info(f"native libraries: {len(report.of('provided'))} provided by the lock; "
                + verdicts.host_line(host))
    return verdicts.with_host_provides(audits, report)


def audit_closure(lock: Lock, cache_dir: Path, ui: UI) -> None:
    """Where the closure's files were fetched anyway (a bundle made --with-deps): their own shared objects are
    read and each soname they need gets a verdict (the lock's recorded policy); a missing one is a warning,
    listed once (nothing a component builds loads them at import), all of it in logs/native-closure.log."""
    from toolchain.resolve import native, verdicts
    from toolchain.resolve.policy import policy_of_recipe_text

    if lock.closure is None or lock.path is None:
        return
    out = lock.path.parent
    built = [(out / WHEELS_DIR / c.wheel.file, c.wheel.sha256, f"{c.dist or c.name} {c.version}",
              "prebuilt" if c.prebuilt else "built") for c in lock.components]
    audits = native.audit_wheels(built, lock.closure.dists, cache_dir, out / DEPS_DIR,
                                 out / "logs" / "native-fetch.log")
    deps = [a for a in audits if a.role == "dependency"]
    report = verdicts.check(audits, native.Providers(), policy_of_recipe_text(lock.recipe_text), at="build")
    mine = {a.dist or a.wheel for a in deps}
    warnings = [n for n in report.warnings if set(n.wheels) <= mine]
    log = out / "logs" / "native-closure.log"
    atomic_write_text(log, verdicts.full_log(report, "the closure's own objects"))
    for line in verdicts.capped([n.line() for n in warnings], log):
        ui.warn(line)
    ui.info(f"native libraries of the closure: {sum(len(a.objects) for a in deps)} shared object(s) in "
            f"{len(deps)} wheel(s) read, {len(warnings)} soname(s) missing (log: {log})")


def rebuild_differences(expected: Lock, rebuilt: Lock) -> list[str]:
    """What a rebuild from `expected` recorded differently: components, commits, wheel names, sizes, sha256."""
    out = []
    names = [c.name for c in expected.components]
    got = [c.name for c in rebuilt.components]
    if names != got:
        out.append(f"components: the lock lists {', '.join(names) or 'none'}; the rebuild made {', '.join(got) or 'none'}")
    have = {c.name: c for c in rebuilt.components}
    for c in expected.components:
        r = have.get(c.name)
        if r is None:
            continue
        if r.commit != c.commit:
            out.append(f"{c.name}: rebuilt at commit {r.commit}, the lock records {c.commit}")
        for what, mine, theirs in (("wheel", r.wheel.file, c.wheel.file), ("size", r.wheel.size, c.wheel.size),
                                   ("sha256", r.wheel.sha256, c.wheel.sha256)):
            if mine != theirs:
                out.append(f"{c.name}: the rebuilt wheel has {what} {mine}, the lock records {theirs}")
    if expected.closure is not None and rebuilt.closure is not None:  # (--no-resolve resolves nothing to compare)
        out += closure_differences(expected.closure, rebuilt.closure)
    return out


def closure_differences(expected: Closure, rebuilt: Closure) -> list[str]:
    """Each dependency the rebuild resolved differently from the lock: missing, added, or another file."""
    out = []
    mine = {d.name: d for d in rebuilt.dists}
    theirs = {d.name: d for d in expected.dists}
    for name in sorted(theirs.keys() - mine.keys()):
        out.append(f"dependency {name}: the lock records {theirs[name].file}; the rebuild's closure has none")
    for name in sorted(mine.keys() - theirs.keys()):
        out.append(f"dependency {name}: the rebuild's closure has {mine[name].file}; the lock records none")
    for name in sorted(mine.keys() & theirs.keys()):
        m, t = mine[name], theirs[name]
        for what, a, b in (("version", m.version, t.version), ("file", m.file, t.file),
                           ("sha256", m.sha256, t.sha256), ("size", m.size, t.size)):
            if a != b:
                out.append(f"dependency {name}: the rebuild resolved {what} {a}, the lock records {b}")
    return out


def recipe_from_lock(lock: Lock, patches_dir: Path | None, recipes_dir: Path | None,
                     cache_dir: Path | None = None) -> Recipe:
    """The lock's recorded recipe, after checking that the lock's parts agree: the recipe text hashes as
    recorded, every component is the one the recipe text describes (and no other), every patch still hashes
    as recorded, and each wheel present beside the lock has the recorded size and sha256. Any disagreement
    is a RecipeError (exit 2) naming each, before anything is built.

    Local patches are looked up in `patches_dir` first when given (a bundle's patches/, --patches-dir), then
    beside the recipe file that declared them, beside the recipes/ the lock names and beside the project's
    recipes; a patch or input file found in none of them is taken from `cache_dir` by the sha256 the lock
    records (the build kept it there), else MissingFiles names each with every place looked."""
    recorded = Path(lock.recipe_path)  # a bundle records it relative to the project root (cwd)
    own = (recipes_dir.parent / "patches",) if recipes_dir else patches_dirs_of(recorded)
    first = [patches_dir] if patches_dir else []
    dirs = list(dict.fromkeys([*first, *own, (recipes_dir or default_recipes_dir()).parent / "patches"]))
    # each inherited key resolves against the file that declared it, as the build did (a lock written before
    # locks recorded them: against the recorded recipe's directory)
    origins = origins_from_record(dict(lock.recipe_origins), dirs, first)
    hashes = {(c.name, p.label): p.sha256 for c in lock.components for p in c.patches if not p.remote}
    hashes.update({(c.name, i.label): i.sha256 for c in lock.components for i in c.inputs})
    try:
        recipe = load_recipe_text(lock.recipe_text, lock.recipe_name, recorded, dirs,
                                  origins=origins, recorded=Recorded(hashes, cache_dir))
    except MissingFiles as err:
        raise MissingFiles([f"{lock.path}: {p}" for p in err.problems], hint=err.hint) from None
    except RecipeError as err:
        raise RecipeError([f"{lock.path}: the recorded recipe: {p}" for p in err.problems],
                          hint="the lock's [recipe] text is damaged; rebuild the lock from its recipe") from None
    problems = []
    recorded_sha = sha256_bytes(lock.recipe_text.encode())  # the text as recorded (whichever writer wrote it)
    if recorded_sha != lock.recipe_sha256:
        problems.append(f"recipe text has sha256 {recorded_sha}, the lock records {lock.recipe_sha256}")
    problems += component_problems(lock, recipe)
    for comp in lock.components:
        if comp.name not in {c.name for c in recipe.components}:
            continue  # (named by component_problems)
        have = {p.label: p for p in recipe.component(comp.name).patches}
        for p in comp.patches:
            if have.get(p.label) != p:
                found = have[p.label].sha256 if p.label in have else "(missing)"
                problems.append(f"{comp.name}: patch {p.label} has sha256 {found}, the lock records {p.sha256}")
    if lock.path is not None:
        problems += wheel_problems(lock, missing_ok=True)
    if problems:
        raise RecipeError([f"{lock.path}: {p}" for p in problems],
                          hint="the lock no longer matches its inputs; restore them or build the recipe anew")
    return dataclasses.replace(recipe, partial=lock.recipe_partial)


def relock(lock_path: Path, cache_dir: Path, patches_dir: Path | None, recipes_dir: Path | None, ui: UI, *,
           refresh: bool = False, audit: bool = False) -> Lock:
    """`toolchain lock`: the closure of an existing lock's built wheels with the recipe's [resolve] (the kept
    one, or resolved again when `refresh`), written into the lock in place; the ABI check runs before anything
    is written (with `audit`, the closure's own shared objects are fetched and read too)."""
    from toolchain.lock import verify_wheels
    from toolchain.resolve.run import resolve_built

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
    relocked = dataclasses.replace(lock, closure=closure, base=base)
    write_lock(dataclasses.replace(relocked, native=audit_native(relocked, lock.path.parent, recipe, None,
                                                                 cache_dir, ui, read_deps=audit)), lock.path.parent)
    give_to_invoking_user(lock.path.parent)
    return read_lock(lock.path)


def component_problems(lock: Lock, recipe: Recipe) -> list[str]:
    """Where the lock's [[components]] disagree with the recipe text it embeds (as a lock records them:
    URLs and commands masked, env redacted)."""
    want = [c.name for c in recipe.components]
    got = [c.name for c in lock.components]
    out = []
    missing = [n for n in want if n not in got]
    extra = [n for n in got if n not in want]
    if missing:
        out.append(f"components: the recipe text has {', '.join(missing)}, which the lock does not list")
    if extra:
        out.append(f"components: the lock lists {', '.join(extra)}, which the recipe text does not have")
    if not missing and not extra and want != got:
        out.append(f"components: the lock lists them in the order {', '.join(got)}; the recipe's build order is "
                   f"{', '.join(want)}")
    by_name = {c.name: c for c in lock.components}
    for comp in recipe.components:
        locked = by_name.get(comp.name)
        if locked is None:
            continue
        if comp.prebuilt is not None:
            out += _prebuilt_problems(comp.name, comp.prebuilt, locked)
            continue
        recorded = {
            "url": redact_text(comp.url), "commit": comp.commit, "subdir": comp.subdir,
            "command": redact_argv(comp.command), "install-args": redact_argv(comp.install_args),
            "after": list(comp.after), "env": locked_env(component_env(recipe, comp).items()),
            "patches": [redact_text(p.label) for p in comp.patches],
            "fetchcontent": [{"name": d.name, "url": redact_text(d.url), "commit": d.commit} for d in comp.fetchcontent],
        }
        in_lock = {
            "url": locked.url, "commit": locked.commit, "subdir": locked.subdir, "command": list(locked.command),
            "install-args": list(locked.install_args), "after": list(locked.after), "env": dict(locked.env),
            "patches": [p.label for p in locked.patches], "fetchcontent": [dict(f) for f in locked.fetchcontent],
        }
        for key, value in recorded.items():
            if in_lock[key] != value:
                out.append(f"{comp.name}: {key} is {in_lock[key]!r} in [[components]], the recipe text says {value!r}")
    return out


def _prebuilt_problems(name: str, pre: Prebuilt, locked: LockedComponent) -> list[str]:
    """Where a lock's prebuilt component disagrees with the recipe text: not recorded as prebuilt, another
    requirement, or another file than the recipe's {url, sha256}."""
    if not locked.prebuilt:
        return [f"{name}: the recipe text says prebuilt {pre.label!r}, the lock records a build from source"]
    if pre.requirement and locked.prebuilt.get("requirement") != pre.requirement:
        return [f"{name}: the recipe text says prebuilt {pre.requirement!r}, the lock records "
                f"{locked.prebuilt.get('requirement') or locked.prebuilt.get('url')!r}"]
    if pre.sha256 and (locked.wheel.sha256 != pre.sha256 or locked.prebuilt.get("url") != redact_text(pre.url)):
        return [f"{name}: the recipe text pins {pre.url} sha256 {pre.sha256}, the lock records "
                f"{locked.prebuilt.get('url')} sha256 {locked.wheel.sha256}"]
    return []
