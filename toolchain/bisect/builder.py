"""Building one step (mozregression's build fetcher, with a build instead of a download): a recipe derived
for the candidate goes through the pipeline (`pipeline.build.build_stack`) into its own directory; components
that did not change come from the wheel cache."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any
from zipfile import BadZipFile

from toolchain.bisect.commitwheels import with_commit_wheel
from toolchain.bisect.core import BuildOutcome, BuildSource, first_line
from toolchain.bisect.overlay_step import only_the_bisected
from toolchain.build.stack import BuildOptions, BuiltComponent, WheelSource
from toolchain.build.wheelmeta import wheel_meta
from toolchain.console import UI
from toolchain.core.fs import atomic_write_text, open_log, sha256_bytes
from toolchain.core.proc.signals import STOPPING
from toolchain.core.record import record, replace
from toolchain.core.serial import from_data, to_table
from toolchain.core.trust import read_sealed, sealed
from toolchain.errors import BuildError, SourceError, ToolError, TransientError
from toolchain.pipeline.build import build_stack_components
from toolchain.recipe.load import with_data
from toolchain.recipe.model import Recipe
from toolchain.resolve.closure_memo import resolution_requires
from toolchain.resolve.run import IndexView
from toolchain.sources.mirrors import Rewrite

KILL_SIGNALS = (signal.SIGHUP, signal.SIGINT, signal.SIGKILL, signal.SIGTERM)

DeriveRecipe = Callable[[str], Recipe]
"""A candidate's key (a commit, or a lock difference id) -> the recipe to build for it."""


