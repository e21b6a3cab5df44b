"""Plan → built components → lock. Each component's wheel comes from the wheel cache when its key is there,
otherwise from a prepared source tree built inside the target runtime; the compiles overlap where the target's
cores and memory allow (build/schedule.py), and the results keep the plan's (dependency) order."""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
import time
from collections.abc import Callable, Mapping
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

from toolchain.build import ccache
from toolchain.build.built_against import BuiltAgainst
from toolchain.build.cache import WHEELS_DIR, CacheEntry, WheelCache, WheelRef
from toolchain.build.ccache import CacheReport, CompilerCache
from toolchain.build.entry import EntryMeta
from toolchain.build.metrics import BuildMetrics
from toolchain.build.plan import ComponentPlan, Plan
from toolchain.build.prebuilt_wheels import take_prebuilt
from toolchain.build.remoteopen import open_remote
from toolchain.core.fs import open_log, write_if_changed
from toolchain.core.proc.runner import CommandFailed, merge_env
from toolchain.core.record import record, replace
from toolchain.core.redact import redact_argv, redact_env, redact_text
from toolchain.errors import BuildError, ToolError
from toolchain.sharing.settings import RemoteRequest
from toolchain.sources.mirrors import Mirrors, Rewrite
from toolchain.sources.trees import SourceTrees

if TYPE_CHECKING:
    from toolchain.build.remotecache import RemoteCache
    from toolchain.build.schedule import Budget
    from toolchain.console import UI
    from toolchain.recipe.model import Component
    from toolchain.resolve.run import IndexView
    from toolchain.target.base import BuildRuntime


@record
class BuildOptions:
    """How to build: the out and cache folders and the command line's choices."""

    out_dir: Path
    cache_dir: Path
    rewrites: tuple[Rewrite, ...] = ()
    use_cache: bool = True       # False: build everything again (verify-repro), still storing results
    fresh_sources: bool = False  # True: prepare source trees again instead of reusing them
    deterministic: bool = True
    verbose: bool = False
    remote: RemoteRequest = RemoteRequest()  # --remote-cache/--push/--remote-insecure (build/remotecache.py)
    resolve: bool = True         # False (--no-resolve): the lock pins no runtime dependencies
    index_view: IndexView | None = None  # resolutions sharing one view of the indexes (a bisect's: resolve/run.py)
    compiler_cache: bool = True  # False: --no-compiler-cache
    compiler_cache_dir: Path | None = None  # where ccache keeps its cache (default: <cache_dir>/ccache)
    builds_at_once: int = 0      # compiles at once, at most (0: as the target's cores and memory allow)
    cache_warnings: bool = True  # False: the cache is the tool's own scratch (verify-repro's, whose git link and
                                 # umask it made); the command checks the user's cache instead


class WheelSource(StrEnum):
    """Where a built component's wheel came from (the value is the word `build --json` shows)."""

    BUILT = "built"                # compiled by this build
    LOCAL_CACHE = "local-cache"    # the local wheel cache
    REMOTE_CACHE = "remote-cache"  # downloaded from the remote cache
    PREBUILT = "prebuilt"          # the recipe's pinned prebuilt wheel (never compiled)


@record(kw_only=True)
class BuiltComponent:
    """One component's wheel after a build, and where it came from."""

    plan: ComponentPlan
    describe: str
    wheel: WheelRef
    seconds: float
    log: Path
    normalizations: tuple[str, ...] = ()
    source: WheelSource = WheelSource.BUILT  # where the wheel came from
    pushed: bool = False         # uploaded to the remote cache by this build
    built_against: tuple[BuiltAgainst, ...] = ()  # what the build environment had of `built-against`
    compiler_cache: CacheReport = CacheReport()  # what the build that made the wheel cost (its cache entry)
    metrics: BuildMetrics = BuildMetrics()
    jobs: int = 0
    jobs_source: str = ""
    version: str = ""  # the wheel's (normalized), as the cache entry recorded it ("": read the file name)
    built_at: float = 0.0  # when the build that made the wheel stored it (epoch seconds; 0: not recorded)

    @property
    def cached(self) -> bool:
        """Nothing was compiled for it: the wheel came from a cache or is a prebuilt."""
        return self.source is not WheelSource.BUILT


