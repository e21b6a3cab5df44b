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

Where candidates come from: `bisect.candidates` (a component's first-parent commits) and `bisect.lockdiff`
(the differences between two locks). How they are built and tested: `bisect.builder`, `bisect.testers`.
"""

from __future__ import annotations

import contextlib
import enum
import itertools
import math
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal, Protocol

from toolchain.core.cpu import idle_cores
from toolchain.core.record import field, record, replace
from toolchain.core.regex import Regex
from toolchain.core.serial import Data, from_data, meta, rounded, to_data, to_table
from toolchain.errors import BuildError, ToolError, TransientError, UsageError

IDLE_SLACK = 0.2  # of a core: how far short of a whole idle core a reading may fall and still count as one
AHEAD_NICE = 10  # how much nicer than the bisect a build ahead runs (its thread, so its processes): never the awaited one's rival
SAME_FAILURES = 3  # this many builds in a row failing the same way, and none built yet: the recipe is wrong


class Verdict(enum.Enum):
    """What a bisect step concluded of one candidate: good, bad, or skipped (untestable)."""
    GOOD = "good"
    BAD = "bad"
    SKIP = "skip"


@record
class Candidate:
    """One point of the range bisected: a commit (or a lock difference) with what a report shows of it."""
    key: str            # a commit sha (or, for lock-to-lock, a difference id)
    subject: str = ""
    date: str = ""
    url: str = ""
    merge: bool = False

    @property
    def short(self) -> str:
        """The key shortened to 12 characters, as git shows a commit."""
        return self.key[:12]


# where a candidate's wheels came from: "compiled" | "prebuilt" (a per-commit wheel) | "downloaded" (the remote
# cache) | "cached" ("": not known, as a state file of an older version, or a failed build)
BuildSource = Literal["", "compiled", "prebuilt", "downloaded", "cached"]


@record
class BuildOutcome:
    """What building one candidate gave: success, the lock and wheels written, the log, and why it failed."""
    ok: bool
    lock_path: Path | None = field(default=None, metadata=meta(key="lock"))
    wheels: tuple[Path, ...] = ()
    log: Path | None = None
    reason: str = ""        # why the build failed (one line)
    cached: bool = False    # nothing was compiled: every wheel came from the cache
    source: BuildSource = ""
    # cores the compile kept busy (CPU / wall seconds); 0: nothing compiled or not measured
    cores: float = field(default=0.0, metadata=meta(dump=rounded(2)))
    tail: str = ""          # a failed build: the error's last lines


@record
class TestOutcome:
    """What testing one built candidate gave: its verdict, why, the log and the test output's last lines."""
    __test__ = False  # not a pytest class
    verdict: Verdict
    reason: str = ""
    log: Path | None = None
    tail: str = ""           # the test's last lines (bisect.testers.TAIL)
    code: int | None = None  # a test command's exit code


class Builder(Protocol):
    """What bisect asks of a builder: build the candidate with a given key."""
    def build(self, key: str) -> BuildOutcome:
        """Build one candidate. A failed build returns ok=False (it is skipped); raise only to abort."""


class Tester(Protocol):
    """What bisect asks of a tester: a verdict on one built candidate."""
    def test(self, candidate: Candidate, build: BuildOutcome) -> TestOutcome | Verdict:
        """Test one built candidate."""


@record
class StepRecord:
    """One step of a bisect as the state file and report keep it: candidate, verdict, reason and timings."""
    number: int
    key: str
    verdict: Verdict
    reason: str = ""
    build_failed: bool = False
    prefetched: bool = False    # its build had started ahead (during an earlier test, or spread)
    cached: bool = False
    source: BuildSource = ""    # its build's wheels (BuildOutcome.source)
    build_seconds: float = field(default=0.0, metadata=meta(dump=rounded(3)))  # time this step waited for its build
    test_seconds: float = field(default=0.0, metadata=meta(dump=rounded(3)))
    lock: str = ""
    remaining: int = 0          # untested candidates left in the range after this step
    log: str = ""               # the test's log (a build that failed: its build's logs)
    tail: str = ""              # the test's last lines (a build that failed: why)
    endpoint: str = ""          # "good" | "bad": the check of a given end before bisecting (not a step)


@record
class BisectState:
    """A bisect in progress: the candidates, the verdicts so far, the steps and builds; saved after each step."""
    candidates: tuple[Candidate, ...]
    verdicts: Mapping[str, tuple[Verdict, str]]     # key -> (verdict, reason)
    steps: tuple[StepRecord, ...] = ()
    builds: Mapping[str, BuildOutcome] = field(default_factory=dict)
    finished: bool = False
    checks: tuple[StepRecord, ...] = ()              # the given ends, built and tested before bisecting

    @classmethod
    def start(cls, candidates: Sequence[Candidate], builds: Mapping[str, BuildOutcome]) -> BisectState:
        """`builds`: builds already known (e.g. the locks the ends came from)."""
        return cls(tuple(candidates), {candidates[0].key: (Verdict.GOOD, "given as good"),
                                       candidates[-1].key: (Verdict.BAD, "given as bad")}, builds=dict(builds))

    def without_build_failures(self) -> BisectState:
        """This state with the candidates skipped for a failed build untested again (and no longer finished)."""
        failed = {s.key for s in self.steps if s.build_failed}
        return replace(self, verdicts={k: v for k, v in self.verdicts.items() if k not in failed},
                       steps=tuple(s for s in self.steps if not s.build_failed),
                       builds={k: b for k, b in self.builds.items() if k not in failed},
                       finished=self.finished and not failed)

    def marks(self) -> list[Verdict | None]:
        """The verdict of each candidate in order, None where it is not tested yet."""
        return [self.verdicts.get(c.key, (None, ""))[0] for c in self.candidates]

    def bounds(self) -> tuple[int, int]:
        """(last known good, first known bad after it) as indices."""
        return _bounds(self.marks())

    def pending(self) -> int:
        """How many candidates between the last good and the first bad are still untested."""
        lo, hi = self.bounds()
        marks = self.marks()
        return sum(1 for i in range(lo + 1, hi) if marks[i] is None)

    def to_dict(self) -> dict[str, Data]:
        """The state file's table: the fields, with each verdict as {verdict, reason}."""
        return {**to_table(self), "verdicts": {k: {"verdict": v.value, "reason": r} for k, (v, r) in self.verdicts.items()}}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> BisectState:
        verdicts = {k: (Verdict(v["verdict"]), v.get("reason", "")) for k, v in d["verdicts"].items()}
        return from_data(cls, {k: v for k, v in d.items() if k != "verdicts"}, given={"verdicts": verdicts})


def _skipped_data(skipped: tuple[tuple[Candidate, str], ...]) -> Data:
    return to_data([{**to_table(c), "reason": r} for c, r in skipped])


@record
class BisectResult:
    """A finished bisect: the first bad and last good candidates (or the range skips hide) and every step."""
    first_bad: Candidate | None                      # None when skips hide the boundary
    last_good: Candidate
    possible: tuple[Candidate, ...]                  # the first bad is one of these (just first_bad when found)
    # every skipped candidate and why (written as the candidate's table with its `reason`)
    skipped: tuple[tuple[Candidate, str], ...] = field(metadata=meta(dump=_skipped_data))
    steps: tuple[StepRecord, ...]
    good_build: BuildOutcome | None = None
    bad_build: BuildOutcome | None = None
    # the build counts, written as one table `builds`
    builds_needed: int = field(default=0, metadata=meta(key="builds.needed"))  # waited for (steps and ends)
    builds_speculative: int = field(default=0, metadata=meta(key="builds.speculative"))  # started ahead, unused
    builds_compiled: int = field(default=0, metadata=meta(key="builds.compiled"))  # not cache hits
    checks: tuple[StepRecord, ...] = ()  # the given ends' checks (`Bisector(check_ends=True)`)

    @property
    def found(self) -> bool:
        """Whether the first bad candidate was found (skips may hide it among `possible`)."""
        return self.first_bad is not None

    def to_dict(self) -> dict[str, Data]:
        """The report's table: `found`, then the fields (the build counts as one table `builds`)."""
        return {"found": self.found, **to_table(self)}


class BisectHandler:
    """Receives the events of a `Bisector` and does all reporting. Every method is optional."""

    def started(self, state: BisectState) -> None:
        """The bisect starts (or resumes) with `state`."""

    def building(self, candidate: Candidate) -> None:
        """The build of `candidate` for the current step begins."""

    def prefetching(self, candidate: Candidate) -> None:
        """A build of `candidate` begins ahead, for a step that may need it."""

    def testing(self, candidate: Candidate) -> None:
        """The test of the built `candidate` begins."""

    def checked(self, record: StepRecord, state: BisectState) -> None:
        """A given end (good or bad) was built and tested before bisecting."""

    def step(self, record: StepRecord, state: BisectState) -> None:
        """A step gave a good or bad verdict."""

    def skip(self, record: StepRecord, state: BisectState) -> None:
        """A candidate was skipped: it could not be built or tested."""

    def finished(self, result: BisectResult) -> None:
        """The bisect ended with `result`."""

    def interrupted(self, state: BisectState, error: BaseException) -> None:
        """The bisect stopped at `state` by a signal or `error`."""


class Bisector:
    """`run()` bisects `candidates` (good first, bad last). `state`: a saved state to continue; `persist`:
    called with the state after every change; `jobs` > 1 lets builds start ahead (the module's docstring:
    spread over the range, or while a test runs) as `idle()` permits: the cores other processes leave idle
    (`core.cpu.idle_cores`), read when the bisect starts, then when a build ahead may start; it must not
    block. `jobs` = 1 builds nothing ahead. `builds`: builds already known (the ends' locks); `build_ends`:
    build the last good and first bad candidates if no step did (for their locks); `check_ends`: build and
    test both given ends first, stopping (`EndpointError`) unless good tests good and bad tests bad."""

    def __init__(self, candidates: Sequence[Candidate], builder: Builder, tester: Tester,
                 handler: BisectHandler | None = None, *, state: BisectState | None = None,
                 persist: Callable[[BisectState], None] | None = None, jobs: int = 1,
                 idle: Callable[[], float] | None = None, build_ends: bool = True,
                 builds: Mapping[str, BuildOutcome] | None = None, check_ends: bool = False) -> None:
        candidates = tuple(candidates)
        _check_candidates(candidates)
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

    # ---- driving ----------------------------------------------------------------------------------
    def run(self) -> BisectResult:
        """Run the bisect to its end: test the given ends, then step (building ahead in spare threads) until found."""
        # _spread and _prefetch keep the count; threads to spare for the step's own build and for builds ahead
        # that no step needs any more, finishing (threads start when needed)
        self._pool = ThreadPoolExecutor(2 * self.jobs, thread_name_prefix="prefetch") if self.jobs > 1 else None
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
            result = self._finish()
            clean = True
        except BaseException as exc:
            self.handler.interrupted(self.state, exc)
            raise
        finally:
            if self._pool is not None:
                self._pool.shutdown(wait=clean, cancel_futures=True)
        self.handler.finished(result)
        return result

    def next_index(self) -> int | None:
        """The index of the untested candidate nearest the middle of the range; None when only skipped ones are left."""
        lo, hi = self.state.bounds()
        return _pick(lo, hi, self.state.marks())

    def _step(self, index: int) -> None:
        cand = self.state.candidates[index]
        if self._width > 1 and not self._ready(cand.key):
            self._spread(index)
        record = self._try(cand, lambda: self._prefetch(index))
        verdict, reason = record.verdict, record.reason
        state = replace(self.state, verdicts={**self.state.verdicts, cand.key: (verdict, reason)})
        record = replace(record, number=len(state.steps) + 1, remaining=state.pending())
        self._save(replace(state, steps=(*state.steps, record)))
        (self.handler.skip if verdict is Verdict.SKIP else self.handler.step)(record, self.state)
        self._check_systematic_failure()

    def _try(self, cand: Candidate, while_testing: Callable[[], None] = lambda: None) -> StepRecord:
        """Build and test `cand` (a failed build is a skip): its record, not yet numbered nor saved."""
        prefetched = cand.key in self._futures
        self.handler.building(cand)
        started = time.monotonic()
        build = self._build(cand.key)
        build_seconds = time.monotonic() - started
        test_seconds = 0.0
        if not build.ok:
            outcome = TestOutcome(Verdict.SKIP, f"build failed: {build.reason or 'see the build log'}", build.log,
                                  tail=build.tail)
        else:
            while_testing()
            self.handler.testing(cand)
            started = time.monotonic()
            tested = self.tester.test(cand, build)
            test_seconds = time.monotonic() - started
            outcome = TestOutcome(tested) if isinstance(tested, Verdict) else tested
        return StepRecord(number=0, key=cand.key, verdict=outcome.verdict, reason=outcome.reason,
                          build_failed=not build.ok, prefetched=prefetched, cached=build.cached, source=build.source,
                          build_seconds=build_seconds, test_seconds=test_seconds,
                          lock=_str(build.lock_path) or "", log=_str(outcome.log) or "", tail=outcome.tail)

    def _check_ends(self) -> None:
        """Build and test the given ends before bisecting (cached builds cost nothing): good must test good and
        bad must test bad, else `EndpointError` (exit 2) naming the end, its verdict and its test's last lines.
        A passed check is saved, so a resumed bisect does not repeat it."""
        cands = self.state.candidates
        done = {r.endpoint for r in self.state.checks}
        todo = [(name, c) for name, c in (("good", cands[0]), ("bad", cands[-1])) if name not in done]
        bad_key = cands[-1].key
        if self._pool is not None and len(todo) == 2 and self._known(bad_key) is None and bad_key not in self._futures:
            self._start(cands[-1], ahead=False)  # the bad end builds beside the good one (awaited next)
            mid = self.next_index()
            if mid is not None and self.jobs >= 3 and self._known(cands[mid].key) is None:
                self._start(cands[mid])  # the first midpoint beside them, niced: the ends cost no wall time
        for name, cand in todo:
            record = replace(self._try(cand), endpoint=name)
            expected = Verdict.GOOD if name == "good" else Verdict.BAD
            self.handler.checked(record, self.state)
            if record.verdict is not expected:
                raise EndpointError(name, cand, record)
            self._save(replace(self.state, checks=(*self.state.checks, record)))

    def _check_systematic_failure(self) -> None:
        """Stop when every build so far failed, the last SAME_FAILURES the same way (commit ids aside):
        that is the recipe or the machine, not the commits. The phase starts over when resumed."""
        steps = self.state.steps
        if len(steps) < SAME_FAILURES or not all(s.build_failed for s in steps):
            return
        if len({_HEX.sub("<id>", s.reason) for s in steps[-SAME_FAILURES:]}) != 1:
            return
        cands = self.state.candidates
        self._save(BisectState.start(cands, {c.key: self.state.builds[c.key] for c in (cands[0], cands[-1])
                                             if c.key in self.state.builds}))
        raise BuildError(f"the first {len(steps)} builds all failed the same way: {steps[-1].reason}",
                         hint="that is the recipe or the build machine, not the commits: make the stack build "
                              "at the good commit (`toolchain build`), then resume; the bisect starts over")

    def _finish(self) -> BisectResult:
        lo, hi = self.state.bounds()
        cands = self.state.candidates
        hidden = tuple(cands[i] for i in range(lo + 1, hi))  # all skipped, or the loop would go on
        good_build = bad_build = None
        if self.build_ends:
            good_build, bad_build = self._end_build(cands[lo]), self._end_build(cands[hi])
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
            builds_compiled=sum(1 for o in outcomes if not o.cached), checks=self.state.checks)

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
            future.set_result(self.builder.build(key))
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
        self._futures[cand.key] = self._pool.submit(_at_nice, AHEAD_NICE if ahead else 0, self.builder.build,
                                                    cand.key)

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
        for i in _splits(lo, hi, marks, points | {index}, self._width - running):
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
        nexts = [i for i in (_pick(index, hi, marks), _pick(lo, index, marks)) if i is not None]
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