class SpineBuilder:
    """Builds `derive(key)` through the pipeline into `<out_root>/<key>`; components that did not change come
    from the wheel cache. Thread-safe for distinct keys: each build has its own directory; mirrors, source
    trees and the cache are safe for concurrent builders. A build or source failure makes the candidate
    unbuildable (a skip); a build failure is remembered with its cause (`Unbuildable`), so a repeated bisect
    compiles nothing (`retry_unbuildable`: build them again). A failure of the surroundings (`TransientError`:
    the network, a full disk, a build stopped by a signal) is no finding on the candidate: it is raised, never
    remembered, and the bisect stops, to be resumed. `resolve` False: `build --no-resolve`. `resolve_steps`
    False (the test installs no closure): a step's build leaves the closure out (`deferred`), and `complete`
    resolves it for the locks the bisect names, off the step's critical path. Its resolutions share one view
    of the indexes (`resolve.run.IndexView`): the first to ask them does alone, the others then resolve from
    uv's cache of what they served, asking them only for what it lacks."""

    def __init__(self, derive: DeriveRecipe, out_root: Path, cache: Path, rewrites: Sequence[Rewrite],
                 ui: UI, *, component: str = "", resolve: bool = True, retry_unbuildable: bool = False,
                 resolve_steps: bool = True) -> None:
        self.derive, self.out_root, self.cache, self.rewrites, self.ui = derive, out_root, cache, tuple(rewrites), ui
        self.component = component  # the one whose commit changes (commit bisects)
        self.resolve, self.retry_unbuildable, self.resolve_steps = resolve, retry_unbuildable, resolve_steps
        self._completed: set[tuple[tuple[str, ...], ...]] = set()  # the requirements completed
        self._running: dict[tuple[tuple[str, ...], ...], threading.Event] = {}  # and being completed: set when done
        self._index_view = IndexView()  # one view of the indexes for all the bisect's resolutions
        self._lock = threading.Lock()

    def build(self, key: str) -> BuildOutcome:
        """Build the candidate `key` as the bisected recipe at that commit; a failure is remembered as unbuildable.
        Its closure is resolved only where the test needs it (`resolve_steps`), else deferred to `complete`."""
        if self.resolve and not self.resolve_steps:
            outcome = self._build(key, resolve=False)
            return replace(outcome, deferred=True) if outcome.ok else outcome
        return self._build(key, resolve=self.resolve)

    def complete(self, key: str, build: BuildOutcome, *, ahead: bool = False) -> BuildOutcome:
        """`build` (deferred) with its lock pinning the runtime closure: the same recipe built again into its
        folder, every wheel from the cache, and resolved (a closure kept for the same requirements is taken
        as it is: `resolve.closure_memo`; uv's cache serves what another requirement set fetched). A closure
        that does not resolve leaves the lock without one, saying why in `reason`; the verdict stands.
        `ahead` (in the background): nothing, `build` as it is, when a build with the same requirements was
        completed or is being completed (its closure is kept then: completing this one later is quick); not
        ahead (an end the result names): the completion of the same requirements running in another thread
        is waited for, then its kept closure taken, not resolved a second time beside it."""
        if not build.deferred:
            return build
        try:
            requirements = wheel_requirements(build.wheels)
        except (OSError, ValueError, StopIteration, BadZipFile):  # unreadable here: the build says why, sharing nothing
            requirements = ((key,),)
        with self._lock:
            running = self._running.get(requirements)
            if ahead and (running is not None or requirements in self._completed):
                return build
            mine = self._running.setdefault(requirements, threading.Event()) if running is None else None
        if running is not None:  # the same requirements resolving in another thread: its closure, kept, serves
            running.wait()
        try:
            done = self._build(key, resolve=True, remember=False)  # (the commit builds: no finding on it)
        finally:
            if mine is not None:
                with self._lock:
                    self._completed.add(requirements)
                    del self._running[requirements]
                mine.set()
        if not done.ok:
            return replace(build, reason=f"its closure was not resolved: {done.reason}")
        return replace(build, lock_path=done.lock_path, wheels=done.wheels, deferred=False)

    def caches_filled(self) -> bool:
        """Whether a resolution of this bisect asked the indexes: the others now resolve from uv's cache of what
        they served (`resolve.run.IndexView`), not beside it (`Bisector` starts them then)."""
        return self._index_view.asked

    def _build(self, key: str, *, resolve: bool, remember: bool = True) -> BuildOutcome:
        out = self.out_root / key[:12]
        ui = self.ui if threading.current_thread() is threading.main_thread() else UI(quiet=True)
        if self.resolve and not resolve:  # deferred: what it warns of (no closure to check against) goes to its log
            ui = LoggedWarnings(out / "logs" / "warnings.log", verbose=ui.verbose, quiet=ui.quiet)
        recipe = with_commit_wheel(only_the_bisected(self.derive(key), self.component), self.component)
        memo = unbuildable_memo(self.cache, recipe)
        known = None if self.retry_unbuildable or not remember else Unbuildable.read(memo)
        if known is not None:
            return BuildOutcome(False, log=Path(known.log) if known.log else out / "logs", cached=True, tail=known.tail,
                                reason=f"{known.reason} (remembered{known.since}: --retry-unbuildable, or delete "
                                       f"{memo}, builds it again)")
        options = BuildOptions(out_dir=out, cache_dir=self.cache, rewrites=self.rewrites, verbose=ui.verbose,
                               resolve=resolve, index_view=self._index_view)
        try:
            lock, built = build_stack_components(recipe, options, ui)
        except TransientError:
            raise  # the network, a full disk: the same build may work later; no verdict on the candidate
        except (SourceError, BuildError) as err:  # e.g. a patch that does not apply, a compile error
            if STOPPING.is_set():  # a build ahead that the stop signal reached: no verdict on the commit
                raise TransientError(f"building {key[:12]} was stopped: {first_line(err)}", kind="interrupted",
                                     hint="resume the bisect: the build runs again") from None
            killed = killed_by_signal(err)
            if killed:
                raise TransientError(f"building {key[:12]} was killed by signal {killed} (not a failure of the "
                                     f"commit): {first_line(err)}", kind="interrupted",
                                     hint="an OOM kill or a stop from outside: free memory (fewer --jobs, "
                                          "--builds-at-once 1) and resume the bisect") from None
            self._check_upstream(recipe, err)
            tail = error_tail(err)
            if remember and not isinstance(err, SourceError):
                Unbuildable(first_line(err), str(out / "logs"), tail).write(memo)
            elif remember and self.retry_unbuildable:
                memo.unlink(missing_ok=True)
            return BuildOutcome(False, log=out / "logs", reason=first_line(err), tail=tail)
        if self.retry_unbuildable and remember:
            memo.unlink(missing_ok=True)
        sources = {b.source for b in built}  # the remote cache (build/remotecache.py) serves every step and build ahead
        source: BuildSource = ("compiled" if WheelSource.BUILT in sources
                               else "prebuilt" if WheelSource.PREBUILT in sources
                               else "downloaded" if WheelSource.REMOTE_CACHE in sources else "cached")
        return BuildOutcome(True, lock_path=lock.path, wheels=tuple(lock.wheel_path(c) for c in lock.components),
                            log=out / "logs", cached=source != "compiled", source=source, cores=busy_cores(built))

    def _check_upstream(self, recipe: Recipe, err: Exception) -> None:
        """A component built before the bisected one cannot fail because of its commit: stop, not skip."""
        names = [c.name for c in recipe.components]
        failed = (err.component if isinstance(err, ToolError) else None) or failed_component(str(err), names)
        if self.component and failed and names.index(failed) < names.index(self.component):
            raise UpstreamBroken(f"{failed} does not build, and it is built before {self.component} (whose commit is "
                             f"all that changes here), so no commit of {self.component} can be tested: "
                             f"{first_line(err)}",
                             hint=f"make the recipe build as it is (`toolchain build --recipe {recipe.path}`), "
                                  "then bisect again") from None