def build_plan(plan: Plan, runtime: BuildRuntime, mirrors: Mirrors, options: BuildOptions, ui: UI) -> list[BuiltComponent]:
    """Build the plan's components (sources fetched at once first, cached wheels taken where they can be)."""
    cache = WheelCache(options.cache_dir, warn=ui.warn)
    remote = open_remote(plan.recipe.cache, options.remote)
    trees = SourceTrees(options.cache_dir, mirrors)
    wheels_dir = options.out_dir / WHEELS_DIR
    wheels_dir.mkdir(parents=True, exist_ok=True)
    looked_up: dict[str, bool] = {}  # the local misses the remote was asked for: key -> downloaded
    if remote is not None and options.use_cache:
        looked_up = remote.prefetch([(cp.cache_key, f"{cp.name}@{cp.component.commit[:12]}") for cp in plan.components
                                     if not cp.is_prebuilt and cache.get(cp.cache_key) is None], cache,
                                    Path(options.cache_dir) / "work", ui)
    chosen: list[CompilerCache] = []
    choosing = threading.Lock()

    def cc() -> CompilerCache:  # chosen when a component is compiled: a build served from the cache never asks
        with choosing:
            if not chosen:
                chosen.append(_compiler_cache(plan, options, ui))
            return chosen[0]

    # The sources of every component that will be compiled are fetched first, at once: a cold stack waits for
    # its slowest clone, not for the sum of them, and a pin that does not exist stops it before any compile.
    compiled = [cp for cp in plan.components if not cp.is_prebuilt and not (options.use_cache and (
        looked_up.get(cp.cache_key) or cache.get(cp.cache_key) is not None))]
    to_compile = [cp.name for cp in compiled]
    fetch_sources(mirrors, plan, compiled)
    built: dict[str, BuiltComponent] = {}
    running: dict[str, float] = {}  # the builds running now (the progress line, the heartbeat): name -> start
    showing = threading.Lock()

    def beats() -> list[str]:
        with showing:
            now = dict(running)
        return [heartbeat_line(plan.component(n), options.out_dir / "logs" / f"{n}.log", time.monotonic() - t,
                               Path(options.cache_dir) / "work") for n, t in now.items()]

    with ui.progress(f"building {plan.recipe.name}", total=len(plan.components)) as bar, \
            ui.heartbeat(beats):
        def one(cp: ComponentPlan) -> BuiltComponent:
            try:
                result = build_component(plan, cp, runtime, mirrors, trees, cache, wheels_dir, options, ui, remote,
                                         looked_up.get(cp.cache_key), cc)
            except ToolError as err:
                err.blame(cp.name)  # which component failed
                _github_group(ui, f"{cp.name}: FAILED", options.out_dir / "logs" / f"{cp.name}.log", 60)
                raise
            _github_group(ui, f"{cp.name}: {result.source.value} {result.wheel.file}", result.log, 20)
            return result

        def show(cp: ComponentPlan, start: bool) -> None:
            with showing:
                if start:
                    running[cp.name] = time.monotonic()
                else:
                    running.pop(cp.name, None)
                what = ", ".join(f"{n} @ {plan.component(n).component.commit[:12]}" for n in running)
            bar.update(description=what or f"building {plan.recipe.name}", advance=0 if start else 1)

        # served from the cache first (nothing to overlap), then the compiles, side by side where they fit
        for cp in plan.components:
            if cp.name not in to_compile:
                show(cp, True)
                built[cp.name] = one(cp)
                show(cp, False)
        if not compiled:  # (a warm build: nothing to schedule, and the scheduler is not imported)
            return [built[cp.name] for cp in plan.components]
        from toolchain.build.schedule import run_at_once

        built.update(zip(to_compile, run_at_once(
            compiled, one, build_budget(plan, options, runtime), reserved_memory,
            started=lambda cp: show(cp, True), ended=lambda cp: show(cp, False),
            also_failed=lambda cp, err: ui.warn(f"{cp.name} failed too: {str(err).splitlines()[0]}")), strict=False))
    return [built[cp.name] for cp in plan.components]


