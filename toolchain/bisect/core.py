"""Bisect core: find the first bad candidate, knowing nothing of how builds are made or tested.

`Bisector(candidates, builder, tester, handler)`: `candidates[0]` is known good, `candidates[-1]` known
bad. Each step builds the untested candidate nearest the middle of the range (`builder.build(key)`), tests
it (`tester.test(candidate, build)`) and tells the handler, which does all reporting. A failed build or a
SKIP verdict skips the candidate, as `git bisect skip` does; skips next to the boundary leave a set of
possible first-bad candidates instead of one. After every step the state goes to `persist` (atomically, see
`bisect.state.StateFile`), so an interrupted bisect resumes where it stopped.

Building ahead (`jobs` > 1; the builder must be thread-safe for distinct keys), in a thread pool:
- spread: a build that keeps fewer cores busy than the machine has idle (a single-threaded `pip wheel` of a
  pure-Python component) leaves cores to other builds. How many cores one build keeps busy is measured (the
  first compiled build's CPU over wall seconds, rounded, at least 1); W = min(jobs, idle cores / that) builds
  are then kept in flight for the untested candidates of the range: when a step has to wait for its build,
  new ones start at the midpoint of the largest gap between the ends of the range and the candidates built
  or building (the midpoint's halves first: with W = 2 the step's midpoint and one quarter point). Steps
  still test the candidate nearest the middle, so they are plain bisection's; the others are speculative,
  and about half of them are tested next: ~1.5 levels per build time on 2 cores instead of 1.
- while a step's test runs: the builds for both possible next midpoints, when W is 1 (a build that keeps
  every core busy, as a real kernel build does with MAX_JOBS; or none compiled yet) and idle cores leave one
  for the test (a GPU smoke test leaves the CPUs idle).

Idle cores are the machine's less the other processes' load: the bisect's own builds, ahead or awaited, are
its expected load, not another user's (`core.cpu.idle_cores` counts its live descendants as its own).

Checking the given ends (`check_ends`) with `jobs` > 1: beside the steps, not before them, from when the first
step's build is done (what they share with it is in the compiler cache then: started with it, each compiled it
all again). Each end is built (at AHEAD_NICE) and tested in a thread of its own while the steps go on, its test
never beside a step's (one test at a time: a tester need not be thread-safe); a wrong end stops the bisect when
its check ends, the steps made meanwhile discarded; the result waits for both checks. With `jobs` = 1 both are
checked first. When only the ends' checks are left, the bisect waits for them: they go on at its own
nice value (`priority.hurry`), no longer starved at AHEAD_NICE behind other work.

Off the critical path: a builder that defers work a step's verdict does not need (a `Completer`: the runtime
closure, when the test does not install it) marks the build `deferred`; after every step the locks the result
may still name (the last good and first bad so far) are completed in the background at COMPLETE_NICE (the
first at the bisect's own nice value: it fills the caches the later ones and the result need; the others wait
until its resolution asked the indexes), the two at once (COMPLETING threads), with NEAR_STEPS tests left at
most the builds ahead between them too and the step's own while it is tested (as they are done: one of them is
named but for a skip), then at the bisect's own nice value (the result is about to wait for them), and when the
bisect ends the two it names are completed if they are not yet, waiting for a completion already running for
one rather than starting another (`Spent.resolve_waited`).

Where candidates come from: `bisect.candidates` (a component's first-parent commits) and `bisect.lockdiff`
(the differences between two locks). How they are built and tested: `bisect.builder`, `bisect.testers`.
"""

from __future__ import annotations

import contextlib
import functools
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

from toolchain.bisect.midpoints import pick, splits, steps_left
from toolchain.bisect.model import (
    BisectHandler,
    BisectResult,
    BisectState,
    Builder,
    BuildOutcome,
    BuildSource,
    Candidate,
    Completer,
    Spent,
    StepRecord,
    Tester,
    TestOutcome,
    Verdict,
)
from toolchain.bisect.priority import AHEAD_NICE, COMPLETE_NICE, at_nice, hurry
from toolchain.bisect.stops import EndpointError, check_candidates, first_line, resumable, systematic_failure
from toolchain.core.cpu import idle_cores
from toolchain.core.record import replace
from toolchain.errors import UsageError