class LoggedWarnings(UI):
    """A deferred step's console: its warnings (the sonames it cannot check without a closure) go to `log`,
    not the terminal; the completed build of a lock the result names shows its own."""

    def __init__(self, log: Path, **kw: bool) -> None:
        super().__init__(**kw)
        self.log = log

    def warn(self, message: str) -> None:
        """Append the warning to the log (`open_log`: a link or FIFO there is replaced, not written through)."""
        with open_log(self.log) as f:
            f.write(f"warning: {message}\n")


class UpstreamBroken(BuildError):
    """A component built before the bisected one does not build: no candidate can be tested. Final (no resume
    hint): the recipe must be mended first, then a new bisect started."""

    final = True


@record
class Unbuildable:
    """A candidate's recipe remembered as unbuildable: why (the error's first line), where its build's logs
    were, the error's last lines and when (`<cache>/bisect/unbuildable/<recipe digest>.json`)."""
    reason: str
    log: str = ""
    tail: str = ""
    when: str = ""

    @property
    def since(self) -> str:
        """" since WHEN" for a message when the time is known, else ""."""
        return f" since {self.when}" if self.when else ""

    def write(self, memo: Path) -> None:
        """Remember this failure in the JSON file `memo`, stamped with the time it was first seen."""
        data = {**to_table(self), "when": self.when or time.strftime("%Y-%m-%d %H:%M:%S")}
        atomic_write_text(memo, sealed(memo.stem, data, indent=2) + "\n")

    @classmethod
    def read(cls, memo: Path) -> Unbuildable | None:
        """The failure remembered in `memo`, None when there is none, it cannot be read or the cache's trust rule
        refuses it (core/trust.py: another user's record, a FIFO: as if never remembered, built again)."""
        data = read_sealed(memo, memo.stem)  # (filed under its own key, unchanged)
        try:
            return from_data(cls, data) if isinstance(data, dict) else None
        except (ValueError, AttributeError, TypeError):
            return None


def wheel_requirements(wheels: Sequence[Path]) -> tuple[tuple[str, ...], ...]:
    """What a closure depends on of each wheel: its name, Requires-Python and Requires-Dist lines as the resolver
    takes them (`resolve.closure_memo.resolution_requires`: not those only an unrequested extra asks for)."""
    metas = [wheel_meta(w) for w in wheels]
    return tuple((m.name, m.requires_python, *lines) for m, lines in zip(metas, resolution_requires(metas), strict=True))


def unbuildable_memo(cache: Path, recipe: Recipe) -> Path:
    """Where bisect remembers that this exact recipe (by its digest) failed to build, so a rerun skips it."""
    return cache / "bisect" / "unbuildable" / f"{recipe_digest(recipe)}.json"


def killed_by_signal(err: BaseException) -> int:
    """The signal that killed the command behind a build error (a negative exit, or 128 + a stop signal as a
    shell or container runtime reports it), 0 when none did."""
    seen: set[int] = set()
    e: BaseException | None = err
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        code = getattr(e, "returncode", None)
        if isinstance(code, int) and (code < 0 or code - 128 in KILL_SIGNALS):
            return -code if code < 0 else code - 128
        e = e.__cause__ or e.__context__
    return 0


def error_tail(err: BaseException, n: int = 20) -> str:
    """An error's last lines (a failed command's output, as the error shows it)."""
    lines = str(err).strip().splitlines()
    return "\n".join(lines[-n:]) if len(lines) > 1 else ""


def busy_cores(built: Sequence[BuiltComponent]) -> float:
    """How many cores the build kept busy (what the bisect spreads its builds by): its busiest compiled
    component's CPU / wall seconds; 0 when nothing was compiled or measured."""
    measured = [b.metrics for b in built if b.source is WheelSource.BUILT]
    return max((m.cpu_seconds / m.wall_seconds for m in measured if m.wall_seconds > 0), default=0.0)


def failed_component(message: str, names: Sequence[str]) -> str:
    """The component a spine error names ("kern@1a2b...", "components.kern", "kern: ...", "building kern ")."""
    for name in sorted(names, key=len, reverse=True):
        if any(p in message for p in (f"{name}@", f"components.{name}.", f"building {name} ")) \
                or message.startswith(f"{name}:"):
            return name
    return ""


def recipe_digest(recipe: Recipe) -> str:
    """What a build's outcome depends on, as far as the recipe says: its resolved text and the identity
    (sha256) of every patch, local or pinned in another repository."""
    parts = [recipe.text]
    for comp in recipe.components:
        parts += [f"{comp.name}\0{p.label}\0{p.sha256}" for p in comp.patches]
    return sha256_bytes("\n".join(parts).encode())


def table_recipes(base: Recipe, derive: Callable[[str], dict[str, Any]]) -> DeriveRecipe:
    """`derive(key)` gives a recipe table (a lock-to-lock step); read it like `base` (name, path, patches)."""
    return lambda key: with_data(base, derive(key))