def _github_group(ui: UI, title: str, log: Path, lines: int) -> None:
    """Under GitHub Actions: the component's log tail, folded under its name."""
    if ui.github:
        ui.github_group(title, _tail(log, lines))


def _tail(log: Path, lines: int) -> list[str]:
    """The last `lines` lines of `log` (read from its end: a kernels build log runs to megabytes)."""
    try:
        with open(log, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 64 * 1024))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return []
    return text.splitlines()[-lines:]


def heartbeat_line(cp: ComponentPlan, log: Path, seconds: float, work: Path | None = None) -> str:
    """What a running build is doing, in one line: `kernels: building for 14m02s, 8 jobs, peak 31.2 GiB, ccache
    812 hits / 391 misses, last: [1234/2001] ...` (peak and ccache from the runner's live reading in the
    build's work directory under `work`, where the host sees it)."""
    minutes, secs = divmod(int(seconds), 60)
    parts = [f"{cp.name}: building for {minutes}m{secs:02d}s"]
    if cp.jobs:
        parts.append(f"{cp.jobs.jobs} jobs")
    from toolchain.build.metrics import read_live

    reading = next(filter(None, (read_live(d) for d in work.glob(f"{cp.cache_key}-*"))), None) if work else None
    figures = reading.describe() if reading is not None else ""
    if figures:
        parts.append(figures)
    last = next((line.strip() for line in reversed(_tail(log, 20)) if line.strip()), "")
    if last:
        parts.append(f"last: {last}")
    return ", ".join(parts)


def build_budget(plan: Plan, options: BuildOptions, runtime: BuildRuntime) -> Budget:
    """How many compiles may run at once (build/schedule.py): the target's cores and available memory, as
    probed for the plan, and at most `--builds-at-once`; one where the runtime has one place to build in
    (exec into a running container)."""
    from toolchain.build.schedule import Budget

    res = plan.resources
    if res is None:
        return Budget(1, 0)
    at_once = min(res.cpus, options.builds_at_once) if options.builds_at_once else res.cpus
    return Budget(max(1, runtime.builds_at_once(at_once)), res.memory)


def reserved_memory(cp: ComponentPlan) -> int:
    """The memory a compile's jobs are budgeted (build/jobs.py): what it reserves while it runs."""
    return cp.jobs.jobs * cp.jobs.per_job if cp.jobs else 0


FETCH_AT_ONCE = 4  # mirrors fetched at once


def fetch_sources(mirrors: Mirrors, plan: Plan, components: list[ComponentPlan]) -> None:
    """`ensure_sources` of each component, up to FETCH_AT_ONCE at a time. All of them finish (a clone is not
    cut off half-way); then the first failure in the plan's order is raised, naming its component."""
    if len(components) < 2:
        for cp in components:
            ensure_sources(mirrors, plan, cp)
        return
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(min(FETCH_AT_ONCE, len(components)), thread_name_prefix="fetch") as pool:
        futures = [(cp, pool.submit(ensure_sources, mirrors, plan, cp)) for cp in components]
    for cp, future in futures:
        err = future.exception()
        if isinstance(err, ToolError):
            err.blame(cp.name)
        if err is not None:
            raise err