_HEX = Regex(r"[0-9a-f]{7,}")


class EndpointError(UsageError):
    """A given end does not test as given: good must test good, bad must test bad (a build that fails is a
    skip). Exit 2, final: the range or the test is wrong, so bisecting it would name a wrong commit."""

    final = True

    def __init__(self, name: str, cand: Candidate, record: StepRecord) -> None:
        other = "bad" if name == "good" else "good"
        what = (f"does not build ({record.reason.removeprefix('build failed: ')})" if record.build_failed
                else f"tests {record.verdict.value} ({record.reason}), not {name}")
        lines = "\n".join("    " + line for line in record.tail.splitlines())
        super().__init__(f"the {name} end {_describe(cand)} {what}" + (f"\n  log: {record.log}" if record.log else "")
                         + (f"\n  last lines:\n{lines}" if lines else ""),
                         hint=(f"make the stack build at {cand.short} or give another --{name}" if record.build_failed
                               else f"give a --{name} that tests {name}, or a test that tells the two apart (it "
                                    f"exits 0 on good, 1 on {other.replace('good', 'bad')})")
                              + "; --no-check-endpoints skips this check if you know better")
        self.endpoint, self.candidate, self.record = name, cand, record


def _at_nice(increment: int, build: Callable[[str], BuildOutcome], key: str) -> BuildOutcome:
    """`build(key)` in this (pool) thread at the bisect's nice value + `increment` (Linux: nice is per thread
    and a child starts with its thread's), the thread's own value restored after where allowed."""
    tid = threading.get_native_id()
    base = os.getpriority(os.PRIO_PROCESS, os.getpid())
    with contextlib.suppress(OSError):  # no per-thread priority here: the build runs at the bisect's
        os.setpriority(os.PRIO_PROCESS, tid, min(19, base + increment))
    try:
        return build(key)
    finally:
        with contextlib.suppress(OSError):  # a pool thread is reused for an awaited build
            os.setpriority(os.PRIO_PROCESS, tid, base)