__all__ = ["BisectHandler", "BisectResult", "BisectState", "Bisector", "BuildOutcome", "BuildSource", "Builder",
           "Candidate", "Completer", "EndpointError", "Spent", "StepRecord", "TestOutcome", "Tester", "Verdict",
           "first_line", "resumable", "steps_left"]

IDLE_SLACK = 0.2  # of a core: how far short of a whole idle core a reading may fall and still count as one
COMPLETING = 2  # background completions at once: the last good and the first bad so far
NEAR_STEPS = 2  # tests left at most when the builds ahead between the ends are completed too (as they are done)
FILL_POLL = 0.05  # seconds: how often a completion waiting for the first one looks whether it may start


class Bisector:
    """`run()` bisects `candidates` (good first, bad last). `state`: a saved state to continue; `persist`:
    called with the state after every change; `jobs` > 1 lets builds start ahead (the module's docstring:
    spread over the range, or while a test runs) as `idle()` permits: the cores other processes leave idle
    (`core.cpu.idle_cores`), read when the bisect starts, then when a build ahead may start; it must not
    block. `jobs` = 1 builds nothing ahead. `builds`: builds already known (the ends' locks); `build_ends`:
    build the last good and first bad candidates if no step did (for their locks); `check_ends`: build and
    test both given ends, stopping (`EndpointError`) unless good tests good and bad tests bad: first, with
    `jobs` = 1; beside the steps with `jobs` > 1 (built at AHEAD_NICE in threads of their own, tested one test
    at a time with the steps'), a wrong end then discarding the steps made meanwhile."""

    def __init__(self, candidates: Sequence[Candidate], builder: Builder, tester: Tester,
                 handler: BisectHandler | None = None, *, state: BisectState | None = None,
                 persist: Callable[[BisectState], None] | None = None, jobs: int = 1,
                 idle: Callable[[], float] | None = None, build_ends: bool = True,
                 builds: Mapping[str, BuildOutcome] | None = None, check_ends: bool = False) -> None:
        candidates = tuple(candidates)
        check_candidates(candidates)
        if state is not None and [c.key for c in state.candidates] != [c.key for c in candidates]:
            raise UsageError("the saved bisect state is for a different range of candidates",
                             hint="start a new bisect with another --state file, or resume with the saved options")
        self.state = state or BisectState.start(candidates, builds or {})
        self.builder, self.tester = builder, tester
        self.handler = handler or BisectHandler()
        self.persist = persist
        self.jobs = max(1, jobs)
        self.idle = idle or idle_cores
        self.build_ends = build_ends
        self.check_ends = check_ends
        self._futures: dict[str, Future[BuildOutcome]] = {}
        self._used: set[str] = set()
        self._pool: ThreadPoolExecutor | None = None
        self._width = 0  # builds kept in flight (W): 0 until a compiled build measured how many cores one keeps busy
        self._completer = builder if isinstance(builder, Completer) else None
        self._completing: dict[str, Future[BuildOutcome]] = {}  # claimed by a background job: running or done
        self._jobs: list[Future[BuildOutcome | None]] = []  # background jobs, each to claim an end when it starts
        self._completers: set[int] = set()  # the native ids of the threads completing one now
        self._filled = False  # a background completion ended: the caches it fills are filled
        self._claims = threading.Lock()
        self._ending = False
        self._background: ThreadPoolExecutor | None = None
        self._resolve = [0.0, 0.0]  # seconds completing locks: all, and waited for
        self._near = False  # at most NEAR_STEPS tests left: completions run at the bisect's own nice value
        self._filling = False  # a completion runs while none has ended (the others wait: `_complete_job`)
        self._caches_filled: Callable[[], bool] = getattr(builder, "caches_filled", lambda: False)
        self._resolve_lock = threading.Lock()  # (background completions add to it at once)
        self._ends: dict[str, tuple[Candidate, Future[tuple[StepRecord, BuildOutcome]]]] = {}  # checked beside the steps
        self._ends_pool: ThreadPoolExecutor | None = None
        self._ends_todo: list[tuple[str, Candidate]] = []  # to check beside the steps once a build is done
        self._checkers: set[int] = set()  # the native ids of the threads checking an end now
        self._test_lock = threading.Lock()  # one test at a time: an end's (in its thread) and a step's
        self._end_wait = 0.0
        self._started = 0.0

    # ---- driving ----------------------------------------------------------------------------------
    def run(self) -> BisectResult:
        """Run the bisect to its end: test the given ends, then step (building ahead in spare threads) until found."""
        # _spread and _prefetch keep the count; threads to spare for the step's own build and for builds ahead
        # that no step needs any more, finishing (threads start when needed)
        self._pool = ThreadPoolExecutor(2 * self.jobs, thread_name_prefix="prefetch") if self.jobs > 1 else None
        if self._completer is not None:  # the last good and the first bad so far, at once
            self._background = ThreadPoolExecutor(COMPLETING, thread_name_prefix="complete")
        self._started = time.monotonic()
        clean = False
        try:
            if self._pool is not None:
                self.idle()  # the default measures from one reading to the next: from here
                self._measure(*self.state.builds.values())  # a resumed bisect's builds
            self.handler.started(self.state)
            if self.check_ends:
                self._check_ends()
            while (index := self.next_index()) is not None:
                self._step(index)
                self._checked_ends(wait=False)
            self._checked_ends(wait=True)
            result = self._finish()
            clean = True
        except BaseException as exc:
            self.handler.interrupted(self.state, exc)
            raise
        finally:
            if self._pool is not None:
                self._pool.shutdown(wait=clean, cancel_futures=True)
            if self._ends_pool is not None:
                self._ends_pool.shutdown(wait=False, cancel_futures=True)
            if self._background is not None:  # a completion no lock of the result needs: left to end on its own
                self._background.shutdown(wait=False, cancel_futures=True)
        self.handler.finished(result)
        return result

    def wait_background(self) -> None:
        """Wait for a background completion still running after `run()` (none the result needs: a benchmark
        waits for it before it measures anything else)."""
        if self._background is not None:
            self._background.shutdown(wait=True)

    def next_index(self) -> int | None:
        """The index of the untested candidate nearest the middle of the range; None when only skipped ones are left."""
        lo, hi = self.state.bounds()
        return pick(lo, hi, self.state.marks())

    def _step(self, index: int) -> None:
        cand = self.state.candidates[index]
        if self._width > 1 and not self._ready(cand.key):
            self._spread(index)
        record = self._try(cand, functools.partial(self._while_testing, index))
        verdict, reason = record.verdict, record.reason
        state = replace(self.state, verdicts={**self.state.verdicts, cand.key: (verdict, reason)})
        record = replace(record, number=len(state.steps) + 1, remaining=state.pending())
        self._save(replace(state, steps=(*state.steps, record)))
        (self.handler.skip if verdict is Verdict.SKIP else self.handler.step)(record, self.state)
        self._check_systematic_failure()
        self._complete_ahead()

    def _while_testing(self, index: int) -> None:
        """While the test of the step at `index` runs (its build done): the ends' checks, the builds ahead and,
        near the end, the completion of its build (the result names it unless a skip hides it: started
        beside its test, not after it)."""
        self._start_ends()
        self._prefetch(index)
        self._complete_ahead()

    def _try(self, cand: Candidate, while_testing: Callable[[], None] = lambda: None,
             build_of: Callable[[str], BuildOutcome] | None = None) -> StepRecord:
        """Build and test `cand` (a failed build is a skip): its record, not yet numbered nor saved. `build_of`:
        how it is built, in a thread of its own (an end checked beside the steps: nothing said to the handler)."""
        prefetched = cand.key in self._futures
        if build_of is None:
            self.handler.building(cand)
        started = time.monotonic()
        build = (build_of or self._build)(cand.key)
        build_seconds = time.monotonic() - started
        test_seconds = 0.0
        if not build.ok:
            outcome = TestOutcome(Verdict.SKIP, f"build failed: {build.reason or 'see the build log'}", build.log,
                                  tail=build.tail)
        else:
            while_testing()
            if build_of is None:
                self.handler.testing(cand)
            with self._test_lock:
                started = time.monotonic()
                tested = self.tester.test(cand, build)
                test_seconds = time.monotonic() - started
            outcome = TestOutcome(tested) if isinstance(tested, Verdict) else tested
        return StepRecord(number=0, key=cand.key, verdict=outcome.verdict, reason=outcome.reason,
                          build_failed=not build.ok, prefetched=prefetched, cached=build.cached, source=build.source,
                          build_seconds=build_seconds, test_seconds=test_seconds,
                          lock=str(build.lock_path or ""), log=str(outcome.log or ""), tail=outcome.tail)

    def _check_ends(self) -> None:
        """Build and test the given ends (cached builds cost nothing): good must test good and bad must test
        bad, else `EndpointError` (exit 2) naming the end, its verdict and its test's last lines. A passed check
        is saved, so a resumed bisect does not repeat it. `jobs` = 1: both here, before bisecting; else each in
        a thread of its own, beside the steps (`_checked_ends` takes them in)."""
        cands = self.state.candidates
        done = {r.endpoint for r in self.state.checks}
        todo = [(name, c) for name, c in (("good", cands[0]), ("bad", cands[-1])) if name not in done]
        if self._pool is not None and todo:
            self._ends_todo = todo
            self._start_ends()
            return
        for name, cand in todo:
            self._take_check(name, cand, self._try(cand), None)

    def _start_ends(self, *, now: bool = False) -> None:
        """Start the ends' checks beside the steps once a build is done (`now`: at once): the first step's
        build fills the compiler cache alone, and the ends' builds then take from it what they share with it
        (started beside it, each compiled everything it shares from scratch: a cold build's CPU two more times,
        a oneDNN's thousands of CPU-seconds)."""
        if not self._ends_todo or not (now or self.state.steps or any(b.ok for b in self.state.builds.values())):
            return
        todo, self._ends_todo = self._ends_todo, []
        self._ends_pool = ThreadPoolExecutor(len(todo), thread_name_prefix="check-end")
        for name, cand in todo:
            self._ends[name] = (cand, self._ends_pool.submit(self._check_beside, cand))

    def _check_beside(self, cand: Candidate) -> tuple[StepRecord, BuildOutcome]:
        """(An end's thread) its record and build: built at AHEAD_NICE (a step's build comes first; the ends are
        needed when the bisect ends), tested when no step's test runs."""
        built: list[BuildOutcome] = []
        with self._claims:
            self._checkers.add(threading.get_native_id())

        def build_of(key: str) -> BuildOutcome:
            built.append(self._known(key) or at_nice(AHEAD_NICE, functools.partial(_timed, self.builder.build), key))
            return built[-1]

        try:
            return self._try(cand, build_of=build_of), built[0]
        finally:
            with self._claims:
                self._checkers.discard(threading.get_native_id())

    def _checked_ends(self, *, wait: bool) -> None:
        """Take in the ends checked beside the steps that are done (`wait`: all of them, started now if they
        were not yet): a wrong one discards the steps made meanwhile (from the state saved: they assumed it
        right) and stops (`EndpointError`)."""
        self._start_ends(now=wait)
        if wait and self._ends:  # the result waits for them now: at the bisect's own nice value, as a step
            with self._claims:
                hurry(self._checkers, AHEAD_NICE)
        for name, (cand, future) in list(self._ends.items()):
            if not (wait or future.done()):
                continue
            record, build = future.result()  # (an error there, e.g. a test that cannot run: raised here)
            del self._ends[name]
            self._take_check(name, cand, record, build)

    def _take_check(self, name: str, cand: Candidate, record: StepRecord, build: BuildOutcome | None) -> None:
        record = replace(record, endpoint=name)
        if build is not None and build.ok and self.state.builds.get(cand.key) != build:
            self._measure(build)
            self._save(replace(self.state, builds={**self.state.builds, cand.key: build}))
        expected = Verdict.GOOD if name == "good" else Verdict.BAD
        self.handler.checked(record, self.state)
        if record.verdict is not expected:
            if self.state.steps:  # made on a wrong end: none of their verdicts stands
                ends = {c.key for c in (self.state.candidates[0], self.state.candidates[-1])}
                self._save(replace(self.state, steps=(),
                                   verdicts={k: v for k, v in self.state.verdicts.items() if k in ends}))
            raise EndpointError(name, cand, record)
        self._save(replace(self.state, checks=(*self.state.checks, record)))
        self._complete_ahead()

    def _check_systematic_failure(self) -> None:
        """Stop (`stops.systematic_failure`) when every build so far failed the same way; the phase starts over
        when resumed."""
        stop = systematic_failure(self.state.steps)
        if stop is not None:
            cands = self.state.candidates
            self._save(BisectState.start(cands, {c.key: self.state.builds[c.key] for c in (cands[0], cands[-1])
                                                 if c.key in self.state.builds}))
            raise stop

    def _finish(self) -> BisectResult:
        lo, hi = self.state.bounds()
        cands = self.state.candidates
        hidden = tuple(cands[i] for i in range(lo + 1, hi))  # all skipped, or the loop would go on
        good_build = bad_build = None
        if self.build_ends:
            started = time.monotonic()
            good_build, bad_build = self._end_build(cands[lo]), self._end_build(cands[hi])
            self._end_wait = time.monotonic() - started
            good_build, bad_build = self._complete_ends((cands[lo].key, cands[hi].key))
        self._save(replace(self.state, finished=True))
        skipped = tuple((c, self.state.verdicts[c.key][1]) for c in cands
                        if self.state.verdicts.get(c.key, (None, ""))[0] is Verdict.SKIP)
        outcomes = [f.result() for f in self._futures.values() if f.done() and not f.cancelled()
                    and f.exception() is None]
        return BisectResult(
            first_bad=None if hidden else cands[hi], last_good=cands[lo], possible=(*hidden, cands[hi]),
            skipped=skipped, steps=self.state.steps, good_build=good_build, bad_build=bad_build,
            builds_needed=len(self._used & set(self._futures)),
            builds_speculative=sum(1 for k, f in self._futures.items()
                                   if k not in self._used and (f.running() or f.done()) and not f.cancelled()),
            builds_compiled=sum(1 for o in outcomes if not o.cached), checks=self.state.checks,
            spent=self._spent(outcomes))

    def _spent(self, outcomes: Sequence[BuildOutcome]) -> Spent:
        records = (*self.state.checks, *self.state.steps)
        return Spent(compile=sum(o.seconds for o in outcomes if o.source == "compiled"),
                     test=sum(r.test_seconds for r in records), resolve=self._resolve[0],
                     resolve_waited=self._resolve[1], wait=sum(r.build_seconds for r in records) + self._end_wait,
                     wall=time.monotonic() - self._started)

    # ---- completing deferred builds (the locks the result may name) --------------------------------------
    def _complete_ahead(self) -> None:
        """Take in the background completions that are done; have the current last good and first bad
        candidates (the only tested ones the result may still name) completed where their build is deferred,
        and near the end the builds ahead between them (`_unclaimed`): a job per build not yet claimed, each
        taking, when its thread is free, whichever the result may name *then* (an end named two steps ago may
        be named no longer; one of the same requirements is)."""
        self._harvest()
        if self._background is None:
            return
        with self._claims:
            if not self._near and steps_left(self.state.pending()) <= NEAR_STEPS:  # those running are needed soon
                self._near = True
                hurry(self._completers)
            unclaimed = len(self._unclaimed())
            self._jobs = [j for j in self._jobs if not j.done()]
            queued = sum(1 for j in self._jobs if not j.running())
            for _ in range(unclaimed - queued):
                self._jobs.append(self._background.submit(self._complete_job))

    def _unclaimed(self) -> list[str]:
        """The keys of the builds the result may name whose build is deferred and whose completion nobody took
        yet: the current ends', then, once at most NEAR_STEPS tests are left, the builds ahead done for the
        candidates between them (one of them is the first bad or its good parent but for a skip; completed
        when its build is there, not after the last step)."""
        lo, hi = self.state.bounds()
        cands = self.state.candidates
        near = range(lo + 1, hi) if steps_left(self.state.pending()) <= NEAR_STEPS else range(0)
        keys = [cands[i].key for i in (lo, hi, *near)]
        return [k for k in keys if k not in self._completing and self._deferred(k) is not None]

    def _deferred(self, key: str) -> BuildOutcome | None:
        """The deferred build of `key` to complete: a tested candidate's (the state's), or a build ahead's that
        is done; None when there is none, it failed or it is whole."""
        build = self.state.builds.get(key)
        future = self._futures.get(key)
        if build is None and future is not None and future.done() and not future.cancelled() \
                and future.exception() is None:
            build = future.result()
        return build if build is not None and build.ok and build.deferred else None

    def _complete_job(self) -> BuildOutcome | None:
        """(A background job) `_complete_named` at COMPLETE_NICE, but at the bisect's own nice value while no
        completion of this run has ended: the first fills the caches every later one and the result need (the
        index's answers, metadata built from sdists, the closure's file lists: seconds of network and CPU);
        niced 15, it starved beside the steps' builds and the result waited for the rest of it. Until it has
        ended, or the completer says its resolution asked the indexes (`caches_filled`: the others resolve
        from what they served, while the first reads its closure's file lists), one runs at a time: two
        started on empty caches each asked the index for every package and built the same sdists' metadata
        (twice the resolve's CPU beside the steps' builds). Once at most NEAR_STEPS tests are left, at the
        bisect's own nice value too: what it completes is about to be named, and the result would wait for it."""
        while not self._filled and not self._caches_filled():
            with self._claims:
                first, self._filling = not self._filling, True
            if first:
                try:
                    return at_nice(0, self._complete_named, "")
                finally:
                    self._filling = False  # (a first that claimed nothing: the next one is first)
            time.sleep(FILL_POLL)
        return at_nice(0 if self._near else COMPLETE_NICE, self._complete_named, "")

    def _complete_named(self, _: str) -> BuildOutcome | None:
        """(A background thread) complete an end the result may name now, claiming it (None: none left)."""
        with self._claims:
            todo = [] if self._ending else self._unclaimed()
            if not todo:
                return None
            key = todo[0]
            build = self._deferred(key)
            assert build is not None
            future = self._completing[key] = Future[BuildOutcome]()
            future.set_running_or_notify_cancel()
            self._completers.add(threading.get_native_id())
        try:
            done = self._timed_complete(key, build, ahead=not self._certain(key))
        except BaseException as exc:
            future.set_exception(exc)
            raise
        finally:
            with self._claims:
                self._completers.discard(threading.get_native_id())
        self._filled = True
        future.set_result(done)
        return done

    def _certain(self, key: str) -> bool:
        """Whether the result names `key` whatever the verdicts left: the only untested candidate between the
        ends (its test running). Its completion then takes a closure another completion kept for the same
        requirements (`Completer.complete`, not `ahead`): the result would otherwise wait for that."""
        lo, hi = self.state.bounds()
        marks = self.state.marks()
        left = [i for i in range(lo + 1, hi) if marks[i] is None]
        return len(left) == 1 and self.state.candidates[left[0]].key == key

    def _timed_complete(self, key: str, build: BuildOutcome, *, ahead: bool) -> BuildOutcome:
        assert self._completer is not None
        started = time.monotonic()
        try:
            return self._completer.complete(key, build, ahead=ahead)
        finally:
            with self._resolve_lock:
                self._resolve[0] += time.monotonic() - started

    def _harvest(self) -> None:
        done = {k: f.result() for k, f in list(self._completing.items()) if f.done() and f.exception() is None
                and not f.result().deferred}
        if done:
            self._save(replace(self.state, builds={**self.state.builds, **done}))

    def _complete_ends(self, keys: tuple[str, str]) -> tuple[BuildOutcome, BuildOutcome]:
        """The builds of the ends the result names, completed (the background's, waited for where it runs, or
        done now: the two at once), and saved."""
        if self._completer is None:
            return self.state.builds[keys[0]], self.state.builds[keys[1]]
        started = time.monotonic()
        with self._claims:  # no job claims anything now: what runs is waited for, the rest done here
            self._ending = True
            for job in self._jobs:
                job.cancel()
            hurry(self._completers)
        with ThreadPoolExecutor(1, thread_name_prefix="complete-end") as other:
            second = other.submit(self._complete_end, keys[1])
            builds = (self._complete_end(keys[0]), second.result())
        self._save(replace(self.state, builds={**self.state.builds, **dict(zip(keys, builds, strict=True))}))
        self._resolve[1] += time.monotonic() - started
        return builds

    def _complete_end(self, key: str) -> BuildOutcome:
        build = self.state.builds[key]
        future = self._completing.get(key)
        if build.deferred and future is not None:
            with contextlib.suppress(Exception):  # (a failure there: tried again here, raised from here)
                build = future.result()
        if build.deferred and self._completer is not None:
            build = self._timed_complete(key, build, ahead=False)
        return build

    # ---- builds -----------------------------------------------------------------------------------
    def _build(self, key: str) -> BuildOutcome:
        """The build of `key`: a known one (an earlier run's, or a given end), the one started ahead
        (waiting for it), else built now."""
        known = self._known(key)
        if known is not None:
            return known
        future = self._futures.get(key)
        if future is None:
            future = Future[BuildOutcome]()
            future.set_result(_timed(self.builder.build, key))
            self._futures[key] = future
        outcome = future.result()
        self._used.add(key)
        self._measure(outcome)
        self._save(replace(self.state, builds={**self.state.builds, key: outcome}))
        return outcome

    def _known(self, key: str) -> BuildOutcome | None:
        known = self.state.builds.get(key)
        if known is not None and known.ok and (known.lock_path is None or known.lock_path.exists()):
            return known
        return None

    def _ready(self, key: str) -> bool:
        """Whether the build of `key` is there to test without waiting."""
        future = self._futures.get(key)
        return self._known(key) is not None or (future is not None and future.done())

    def _running(self) -> int:
        return sum(1 for f in self._futures.values() if not f.done())

    def _start(self, cand: Candidate, *, ahead: bool = True) -> None:
        """Build `cand` in a pool thread; `ahead` (a build no step waits for yet): at AHEAD_NICE, so that it
        never takes a core from the build or test being waited for (children inherit a thread's nice value)."""
        assert self._pool is not None
        self.handler.prefetching(cand)
        self._futures[cand.key] = self._pool.submit(at_nice, AHEAD_NICE if ahead else 0,
                                                    functools.partial(_timed, self.builder.build), cand.key)

    def _measure(self, *outcomes: BuildOutcome) -> None:
        """W, once a compiled build tells how many cores one keeps busy (CPU / wall seconds, rounded, at least
        1): min(jobs, idle cores / that). A real kernel build keeps them all busy (MAX_JOBS): W = 1 there."""
        cores = next((o.cores for o in outcomes if o.cores > 0), 0.0)
        if self._pool is None or self._width or not cores:
            return
        # (a measured 1.98 idle cores are 2: a reading is never exact, and a core 80 % free is worth a build)
        self._width = max(1, min(self.jobs, math.floor(self.idle() / max(1, math.floor(cores + 0.5)) + IDLE_SLACK)))

    def _spread(self, index: int) -> None:
        """Keep W builds in flight for untested candidates of the range, the step's own (`index`, built here
        unless it is building) among them: each new one at the midpoint of the largest gap between the
        range's ends and the candidates built or building. (A build ahead that no step can need now finishes
        beside them: it started with the last step's build, about when that one ended.)"""
        lo, hi = self.state.bounds()
        marks = self.state.marks()
        cands = self.state.candidates
        for i, cand in enumerate(cands):  # builds waiting for a thread that no step can need now: dropped
            future = self._futures.get(cand.key)
            if future is not None and not (lo < i < hi and marks[i] is None) and future.cancel():
                del self._futures[cand.key]
        points = {i for i in range(lo + 1, hi) if marks[i] is None
                  and (cands[i].key in self._futures or cands[i].key in self.state.builds)}
        running = sum(1 for i in points if not self._ready(cands[i].key)) + (cands[index].key not in self._futures)
        for i in splits(lo, hi, marks, points | {index}, self._width - running):
            self._start(cands[i])

    def _end_build(self, cand: Candidate) -> BuildOutcome:
        if cand.key not in self.state.builds:
            self.handler.building(cand)
        return self._build(cand.key)

    def _prefetch(self, index: int) -> None:
        """Start the builds for both possible next midpoints (if `index` is good / if it is bad), unless the
        builds are spread (W > 1: the next step starts them knowing this one's verdict)."""
        if self._pool is None or self._width > 1:
            return
        lo, hi = self.state.bounds()
        marks = self.state.marks()
        nexts = [i for i in (pick(index, hi, marks), pick(lo, index, marks)) if i is not None]
        todo = [self.state.candidates[i] for i in nexts]
        todo = [c for c in todo if c.key not in self._futures and c.key not in self.state.builds]
        if not todo:
            return
        running = self._running()
        slots = min(self.jobs - 1 - running, int(self.idle()) - 1)  # keep one core for the test
        for cand in todo[:max(0, slots)]:
            self._start(cand)

    def _save(self, state: BisectState) -> None:
        self.state = state
        if self.persist is not None:
            self.persist(state)



def _timed(build: Callable[[str], BuildOutcome], key: str) -> BuildOutcome:
    """`build(key)` with its wall seconds."""
    started = time.monotonic()
    outcome = build(key)
    return replace(outcome, seconds=time.monotonic() - started)