def ensure_sources(mirrors: Mirrors, plan: Plan, cp: ComponentPlan) -> None:
    """The component's commit and each of its FetchContent dependencies' in their mirrors (fetched if not)."""
    comp = cp.component
    where = f"{plan.recipe.path.name}: components.{comp.name}"
    mirror = mirrors.ensure(comp.url, comp.commit, where=f"{where}.commit")
    from toolchain.build.fetchcontent_check import check_declared
    from toolchain.sources.cmake_declared import declared_at

    # before anything is compiled: what the CMake files declare and the recipe does not pin stops the build
    check_declared(comp, declared_at(mirror, comp.commit, comp.subdir), plan.recipe.path.name)
    for dep in comp.fetchcontent:
        mirrors.ensure(dep.url, dep.commit, where=f"{where}.fetchcontent {dep.name}")


def build_component(plan: Plan, cp: ComponentPlan, runtime: BuildRuntime, mirrors: Mirrors, trees: SourceTrees,
                    cache: WheelCache, wheels_dir: Path, options: BuildOptions, ui: UI,
                    remote: RemoteCache | None = None, downloaded: bool | None = None,
                    cc: Callable[[], CompilerCache] | None = None) -> BuiltComponent:
    """`downloaded`: the remote was already asked for this key (True: its entry is now local); `cc`: gives
    the compiler cache, asked only when the component is compiled."""
    comp = cp.component
    log = options.out_dir / "logs" / f"{comp.name}.log"
    if cp.is_prebuilt:
        return take_prebuilt_component(cp, cache, wheels_dir, Path(options.cache_dir) / "work", log, ui)
    header = redact_text(f"# {comp.name} {comp.url} @ {comp.commit}\n# cache key {cp.cache_key}\n")
    started = time.monotonic()
    # take(): the cached wheel, copied into wheels_dir only if it hashes as recorded (else evicted: a miss)
    entry = cache.take(cp.cache_key, wheels_dir) if options.use_cache else None
    source = WheelSource.REMOTE_CACHE if downloaded and entry is not None else WheelSource.LOCAL_CACHE
    if entry is None:
        with open_log(log, fresh=True) as f:
            f.write(header)  # (the build appends to it; a cache hit writes its log whole, below)
        header = ""
        with cache.building(cp.cache_key):
            entry = cache.take(cp.cache_key, wheels_dir) if options.use_cache else None
            if entry is None and options.use_cache and remote is not None and downloaded is None:  # the team's cache
                if remote.fetch(cp.cache_key, f"{comp.name}@{comp.commit[:12]}", cache,
                                Path(options.cache_dir) / "work", ui) is not None:
                    entry = cache.take(cp.cache_key, wheels_dir)  # served like any local entry
                source = WheelSource.REMOTE_CACHE
            if entry is None:
                ensure_sources(mirrors, plan, cp)  # (fetched by build_plan: asks the mirror, fetches nothing)
                stored = _build_into_cache(plan, cp, runtime, mirrors, trees, cache, options, log, ui,
                                           cc() if cc else _compiler_cache(plan, options, ui))
                # (from a cache whose folders another user can write nothing is read back: what was just
                # stored is copied out checked against the sha256 this process computed)
                entry = cache.take(cp.cache_key, wheels_dir) or cache.copy_out(stored, wheels_dir)
                if entry is None:
                    raise BuildError(f"{comp.name}: the wheel just stored in the cache under {cp.cache_key} "
                                     "could not be read back", hint="check the cache directory's disk")
                source = WheelSource.BUILT
    cached = source is not WheelSource.BUILT
    if cached and entry.meta.build_requires:
        _check_recorded_requires(plan, cp, runtime, list(entry.meta.build_requires), options)
    describe = entry.meta.describe or mirrors.describe(comp.url, comp.commit)
    if cached:
        _log_from_cache(log, entry,
            f"downloaded from {remote.settings.url}" if source is WheelSource.REMOTE_CACHE and remote else "",
                        header=header)
        how = "downloaded" if source is WheelSource.REMOTE_CACHE else "cached"
        ui.info(f"  [green]✓[/] {comp.name}: {how} {entry.wheel.name}")
    else:
        ui.info(f"  [green]✓[/] {comp.name}: built {entry.wheel.name} in {time.monotonic() - started:.1f}s")
    pushed = source is not WheelSource.REMOTE_CACHE and remote is not None and remote.push(
        entry, _annotations(plan, cp, entry), f"{comp.name}@{comp.commit[:12]}", Path(options.cache_dir) / "work", ui)
    meta = entry.meta
    return BuiltComponent(plan=cp, describe=describe, wheel=WheelRef(entry.wheel.name, entry.sha256, entry.size),
                          seconds=meta.build_seconds, log=log, normalizations=meta.normalizations, source=source,
                          pushed=pushed, built_against=meta.built_against, compiler_cache=meta.compiler_cache,
                          metrics=meta.metrics, jobs=meta.jobs, jobs_source=meta.jobs_source, version=meta.version,
                          built_at=meta.stored)