def resumable(error: BaseException) -> bool:
    """Whether a bisect stopped by `error` can go on with `--resume`: a stop (Ctrl-C, a signal), a failure of
    the surroundings (`TransientError`), a build error of the machine; not a configuration error (exit 2, or
    a ToolError marked `final`), which the same options would meet again."""
    if isinstance(error, TransientError) or not isinstance(error, ToolError):
        return True
    return not getattr(error, "final", error.return_code == 2)


def _describe(cand: Candidate) -> str:
    return f"{cand.short} ({cand.subject})" if cand.subject else cand.short


def _check_candidates(candidates: tuple[Candidate, ...]) -> None:
    if len(candidates) < 2 or candidates[0].key == candidates[-1].key:
        key = candidates[0].key if candidates else "?"
        raise UsageError(f"nothing to bisect: good and bad are the same ({key[:12]})",
                         hint="pass a --good that is older than --bad")
    keys = [c.key for c in candidates]
    if len(set(keys)) != len(keys):
        dup = next(k for k in keys if keys.count(k) > 1)
        raise UsageError(f"candidate {dup[:12]} appears twice in the range")


def _bounds(marks: Sequence[Verdict | None]) -> tuple[int, int]:
    hi = next(i for i, m in enumerate(marks) if m is Verdict.BAD)
    lo = max(i for i in range(hi) if marks[i] is Verdict.GOOD)
    return lo, hi