def take_prebuilt_component(cp: ComponentPlan, cache: WheelCache, wheels_dir: Path, work: Path, log: Path,
                            ui: UI) -> BuiltComponent:
    """A prebuilt component: its pinned wheel from the cache, or downloaded and checked; never compiled."""
    pf = cp.prebuilt
    if pf is None:
        raise BuildError(f"{cp.name}: the prebuilt {cp.component.prebuilt.label if cp.component.prebuilt else ''} "
                         "was not pinned to a file", hint="report this: the pipeline pins prebuilt wheels first")
    with open_log(log, fresh=True) as f:
        f.write(redact_text(f"# {cp.name}: prebuilt {pf.file} from {pf.url}\n# sha256 {pf.sha256}\n"))
    entry, fetched = take_prebuilt(pf, cache, wheels_dir, work, cp.name, log)
    _the_wheel(entry.wheel.parent, cp.component, log)  # the distribution the recipe names
    with open_log(log) as f:
        f.write(f"# {'downloaded and checked' if fetched else 'from the wheel cache'}: nothing was compiled\n")
    ui.info(f"  [green]✓[/] {cp.name}: prebuilt {entry.wheel.name} ({'downloaded' if fetched else 'cached'})")
    return BuiltComponent(plan=cp, describe="", wheel=WheelRef(entry.wheel.name, entry.sha256, entry.size),
                          seconds=0.0, log=log, source=WheelSource.PREBUILT)


def _annotations(plan: Plan, cp: ComponentPlan, entry: CacheEntry) -> dict[str, str]:
    from toolchain.build.remotecache import entry_annotations  # (the client is imported only with a remote)

    return entry_annotations(plan, cp, entry)


def _log_from_cache(log: Path, entry: CacheEntry, origin: str = "", header: str = "") -> None:
    """A wheel served from the cache keeps its full build log in logs/: the cache entry's, under a header
    (`origin`: where the entry came from, when not from this machine's builds). With a `header` the log is
    written whole, and only when it differs from what is there (a warm no-op writes nothing);
    without, it is appended to the log this run started."""
    built = entry.wheel.parent / "build.log"
    text = (f"# wheel cache hit: {entry.wheel.name} (built in {entry.meta.build_seconds:.1f}s"
            f"{'; ' + origin if origin else ''})\n")
    try:
        with open(built, "rb") as src:
            kept = src.read()
        text += f"# not built in this run: the log below is the build's own, copied from the cache ({built})\n"
    except FileNotFoundError:
        kept = b""
        text += "# the cache entry kept no build log\n"
    data = (header + text).encode("utf-8") + kept
    if header:
        write_if_changed(log, data)
    else:
        with open_log(log) as f:
            f.buffer.write(data)


def _compiler_cache(plan: Plan, options: BuildOptions, ui: UI) -> CompilerCache:
    cc = ccache.choose(plan.recipe.build, options.cache_dir, disabled=not options.compiler_cache, ui=ui,
                       data_dir=options.compiler_cache_dir, reach=True)
    if cc.enabled:
        try:
            cc.data_dir.mkdir(parents=True, exist_ok=True)  # (a fresh container mounts it)
        except OSError as exc:  # a cache never fails a build
            ui.warn(f"compiling without a compiler cache: cannot create {cc.data_dir}: {exc.strerror or exc}")
            return replace(cc, enabled=False, why=f"off (cannot create {cc.data_dir})")
        if cc.links_dir is not None:
            try:
                cc.links_dir.mkdir(parents=True, exist_ok=True)  # (a fresh container mounts it too)
            except OSError as exc:  # nor does the link cache's
                ui.warn(f"linking without the link cache: cannot create {cc.links_dir}: {exc.strerror or exc}")
                return replace(cc, links_dir=None)
    return cc


def _build_into_cache(plan: Plan, cp: ComponentPlan, runtime: BuildRuntime, mirrors: Mirrors, trees: SourceTrees,
                      cache: WheelCache, options: BuildOptions, log: Path, ui: UI,
                      cc: CompilerCache) -> CacheEntry:
    """Build one component's wheel and store it in the cache: the entry stored."""
    from toolchain.build.buildreqs import check_build_requires, declared_requires
    from toolchain.build.built_against import probe_built_against
    from toolchain.build.fetchcontent_pins import EXTRA as PINS_EXTRA
    from toolchain.build.fetchcontent_pins import VAR as PINS_VAR
    from toolchain.build.fetchcontent_pins import insteadof_env, needs_pins, write_pins
    from toolchain.build.frontend import PEP517, PEP517_FILE, backend_call, check_as_pip
    from toolchain.build.metrics import RUNNER, RUNNER_FILE, measured_argv, read_result

    comp = cp.component
    what = f"{comp.name}@{comp.commit[:12]}"
    work = Path(options.cache_dir) / "work"
    for stale in work.glob(f"{cp.cache_key}-*"):  # left by a builder killed holding this key's lock (we hold it)
        shutil.rmtree(stale, ignore_errors=True)
    out_tmp = work / f"{cp.cache_key}-{os.urandom(4).hex()}"
    out_tmp.mkdir(parents=True)
    started = time.monotonic()
    try:
        with contextlib.ExitStack() as stack:
            tree = stack.enter_context(trees.tree(comp.url, comp.commit, cp.patches, subdir=comp.subdir,
                                                  what=what, log=log, fresh=options.fresh_sources))
            deps = {d.name: stack.enter_context(trees.tree(d.url, d.commit, what=f"{d.name}@{d.commit[:12]}",
                                                           log=log, read=True)) for d in comp.fetchcontent}
            from toolchain.target.parts import Extra

            extras = [*cc.extras(runtime), Extra(RUNNER, RUNNER_FILE), Extra(PEP517, PEP517_FILE)]
            if needs_pins(comp):  # every CMake run of the build reads the pins, whoever starts it
                seen_deps = runtime.workspace_paths(tree, out_tmp, deps)[2]
                chained = (dict(cp.env).get(PINS_VAR) or plan.toolchain_env.as_dict().get(PINS_VAR)
                           or os.environ.get(PINS_VAR) or "")
                pins = write_pins(out_tmp.with_name(out_tmp.name + ".pins.cmake"), comp, seen_deps, chained)
                stack.callback(pins.unlink, missing_ok=True)
                extras.append(Extra(PINS_EXTRA, pins))
            ws = stack.enter_context(runtime.workspace(tree, out_tmp, deps, extras))
            src = f"{ws.src}/{comp.subdir}".rstrip("/") if comp.subdir else ws.src
            epoch = mirrors.commit_info(comp.url, comp.commit)["epoch"]
            basedir = os.path.commonpath([ws.src, ws.out, *ws.deps.values()])
            env = {**cc.env(ws.extras, basedir), **(cp.jobs.env() if cp.jobs else {}),
                   **build_env(plan, cp, src, ws.deps, epoch, options.deterministic)}
            if PINS_EXTRA in ws.extras:
                env[PINS_VAR] = ws.extras[PINS_EXTRA]
                env.update(insteadof_env(mirrors.rewrites, env))
            python = plan.recipe.target.python
            argv = [_fill(a, python=python, src=src, out=ws.out) for a in comp.command]
            here = tree / comp.subdir if comp.subdir else tree
            check_build_requires(ws, python, src, what, log, tree=here, identity=runtime.identity())
            requires = declared_requires(here)  # (recorded: a build served from the cache checks them again)
            call = backend_call(comp.command, here)  # pip's one build call, without pip (build/frontend.py)
            run_argv = call.argv(python, ws.extras[PEP517], src, ws.out, argv, stored=options.deterministic) \
                if call else argv
            _log_decisions(log, cc, cp)
            if cp.jobs and cp.jobs.warning:
                ui.warn(f"{comp.name}: {cp.jobs.warning}")
            against = probe_built_against(ws, python, comp.built_against, env, src, log, what)
            ui.event(f"building {what} in the {runtime.describe()}", log=log)
            try:
                ws.run(measured_argv(python, ws.extras[RUNNER], ws.out, run_argv), env=env, cwd=src, log=log,
                       verbose=options.verbose)
            except CommandFailed as exc:
                failed = read_result(out_tmp)
                if failed is not None and failed.error:
                    raise ccache.CompilerCacheMissing(f"building {what}: {failed.error}",
                                                      hint=ccache.INSTALL_HINT) from None
                how = f" ({call.describe()}, unless the log says pip ran)" if call else ""
                import shlex

                from toolchain.build.failure_cause import failure_cause

                cause = failure_cause(log)
                raise BuildError(f"building {what} failed (exit {exc.returncode}): {shlex.join(redact_argv(argv))}"
                                 f"{how}\n" + (f"  cause (from the log): {redact_text(cause)}\n" if cause else "") +
                                 f"  log: {log}\n  last lines:\n" + "\n".join("    " + line for line in exc.tail.splitlines()),
                                 hint="read the log; `toolchain plan` shows the exact env and command") from None
        result = read_result(out_tmp)
        report = cc.reported(result.cache, ui, what, runtime) if result else CacheReport()
        if report.link_misses:  # new links stored: the link cache kept within the compiler cache's bound
            from toolchain.build.linkprune import keep_within

            with contextlib.suppress(OSError, CommandFailed):  # (a cache never fails a build)
                keep_within(cc)
        metrics = result.metrics if result else BuildMetrics()
        _log_result(log, report, metrics)
        if cc.enabled and report.note:
            ui.warn(f"{comp.name}: {report.note}")
        wheel, version = _the_wheel(out_tmp, comp, log)
        if call:
            check_as_pip(wheel, plan.target.python_version, what, log)
        normalizations = _normalize(wheel, epoch) if options.deterministic else []
        return cache.put(cp.cache_key, wheel, EntryMeta(
            component=comp.name, commit=comp.commit, describe=mirrors.describe(comp.url, comp.commit),
            build_seconds=round(time.monotonic() - started, 3), version=version,
            normalizations=tuple(normalizations), env=redact_env(dict(cp.env)), command=tuple(comp.command),
            built_against=tuple(against), build_requires=tuple(requires or ()), compiler_cache=report, metrics=metrics,
            jobs=cp.jobs.jobs if cp.jobs else 0, jobs_source=cp.jobs.source if cp.jobs else ""), log=log)
    finally:
        shutil.rmtree(out_tmp, ignore_errors=True)