def _pick(lo: int, hi: int, marks: Sequence[Verdict | None]) -> int | None:
    """The untested index nearest the middle of (lo, hi); None when only skipped ones are left."""
    untested = [i for i in range(lo + 1, hi) if marks[i] is None]
    if not untested:
        return None
    mid = (lo + hi) / 2
    return min(untested, key=lambda i: (abs(i - mid), i))


def _splits(lo: int, hi: int, marks: Sequence[Verdict | None], points: set[int], count: int) -> list[int]:
    """Up to `count` indices to build, one after the other the untested index nearest the middle of the largest
    gap (the most untested indices strictly inside; ties: the lowest) between lo, `points` and hi."""
    edges, new = sorted({lo, hi, *points}), []
    for _ in range(count):
        size, _lowest, a, b = max((sum(1 for i in range(a + 1, b) if marks[i] is None), -a, a, b)
                                  for a, b in itertools.pairwise(edges))
        index = _pick(a, b, marks) if size else None
        if index is None:
            break
        new.append(index)
        edges = sorted((*edges, index))
    return new


def steps_left(pending: int) -> int:
    """Tests still needed, at most, to settle `pending` untested candidates (no skips)."""
    return math.ceil(math.log2(pending + 1)) if pending > 0 else 0


def first_line(err: BaseException | str) -> str:
    """An error's first line: what a step's reason, a log line or a skip shows."""
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def _str(p: Path | None) -> str | None:
    return None if p is None else str(p)