def _check_recorded_requires(plan: Plan, cp: ComponentPlan, runtime: BuildRuntime, reqs: list[str],
                             options: BuildOptions) -> None:
    """A wheel served from the cache: its recorded build requirements checked in the target interpreter as a
    cold build checks them before compiling (the versions found by a remembered probe, whose inputs are the
    interpreter's sys.path and each requirement's metadata), so a build requirement removed since is exit 1
    warm as cold."""
    from toolchain.build.buildreqs import check_recorded_requires
    from toolchain.build.plan import installed_versions
    from toolchain.scripts.build_requires import names

    python = plan.recipe.target.python
    found = installed_versions(runtime, python, names(reqs), {}, Path(options.cache_dir) / "memo", runtime.identity())
    check_recorded_requires(reqs, found, python, f"{cp.name}@{cp.component.commit[:12]}")


def _log_decisions(log: Path, cc: CompilerCache, cp: ComponentPlan) -> None:
    with open_log(log) as f:
        f.write(f"# compiler cache: {cc.why}\n")
        if cp.jobs:
            f.write(f"# jobs: {cp.jobs.why}\n" + (f"# WARNING: {cp.jobs.warning}\n" if cp.jobs.warning else ""))


def _log_result(log: Path, report: CacheReport, metrics: BuildMetrics) -> None:
    with open_log(log) as f:
        f.write(f"# compiler cache: {report.summary()}\n")
        if metrics.wall_seconds:
            f.write(f"# build cost: {metrics.summary()}\n")


def build_env(plan: Plan, cp: ComponentPlan, src: str, deps: Mapping[str, str], epoch: str,
              deterministic: bool) -> dict[str, str | None]:
    """toolchain diff < recipe env < component env < version override < determinism < pre-fetched deps."""
    env: dict[str, str | None] = dict(merge_env({}, plan.toolchain_env.as_dict(), dict(cp.env)))
    env.update({k: None for k, v in plan.toolchain_env.diff if v is None})
    if deterministic:
        from toolchain.build.determinism import deterministic_env, prefix_map_flags

        for k, v in deterministic_env(src, cp.name, int(epoch)).items():
            env[k] = v if k not in ("CFLAGS", "CXXFLAGS") or not env.get(k) else f"{env[k]} {v}"
        # the pinned FetchContent checkouts are compiled too (pybind11, xbyak, oneDNN): their paths mapped as well
        dep_maps = [f for d in cp.component.fetchcontent for f in prefix_map_flags(deps[d.name], f"{cp.name}-{d.name}")]
        for k in ("CFLAGS", "CXXFLAGS") if dep_maps else ():
            env[k] = " ".join(filter(None, [env.get(k) or "", *dep_maps]))
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


def _the_wheel(out: Path, comp: Component, log: Path) -> tuple[Path, str]:
    """The one wheel a build wrote, and its version."""
    from packaging.utils import canonicalize_name, parse_wheel_filename

    wheels = sorted(out.glob("*.whl"))
    if len(wheels) != 1:
        raise BuildError(f"building {comp.name} produced {len(wheels)} wheels in {out} "
                         f"({', '.join(w.name for w in wheels) or 'none'}); expected exactly one",
                         hint=f"the build command must write one wheel to {{out}} (pass --no-deps to pip wheel); log: {log}")
    name, version = parse_wheel_filename(wheels[0].name)[:2]
    if comp.dist and canonicalize_name(comp.dist) != name:
        raise BuildError(f"{comp.name}: the wheel is {wheels[0].name} (distribution {name}), "
                         f"but the recipe says dist = {comp.dist!r}",
                         hint="fix `dist` in the recipe or the subdirectory that is built")
    return wheels[0], str(version)


def _normalize(wheel: Path, epoch: str) -> list[str]:
    from toolchain.build.wheelnorm import normalize_wheel

    return list(normalize_wheel(wheel, int(epoch)))


__all__ = ["BuildOptions", "BuiltComponent", "build_plan"]
