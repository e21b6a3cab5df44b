"""The bisect core driven by scripted builds and verdicts (no git, no builds)."""

from __future__ import annotations

import json
import math
import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

import pytest

from toolchain.bisect.core import (
    BisectHandler,
    Bisector,
    BisectResult,
    BisectState,
    BuildOutcome,
    Candidate,
    TestOutcome,
    Verdict,
    steps_left,
)
from toolchain.bisect.state import StateFile
from toolchain.core.serial import from_data, to_table
from toolchain.errors import BuildError, RecipeError, UsageError


def key(candidate: Candidate | None) -> str:
    """The key of a result's candidate (there must be one)."""
    assert candidate is not None
    return candidate.key


def state_on_disk(path: Path, phase: str = "commits") -> BisectState:
    """The state of `phase` on disk (there must be one)."""
    state = StateFile(path).load(phase)
    assert state is not None, f"no {phase} state in {path}"
    return state


def idle_reading(cores: float) -> Callable[[], float]:
    """An idle-cores reading that always says `cores`."""
    return lambda: cores


def cands(n: int) -> list[Candidate]:
    return [Candidate(f"c{i:03d}", f"commit {i}") for i in range(n)]


class Builds:
    """Thread-safe scripted builder: `broken` keys fail to build; a build that works reports it kept `cores`
    busy (0: not measured, as a cache hit); `during(key)` runs inside the build of key (in its thread)."""

    def __init__(self, broken=(), hold: threading.Event | None = None, *, cores: float = 0.0,
                 during=None) -> None:
        self.broken, self.hold, self.cores, self.during = set(broken), hold, cores, during
        self.calls: list[str] = []
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        self.building = 0       # builds in progress now
        self.most_at_once = 0

    def build(self, key: str) -> BuildOutcome:
        with self.changed:
            self.calls.append(key)
            self.building += 1
            self.most_at_once = max(self.most_at_once, self.building)
            self.changed.notify_all()
        try:
            if self.during is not None:
                self.during(key)
        finally:
            with self.changed:
                self.building -= 1
        if key in self.broken:
            return BuildOutcome(False, reason=f"{key}: error: expected ';' before '}}' token")
        return BuildOutcome(True, wheels=(Path(f"/wheels/{key}.whl"),), cores=self.cores)

    def wait_for(self, keys: set[str], timeout: float = 10) -> bool:
        with self.changed:
            return self.changed.wait_for(lambda: keys <= set(self.calls), timeout)


class Verdicts:
    """Scripted tests: bad from index `first_bad` on; `skip` keys cannot be tested."""

    def __init__(self, first_bad: int, skip=(), interrupt_at: int | None = None) -> None:
        self.first_bad, self.skip, self.interrupt_at = first_bad, set(skip), interrupt_at
        self.calls: list[str] = []

    def test(self, cand: Candidate, build: BuildOutcome) -> TestOutcome:
        assert build.ok, "a failed build must never be tested"
        self.calls.append(cand.key)
        if self.interrupt_at is not None and len(self.calls) == self.interrupt_at:
            raise KeyboardInterrupt
        if cand.key in self.skip:
            return TestOutcome(Verdict.SKIP, "cannot test")
        return TestOutcome(Verdict.BAD if int(cand.key[1:]) >= self.first_bad else Verdict.GOOD)


class Events(BisectHandler):
    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    def step(self, record, state) -> None:
        self.seen.append(("step", record.key))

    def skip(self, record, state) -> None:
        self.seen.append(("skip", record.key))

    def prefetching(self, cand) -> None:
        self.seen.append(("prefetch", cand.key))

    def building(self, cand) -> None:
        self.seen.append(("building", cand.key))

    def testing(self, cand) -> None:
        self.seen.append(("testing", cand.key))

    def after_builds_ahead(self) -> set[str]:
        """What each run of builds started ahead came before: a step's build ("building") or its test."""
        kinds = [e[0] for e in self.seen]
        return {next(k for k in kinds[i:] if k != "prefetch") for i, k in enumerate(kinds) if k == "prefetch"}

    def finished(self, result) -> None:
        self.seen.append(("finished", key(result.first_bad) if result.first_bad else ""))

    def interrupted(self, state, error) -> None:
        self.seen.append(("interrupted", type(error).__name__))


def bisect(n: int, first_bad: int, *, broken: Iterable[str] = (), skip: Iterable[str] = (),
           **kw: Any) -> tuple[BisectResult, Builds, Verdicts, Events]:
    builder, tester, events = Builds(broken), Verdicts(first_bad, skip), Events()
    result = Bisector(cands(n), builder, tester, events, **kw).run()
    return result, builder, tester, events


def test_every_boundary_is_found_within_log2_steps():
    for n in range(2, 34):
        for first_bad in range(1, n):
            result, _builder, tester, _ = bisect(n, first_bad)
            assert key(result.first_bad) == f"c{first_bad:03d}", (n, first_bad)
            assert key(result.last_good) == f"c{first_bad - 1:03d}"
            assert len(result.steps) <= math.ceil(math.log2(n - 1)), (n, first_bad, len(result.steps))
            assert len(tester.calls) == len(set(tester.calls)) == len(result.steps)
            assert "c000" not in tester.calls
            assert f"c{n - 1:03d}" not in tester.calls
            assert result.possible == (result.first_bad,)
            assert result.skipped == ()


def test_build_failure_is_a_skip_said_as_such_and_never_tested():
    result, _builder, tester, events = bisect(17, 11, broken={"c008"})
    assert key(result.first_bad) == "c011"
    assert ("skip", "c008") in events.seen
    assert "c008" not in tester.calls
    (skipped, reason), = result.skipped
    assert skipped.key == "c008"
    assert reason.startswith("build failed: c008: error: expected ';'")
    step = next(s for s in result.steps if s.key == "c008")
    assert step.verdict is Verdict.SKIP
    assert step.build_failed
    assert len(result.steps) <= math.ceil(math.log2(16)) + 1  # one more step per skip


def test_skip_just_before_the_boundary_leaves_two_possible():
    result, *_ = bisect(9, 5, broken={"c004"})
    assert result.first_bad is None
    assert not result.found
    assert [c.key for c in result.possible] == ["c004", "c005"]
    assert key(result.last_good) == "c003"


def test_skip_on_the_first_bad_commit_leaves_it_and_the_next():
    result, _, tester, _ = bisect(12, 5, skip={"c005"})
    assert [c.key for c in result.possible] == ["c005", "c006"]
    assert key(result.last_good) == "c004"
    assert "c005" in tester.calls


def test_skips_away_from_the_boundary_still_find_it():
    result, *_ = bisect(33, 25, broken={"c016", "c015", "c017"})
    assert key(result.first_bad) == "c025"
    assert len(result.steps) <= math.ceil(math.log2(32)) + 3


def test_builds_failing_the_same_way_from_the_start_stop_the_bisect_and_reset_it(tmp_path: Path):
    class SameError(Builds):
        def build(self, key):
            self.calls.append(key)
            return BuildOutcome(False, reason=f"kern@{key:0>12}: the wheel is tiny-1.0 but the recipe says dist = 'kern'")

    sf = StateFile(tmp_path / "s.json")
    events = Events()
    builder = SameError()
    with pytest.raises(BuildError, match="the first 3 builds all failed the same way") as err:
        Bisector([Candidate(f"{i:040x}") for i in range(40)], builder, Verdicts(9), events,
                 persist=sf.saver("commits")).run()
    assert "not the commits" in (err.value.hint or "")
    assert len(builder.calls) == 3
    assert events.seen[-1] == ("interrupted", "BuildError")
    assert state_on_disk(sf.path).steps == ()  # resuming starts over

    # different failures (or one success) are ordinary skips
    result, *_ = bisect(40, 30, broken={"c019", "c020", "c018", "c021"})
    assert key(result.first_bad) == "c030"
    assert len(result.skipped) == 4


def test_all_skipped():
    result, builder, tester, events = bisect(6, 3, broken={"c001", "c002", "c003", "c004"})
    assert not result.found
    assert tester.calls == []
    assert [c.key for c in result.possible] == ["c001", "c002", "c003", "c004", "c005"]
    assert sorted(c.key for c, _ in result.skipped) == ["c001", "c002", "c003", "c004"]
    assert sorted(k for k in builder.calls if k not in ("c000", "c005")) == ["c001", "c002", "c003", "c004"]
    assert events.seen[-1] == ("finished", "")


def test_good_equal_to_bad_and_empty_ranges_are_usage_errors():
    c = Candidate("abc", "x")
    for bad_range in ([c, c], [c], []):
        with pytest.raises(UsageError, match="nothing to bisect"):
            Bisector(bad_range, Builds(), Verdicts(1))
    with pytest.raises(UsageError, match="twice"):
        Bisector([Candidate("a"), Candidate("b"), Candidate("a"), Candidate("c")], Builds(), Verdicts(1))


def test_ends_are_built_for_the_good_and_bad_locks_and_a_bare_verdict_is_accepted():
    class Bare:
        def test(self, cand, build):
            return Verdict.GOOD if cand.key < "c004" else Verdict.BAD

    builder = Builds()
    result = Bisector(cands(5), builder, Bare()).run()
    assert key(result.first_bad) == "c004"
    assert key(result.last_good) == "c003"
    assert result.good_build is not None and result.bad_build is not None
    assert result.good_build.wheels == (Path("/wheels/c003.whl"),)
    assert result.bad_build.wheels == (Path("/wheels/c004.whl"),)
    assert builder.calls.count("c004") == 1  # the bad end was built once, as an end
    assert result.builds_needed == len(set(builder.calls))


def test_state_is_on_disk_after_every_step(tmp_path: Path):
    path = tmp_path / "state.json"

    class Check(BisectHandler):
        steps_seen = 0  # (not `checked`: that is a BisectHandler event, which an int would shadow)

        def step(self, record, state):
            on_disk = state_on_disk(path)
            assert len(on_disk.steps) == record.number
            assert on_disk.steps[-1].key == record.key
            assert on_disk.verdicts[record.key][0] is record.verdict
            Check.steps_seen += 1

    sf = StateFile(path)
    result = Bisector(cands(20), Builds(), Verdicts(7), Check(), persist=sf.saver("commits")).run()
    assert Check.steps_seen == len(result.steps) > 0
    assert json.loads(path.read_text())["phases"]["commits"]["finished"] is True


def test_resume_after_an_interruption_mid_run(tmp_path: Path):
    reference, *_ = bisect(64, 41)
    sf = StateFile(tmp_path / "state.json")
    first, events = Verdicts(41, interrupt_at=3), Events()
    with pytest.raises(KeyboardInterrupt):
        Bisector(cands(64), Builds(), first, events, persist=sf.saver("commits")).run()
    assert events.seen[-1] == ("interrupted", "KeyboardInterrupt")
    saved = state_on_disk(sf.path)
    assert len(saved.steps) == 2
    assert not saved.finished

    second = Verdicts(41)
    result = Bisector(cands(64), Builds(), second, state=saved, persist=sf.saver("commits")).run()
    assert key(result.first_bad) == key(reference.first_bad) == "c041"
    assert not set(second.calls) & {s.key for s in saved.steps}  # nothing tested twice
    assert [s.key for s in result.steps] == [s.key for s in reference.steps]
    assert state_on_disk(sf.path).finished

    with pytest.raises(UsageError, match="different range"):
        Bisector(cands(65), Builds(), Verdicts(41), state=saved)


def test_an_error_from_the_builder_stops_the_bisect_and_keeps_the_state(tmp_path: Path):
    class Failing(Builds):
        def build(self, key):
            if len(self.calls) == 2:
                raise RecipeError("recipes/x.toml: components.k.commit: not a full 40-hex commit id")
            return super().build(key)

    sf, events = StateFile(tmp_path / "s.json"), Events()
    with pytest.raises(RecipeError):
        Bisector(cands(30), Failing(), Verdicts(9), events, persist=sf.saver("commits")).run()
    assert events.seen[-1] == ("interrupted", "RecipeError")
    assert len(state_on_disk(sf.path).steps) == 2


def test_while_a_test_runs_both_possible_next_midpoints_are_built():
    # 17 candidates: the first step tests c008; if good the next is c012, if bad c004.
    builder = Builds()
    seen_during_first_test: list[set[str]] = []

    class Waits:
        def test(self, cand, build):
            if not seen_during_first_test:
                assert builder.wait_for({"c004", "c012"}), f"prefetch did not start: {builder.calls}"
                seen_during_first_test.append(set(builder.calls))
            return Verdict.BAD if cand.key >= "c010" else Verdict.GOOD

    events = Events()
    result = Bisector(cands(17), builder, Waits(), events, jobs=3, idle=lambda: 8.0).run()
    assert key(result.first_bad) == "c010"
    assert seen_during_first_test == [{"c008", "c004", "c012"}]
    assert ("prefetch", "c004") in events.seen
    assert ("prefetch", "c012") in events.seen
    assert len(builder.calls) == len(set(builder.calls))  # a prefetched build is used, not rebuilt
    second = result.steps[1]
    assert second.key == "c012"
    assert second.prefetched
    assert result.builds_speculative >= 1
    assert result.builds_needed == len(result.steps)


def test_no_prefetch_without_idle_cores_or_with_one_job():
    for jobs, cores in ((3, 1.0), (1, 64.0)):
        builder = Builds(cores=1.0)  # (one core a build: idle cores would spread builds with jobs > 1)

        class Records:
            during: ClassVar[list[list[str]]] = []

            def test(self, cand, build):
                Records.during.append(list(builder.calls))
                return Verdict.BAD if cand.key >= "c010" else Verdict.GOOD

        Bisector(cands(17), builder, Records(), jobs=jobs, idle=idle_reading(cores)).run()
        # during each test only the candidates already stepped on have been built
        for i, calls in enumerate(Records.during):
            assert len(calls) == i + 1, (jobs, cores, Records.during)


def test_builds_of_one_core_spread_over_the_range_while_the_midpoint_builds():
    # 65 candidates, 2 idle cores, a build keeps one busy: W = 2 once the first build (c032) measured it.
    # c032 is good; the next step builds c048 and, at once, the midpoint of the lower half, c040 (then used:
    # c048 is bad); c044 is built with c042 (not needed: c044 is good), c046 with c045 (needed)
    builder: Builds

    def during(key):
        if key == "c048":
            assert builder.wait_for({"c040"}), f"the quarter point did not start: {builder.calls}"
        if key == "c040":  # (still building when c048 starts: both at once)
            assert builder.wait_for({"c048"})

    builder, tester, events = Builds(cores=1.0, during=during), Verdicts(45), Events()
    result = Bisector(cands(65), builder, tester, events, jobs=3, idle=lambda: 2.0).run()
    plain, *_ = bisect(65, 45)
    assert key(result.first_bad) == "c045"
    assert [s.key for s in result.steps] == [s.key for s in plain.steps]  # the tests are plain bisection's
    assert result.builds_needed == plain.builds_needed == len(result.steps)
    assert builder.most_at_once == 2  # W builds at once, no more
    assert [s.key for s in result.steps if s.prefetched] == ["c040", "c045"]
    assert len(builder.calls) == len(set(builder.calls))
    # spread builds start when a step waits for its own, knowing the last verdict; none while a test runs
    assert events.after_builds_ahead() == {"building"}


def test_spread_bisects_test_what_plain_bisection_does():
    for n in range(2, 40, 3):
        for first_bad in range(1, n):
            broken = {f"c{n // 2:03d}"} if n // 2 not in (first_bad - 1, first_bad) else set()
            plain, *_ = bisect(n, first_bad, broken=broken)
            for idle in (2.0, 8.0):
                builder, tester = Builds(broken, cores=1.0), Verdicts(first_bad)
                result = Bisector(cands(n), builder, tester, jobs=3, idle=idle_reading(idle)).run()
                assert result.first_bad == plain.first_bad and result.possible == plain.possible, (n, first_bad)
                assert [s.key for s in result.steps] == [s.key for s in plain.steps], (n, first_bad, idle)
                assert result.builds_needed == plain.builds_needed
                assert len(builder.calls) == len(set(builder.calls))


def test_builds_that_keep_the_idle_cores_busy_are_not_spread():
    # a build keeps 2 cores busy, 2 are idle: W = 1; builds start ahead only while a test runs (both
    # possible next midpoints if the cores leave one for the test: here one)
    builder, tester, events = Builds(cores=2.0), Verdicts(41), Events()
    result = Bisector(cands(65), builder, tester, events, jobs=3, idle=lambda: 2.0).run()
    assert key(result.first_bad) == "c041"
    assert events.after_builds_ahead() == {"testing"}, events.seen
    assert events.seen[:3] == [("building", "c032"), ("prefetch", "c048"), ("testing", "c032")]


def test_an_idle_reading_a_little_short_of_whole_cores_counts_them():
    # /proc/stat read over a build says 1.98 idle cores on an idle 2-core machine: two 1-core builds fit
    # (measured: the bisect benchmark's readings were 1.98-1.99, and flooring them spread nothing)
    spread = []
    for idle in (1.85, 1.7):
        builder, events = Builds(cores=1.0), Events()
        result = Bisector(cands(65), builder, Verdicts(41), events, jobs=3, idle=idle_reading(idle)).run()
        assert key(result.first_bad) == "c041"
        spread.append(any(kind == "prefetch" for kind, _ in events.seen))
    assert spread == [True, False]


def test_the_idle_cores_are_read_at_the_start_and_once_measured_not_at_each_step():
    idle_calls = []

    def idle() -> float:
        idle_calls.append(1)
        return 4.0

    builder = Builds(cores=1.0)
    result = Bisector(cands(200), builder, Verdicts(77), jobs=2, idle=idle).run()
    assert key(result.first_bad) == "c077"
    assert len(result.steps) >= 7
    assert len(idle_calls) == 2  # the bisect's start, the first compiled build; never before a test


def test_a_resumed_spread_bisect_knows_its_width_from_the_saved_builds(tmp_path: Path):
    sf = StateFile(tmp_path / "state.json")
    with pytest.raises(KeyboardInterrupt):
        Bisector(cands(64), Builds(cores=1.0), Verdicts(41, interrupt_at=3), persist=sf.saver("commits"),
                 jobs=2, idle=lambda: 2.0).run()
    state = state_on_disk(sf.path)
    assert {b.cores for b in state.builds.values()} == {1.0}  # saved with the builds
    builder, events = Builds(cores=0.0), Events()  # cache hits now: W comes from the saved builds
    result = Bisector(cands(64), builder, Verdicts(41), events, state=state, jobs=2, idle=lambda: 2.0).run()
    plain, *_ = bisect(64, 41)
    assert key(result.first_bad) == "c041"
    assert [s.key for s in result.steps] == [s.key for s in plain.steps]
    # c039 was built (its test interrupted); the next step's build (c043) comes with its lower half's (c041)
    assert events.seen[:5] == [("building", "c039"), ("testing", "c039"), ("step", "c039"), ("prefetch", "c041"),
                               ("building", "c043")]
    old = {k: v for k, v in to_table(state.builds[state.steps[0].key]).items() if k != "cores"}
    assert from_data(BuildOutcome, old).cores == 0.0  # a state file from before still loads


def test_idle_cores_reads_without_waiting(monkeypatch):
    from toolchain.core import cpu

    ncpu = len(os.sched_getaffinity(0))
    readings = iter([cpu._Reading(10.0, [0, 0, 0, 0, 0], 0.0),   # the first reading, 0.05 s after import: waits
                     cpu._Reading(10.2, [100, 0, 0, 300, 0], 0.1),
                     cpu._Reading(11.2, [200, 0, 0, 400, 0], 0.9),   # a second later: half idle, 0.8 s ours
                     cpu._Reading(11.3, [210, 0, 0, 410, 0], 0.9)])  # sooner than 0.2 s: the same figure
    slept: list[float] = []
    monkeypatch.setattr(cpu, "_last", cpu._Reading(9.95, [0, 0, 0, 0, 0], 0.0))
    monkeypatch.setattr(cpu, "_snapshot", lambda: next(readings))
    monkeypatch.setattr(time, "sleep", slept.append)  # (what cpu.time.sleep is)
    assert cpu.idle_cores() == pytest.approx(min(ncpu, ncpu * 0.75 + 0.1 / 0.25))
    assert slept == [pytest.approx(0.15)]
    assert cpu.idle_cores() == pytest.approx(min(ncpu, ncpu * 0.5 + 0.8))
    assert cpu.idle_cores() == pytest.approx(min(ncpu, ncpu * 0.5 + 0.8))
    assert slept == [pytest.approx(0.15)]  # only the first reading waited


def test_the_tools_own_running_build_is_its_own_load_not_another_users():
    """A build the bisect started and has not waited for yet (a real busy child, and its child) counts as the
    tool's own CPU, as it runs and after it is waited for: the idle-core check does not read it as another
    user's load (issue 48: after the first step it saw the machine busy with the tool's own build)."""
    import subprocess
    import sys

    from toolchain.core import cpu

    me = os.getpid()
    own = cpu._snapshot().own
    spin = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.4: pass"
    # the child runs a grandchild spinning 0.4 s of CPU, waits for it, spins 0.4 s itself, then sleeps
    child = subprocess.Popen([sys.executable, "-c", f"import subprocess, sys\nsubprocess.run([sys.executable, '-c', "
                              f"{spin!r}])\n{spin}\ntime.sleep(30)"])
    try:
        deadline = time.monotonic() + 60
        while cpu.descendants_cpu(me) < 0.7 and time.monotonic() < deadline:  # (a loaded machine: slower)
            time.sleep(0.05)
        running = cpu._snapshot().own - own
        assert running >= 0.7, running  # both spins, the grandchild's (waited for by the child) too
    finally:
        child.kill()
        child.wait()
    assert cpu.descendants_cpu(me) == 0.0
    assert cpu._snapshot().own - own >= running - 0.05  # waited for: now in RUSAGE_CHILDREN, not lost


class Deferring(Builds):
    """A builder that leaves each build's closure out (`deferred`) and completes it on request, recording
    which keys it completed, where (ahead: in the background) and while which steps had been tested."""

    def __init__(self, tester: Verdicts) -> None:
        super().__init__()
        self.tester = tester
        self.completed: list[tuple[str, bool, int]] = []  # (key, ahead, steps tested by then)

    def build(self, key: str) -> BuildOutcome:
        return replace(super().build(key), deferred=True)

    def complete(self, key: str, build: BuildOutcome, *, ahead: bool = False) -> BuildOutcome:
        assert build.deferred and key in self.tester.calls, "only a tested build is completed"
        with self.changed:
            self.completed.append((key, ahead, len(self.tester.calls)))
            self.changed.notify_all()
        return replace(build, deferred=False)


class WaitsForACompletion(Verdicts):
    """The first step's test (after both ends') lasts until a completion ran: one did, in the background."""

    builder: Deferring

    def test(self, cand: Candidate, build: BuildOutcome) -> TestOutcome:
        if len(self.calls) == 2:
            with self.builder.changed:
                assert self.builder.changed.wait_for(lambda: self.builder.completed, 30)
        return super().test(cand, build)


def test_deferred_builds_are_completed_for_the_ends_the_result_may_name_and_the_two_it_names():
    """Each step's build is deferred; only the last good and first bad so far are completed, in the background
    (no step waits for it), and the two ends the result names are whole; the result says what it spent."""
    tester = WaitsForACompletion(41)
    builder = tester.builder = Deferring(tester)
    result = Bisector(cands(65), builder, tester, jobs=1, check_ends=True).run()
    assert key(result.first_bad) == "c041" and result.last_good.key == "c040"
    assert result.good_build is not None and not result.good_build.deferred
    assert result.bad_build is not None and not result.bad_build.deferred
    done = {k for k, _, _ in builder.completed}
    assert {"c040", "c041"} <= done
    steps = [s.key for s in (*result.checks, *result.steps)]
    assert done <= set(steps) and len(builder.completed) < len(steps) + 2  # never an untested one; not all
    assert any(ahead for _, ahead, _ in builder.completed)  # in the background, while steps went on
    assert result.spent.test >= 0 and result.spent.wall >= result.spent.wait >= 0 and result.spent.compile == 0


class DeferringAhead(Deferring):
    """Deferring, built ahead too (a measured core a build): records each completion's key, whether in the
    background, and whether its candidate was tested by then."""

    def __init__(self, tester: Verdicts) -> None:
        super().__init__(tester)
        self.cores = 1.0
        self.untested: list[str] = []  # completed before their candidate was tested

    def complete(self, key: str, build: BuildOutcome, *, ahead: bool = False) -> BuildOutcome:
        assert build.deferred
        with self.changed:
            if key not in self.tester.calls:
                self.untested.append(key)
            self.completed.append((key, ahead, len(self.tester.calls)))
            self.changed.notify_all()
        return replace(build, deferred=False)


class WaitsNearTheEnd(Verdicts):
    """Each test first waits for every build started (what the bisect completes after it is there); with two
    tests left at most and a build of a candidate between the ends (this one too) done by the last test, waits
    (5 s at most) for a completion of a build not yet tested (`expected`)."""

    builder: DeferringAhead
    bisector: Bisector
    done_before: frozenset[str] = frozenset()
    expected = False

    def test(self, cand: Candidate, build: BuildOutcome) -> TestOutcome:
        futures = self.bisector._futures
        deadline = time.monotonic() + 5
        while not all(f.done() for f in list(futures.values())) and time.monotonic() < deadline:
            time.sleep(0.005)
        state = self.bisector.state
        lo, hi = state.bounds()
        between = {c.key for c in state.candidates[lo + 1:hi]} - set(self.calls)
        if 0 < state.pending() <= 3 and between & self.done_before:
            self.expected = True
            with self.builder.changed:
                self.builder.changed.wait_for(lambda: self.builder.untested, 5)
        self.done_before = frozenset(futures)
        return super().test(cand, build)


@pytest.mark.parametrize("first_bad", [5, 41])  # (with 63 no build ahead lies there)
def test_near_the_end_the_builds_ahead_between_the_ends_are_completed_before_they_are_tested(first_bad):
    """With two tests left at most, a build ahead between the ends (the first bad or its good parent but for
    a skip) is completed in the background as soon as it is there, before its candidate is tested; the result
    is the same and the two builds it names are whole."""
    tester = WaitsNearTheEnd(first_bad)
    builder = tester.builder = DeferringAhead(tester)
    bisector = tester.bisector = Bisector(cands(65), builder, tester, jobs=3, idle=lambda: 2.0)
    result = bisector.run()
    bisector.wait_background()
    assert key(result.first_bad) == f"c{first_bad:03d}" and key(result.last_good) == f"c{first_bad - 1:03d}"
    assert result.good_build is not None and not result.good_build.deferred
    assert result.bad_build is not None and not result.bad_build.deferred
    assert tester.expected and builder.untested, builder.completed
    # each one completed before its test lay between the ends then, two tests from the end at most
    assert all(abs(int(k[1:]) - first_bad) <= 3 for k in builder.untested), builder.untested


def test_state_file_errors(tmp_path: Path):
    bad = tmp_path / "x.json"
    bad.write_text("not json")
    with pytest.raises(UsageError, match="not a bisect state file"):
        StateFile(bad).read()
    bad.write_text(json.dumps({"state-version": 99}))
    with pytest.raises(UsageError, match="state-version 99"):
        StateFile(bad).read()
    assert StateFile(tmp_path / "missing.json").load("commits") is None


def test_steps_left():
    assert [steps_left(n) for n in (0, 1, 2, 3, 4, 7, 8, 200)] == [0, 1, 2, 2, 3, 3, 4, 8]


def test_the_first_midpoint_builds_alone_then_the_ends_together_and_builds_ahead_run_nicer():
    """With --jobs 3 the first step's midpoint builds alone (the compiler cache is empty: an end built beside it
    would compile all it shares with it again), then the two checked ends are in flight at once (each waits
    until both started: ends checked one after the other would time out and fail); the ends, checked beside
    the steps and awaited only when the bisect ends, run at AHEAD_NICE more than the bisect (their threads, so
    their processes), the first step's midpoint at the bisect's own priority; later builds ahead are niced
    too, a step's own build never."""
    from toolchain.bisect.priority import AHEAD_NICE

    base = os.getpriority(os.PRIO_PROCESS, os.getpid())
    nice: dict[str, int] = {}
    together: list[bool] = []
    alone: list[int] = []
    first = Bisector(cands(17), Builds(), Verdicts(5)).next_index()
    assert first is not None
    ends = {"c000", "c016"}

    def during(key: str) -> None:
        nice[key] = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
        if key == f"c{first:03d}":
            time.sleep(0.3)  # (an end started with it would be in flight by now)
            alone.append(builder.building)
        if key in ends:
            together.append(builder.wait_for(ends, timeout=20))

    builder = Builds(during=during, cores=1.0)
    events = Events()
    result = Bisector(cands(17), builder, Verdicts(5), events, jobs=3, idle=lambda: 2.0, check_ends=True).run()
    assert key(result.first_bad) == "c005"
    assert builder.calls[0] == f"c{first:03d}" and alone == [1]
    assert together == [True, True]
    assert nice["c000"] == nice["c016"] == min(19, base + AHEAD_NICE)
    assert nice[f"c{first:03d}"] == base
    ahead = {k for kind, k in events.seen if kind == "prefetch"} & nice.keys() - ends  # started, not cancelled
    awaited_here = set(builder.calls) - ahead - ends
    assert ahead and all(nice[k] == min(19, base + AHEAD_NICE) for k in ahead)
    assert all(nice[k] == base for k in awaited_here)


def test_an_end_check_the_result_waits_for_goes_on_at_the_bisects_nice_value():
    """The steps are done and only the bad end's check is left: its build (and what it runs) is no longer
    AHEAD_NICE more than the bisect, where other work would starve it, but at the bisect's own value."""
    from toolchain.bisect.priority import AHEAD_NICE

    base = os.getpriority(os.PRIO_PROCESS, os.getpid())
    ahead = min(19, base + AHEAD_NICE)
    if ahead == base or os.geteuid() != 0:
        pytest.skip("needs a nice value to raise and the right to lower it again")
    seen: list[tuple[int, int, int]] = []  # (nice at the start, nice later, steps tested then)
    tester = Verdicts(5)

    def during(key: str) -> None:
        if key != "c016":
            return
        tid = threading.get_native_id()
        started = os.getpriority(os.PRIO_PROCESS, tid)
        deadline = time.monotonic() + 20
        while os.getpriority(os.PRIO_PROCESS, tid) != base and time.monotonic() < deadline:
            time.sleep(0.02)
        seen.append((started, os.getpriority(os.PRIO_PROCESS, tid), len(tester.calls)))

    result = Bisector(cands(17), Builds(during=during, cores=1.0), tester, jobs=2, idle=lambda: 2.0,
                      check_ends=True).run()
    assert key(result.first_bad) == "c005"
    steps = len(result.steps)
    assert seen == [(ahead, base, steps + 1)]  # every step tested, and the good end (c000), before


def test_jobs_1_builds_no_midpoint_beside_the_ends():
    """--jobs 1: the ends one after the other, nothing ahead, every build at the bisect's priority."""
    builder = Builds(cores=1.0)
    events = Events()
    result = Bisector(cands(17), builder, Verdicts(5), events, jobs=1, check_ends=True).run()
    assert key(result.first_bad) == "c005"
    assert builder.most_at_once == 1 and not [e for e in events.seen if e[0] == "prefetch"]


class WrongEnd(Verdicts):
    """`wrong` ("good" or "bad") tests the other way. `wait`: that end's build (`during`) waits until a step
    was tested, so its check ends after steps went on beside it (checked first, it would time out)."""

    def __init__(self, first_bad: int, n: int, wrong: str, *, wait: bool) -> None:
        super().__init__(first_bad)
        self.ends = ("c000", f"c{n - 1:03d}")
        self.end = self.ends[0] if wrong == "good" else self.ends[1]
        self.wait = wait
        self.stepped = threading.Event()

    def during(self, key: str) -> None:
        if self.wait and key == self.end:
            assert self.stepped.wait(30), "no step was tested beside the end's check"

    def test(self, cand: Candidate, build: BuildOutcome) -> TestOutcome:
        if cand.key == self.end:
            self.calls.append(cand.key)
            return TestOutcome(Verdict.BAD if cand.key == "c000" else Verdict.GOOD, "wrong on purpose")
        outcome = super().test(cand, build)
        if cand.key not in self.ends:
            self.stepped.set()
        return outcome


@pytest.mark.parametrize("wrong", ["good", "bad"])
def test_with_jobs_the_ends_are_checked_beside_the_steps_and_a_wrong_one_discards_them(tmp_path: Path, wrong):
    """--jobs 3: the steps go on while the ends are checked (the wrong end's test waits for a step's: checked
    first, it would time out); the wrong end still stops the bisect with exit 2's message, and the state saved
    holds no step (their verdicts assumed that end right)."""
    states: list[BisectState] = []
    tester, events = WrongEnd(41, 65, wrong, wait=True), Events()
    bisector = Bisector(cands(65), Builds(cores=1.0, during=tester.during), tester, events, jobs=3, idle=idle_reading(2.0),
                        check_ends=True, persist=states.append)
    with pytest.raises(UsageError) as caught:
        bisector.run()
    err = caught.value
    assert err.return_code == 2 and getattr(err, "endpoint", "") == wrong
    what = "c000 (commit 0) tests bad (wrong on purpose), not good" if wrong == "good" else \
        "c064 (commit 64) tests good (wrong on purpose), not bad"
    assert str(err).startswith(f"the {wrong} end {what}"), str(err)
    assert [e for e in events.seen if e[0] == "step"], "steps went on beside the check"
    assert states[-1].steps == () and set(states[-1].verdicts) == {"c000", "c064"}
    assert [r.endpoint for r in states[-1].checks] in ([], ["bad" if wrong == "good" else "good"])


@pytest.mark.parametrize("wrong", ["good", "bad"])
def test_with_jobs_1_the_ends_are_checked_first(wrong):
    tester, events = WrongEnd(41, 65, wrong, wait=False), Events()
    with pytest.raises(UsageError, match=f"the {wrong} end c0"):
        Bisector(cands(65), Builds(), tester, events, jobs=1, check_ends=True).run()
    assert not [e for e in events.seen if e[0] == "step"]
    assert set(tester.calls) <= {"c000", "c064"}


def test_with_jobs_right_ends_checked_beside_the_steps_name_the_same_commit():
    """Both checks are in the result (built beside the steps, one test at a time), and it names what a
    --jobs 1 bisect names."""
    tested: list[str] = []
    running = threading.Lock()

    class OneAtATime(Verdicts):
        def test(self, cand, build):
            assert running.acquire(blocking=False), "two tests at once"
            try:
                time.sleep(0.01)
                tested.append(cand.key)
                return super().test(cand, build)
            finally:
                running.release()

    result = Bisector(cands(65), Builds(cores=1.0), OneAtATime(41), jobs=3, idle=idle_reading(2.0),
                      check_ends=True).run()
    assert key(result.first_bad) == "c041" and result.last_good.key == "c040"
    assert sorted(r.endpoint for r in result.checks) == ["bad", "good"]
    assert all(r.verdict is (Verdict.GOOD if r.endpoint == "good" else Verdict.BAD) for r in result.checks)
    assert result.good_build is not None and result.bad_build is not None
    assert {"c000", "c064"} <= set(tested)


class WaitsForItsOwnCompletion(Verdicts):
    """The last step's test (one candidate left between the ends) lasts until its own build was completed (10 s
    at most)."""

    builder: DeferringAhead
    bisector: Bisector
    seen = False

    def test(self, cand: Candidate, build: BuildOutcome) -> TestOutcome:
        if self.bisector.state.pending() == 1 and len(self.calls) > 2:
            with self.builder.changed:
                self.seen = self.builder.changed.wait_for(
                    lambda: any(k == cand.key for k, _, _ in self.builder.completed), 10)
        return super().test(cand, build)


def test_the_last_steps_build_is_completed_beside_its_test_as_an_end_the_result_names():
    """With one candidate left, its build is completed while it is tested (the result names it either way),
    in full (not `ahead`: a closure kept for the same requirements is taken, not left for the result to wait on)."""
    tester = WaitsForItsOwnCompletion(41)
    builder = tester.builder = DeferringAhead(tester)
    bisector = tester.bisector = Bisector(cands(65), builder, tester, jobs=1, check_ends=True)
    result = bisector.run()
    bisector.wait_background()
    assert key(result.first_bad) == "c041"
    assert tester.seen, builder.completed
    last = result.steps[-1].key
    assert (last, False) in {(k, ahead) for k, ahead, _ in builder.completed}, builder.completed
    assert result.good_build is not None and not result.good_build.deferred
    assert result.bad_build is not None and not result.bad_build.deferred


class SlowCompletions(Deferring):
    """Background completions that each wait (at most `wait` s) for another to run beside them: records the
    most at once while the first was running and after it ended. (With WaitsForACompletion: the first step's
    test waits until one ended, so the bisect does not end before the background threads start.)"""

    def __init__(self, tester: Verdicts, wait: float = 2.0) -> None:
        super().__init__(tester)
        self.wait = wait
        self.ahead_now = 0
        self.most_during_first = 0
        self.most_after_first = 0
        self.first_ended = False

    def complete(self, key: str, build: BuildOutcome, *, ahead: bool = False) -> BuildOutcome:
        with self.changed:
            self.ahead_now += ahead
            if self.first_ended:
                self.most_after_first = max(self.most_after_first, self.ahead_now)
            else:
                self.most_during_first = max(self.most_during_first, self.ahead_now)
            self.changed.notify_all()
            if ahead:
                self.changed.wait_for(lambda: self.ahead_now >= 2, self.wait)
        try:
            return super().complete(key, build, ahead=ahead)
        finally:
            with self.changed:
                self.ahead_now -= ahead
                self.first_ended = self.first_ended or ahead
                self.changed.notify_all()


class WaitsForTwoAtOnce(WaitsForACompletion):
    """Besides: the second step's test lasts until two completions ran at once after the first (at most 10 s)."""

    builder: SlowCompletions

    def test(self, cand: Candidate, build: BuildOutcome) -> TestOutcome:
        if len(self.calls) == 3:
            with self.builder.changed:
                self.builder.changed.wait_for(lambda: self.builder.most_after_first >= 2, 10)
        return super().test(cand, build)


def test_the_first_background_completion_runs_alone_then_two_at_once_and_a_named_end_waits_for_its_running_one():
    """The first completion in the background runs alone (it fills the caches: two on empty caches each asked
    the index for everything); after it, the last good and the first bad so far are completed at once; when the
    bisect ends, an end whose completion is running is waited for: no key is completed twice."""
    tester = WaitsForTwoAtOnce(41)
    builder = tester.builder = SlowCompletions(tester)
    result = Bisector(cands(65), builder, tester, jobs=1, check_ends=True).run()
    assert key(result.first_bad) == "c041"
    assert builder.most_during_first == 1
    assert builder.most_after_first == 2
    keys = [k for k, _, _ in builder.completed]
    assert len(keys) == len(set(keys)), keys
    assert result.good_build is not None and not result.good_build.deferred
    assert result.bad_build is not None and not result.bad_build.deferred


class FillsEarly(SlowCompletions):
    """SlowCompletions whose completer says, once the first completion runs, that it asked the indexes (its
    resolution did: `caches_filled`, as SpineBuilder's index view says), while that one goes on."""

    def caches_filled(self) -> bool:
        with self.changed:
            return self.ahead_now > 0 or self.first_ended


def test_the_other_completions_start_once_the_first_asked_the_indexes_not_once_it_ended():
    """The first background completion runs alone only until the completer's caches are filled (its resolution
    asked the indexes: the others resolve from what they served, while it reads its closure's file lists): a
    second then runs beside it; the result is the same, no key completed twice."""
    tester = WaitsForTwoAtOnce(41)
    builder = tester.builder = FillsEarly(tester)
    result = Bisector(cands(65), builder, tester, jobs=1, check_ends=True).run()
    assert key(result.first_bad) == "c041"
    assert builder.most_during_first == 2, builder.completed
    keys = [k for k, _, _ in builder.completed]
    assert len(keys) == len(set(keys)), keys
    assert result.good_build is not None and not result.good_build.deferred


def test_a_named_end_waits_for_the_running_completion_of_its_requirements(tmp_path: Path):
    """SpineBuilder.complete: while the same requirements resolve for another key in the background, an end the
    result names waits for it, then resolves (from the kept closure) after it, never beside it; a completion
    ahead of the same requirements is not made at all."""
    import zipfile
    from concurrent.futures import ThreadPoolExecutor

    from toolchain.bisect.builder import SpineBuilder
    from toolchain.console import UI

    def wheel(name: str) -> Path:
        path = tmp_path / f"{name}-1.0-py3-none-any.whl"
        with zipfile.ZipFile(path, "w") as z:
            z.writestr(f"{name}-1.0.dist-info/METADATA",
                       f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\nRequires-Dist: packaging>=20\n")
        return path

    release = threading.Event()
    calls: list[tuple[str, float, float]] = []  # key, started, ended (monotonic)

    class Resolving(SpineBuilder):
        def _build(self, key: str, *, resolve: bool, remember: bool = True) -> BuildOutcome:
            started = time.monotonic()
            if key == "c001":
                assert release.wait(30)
            calls.append((key, started, time.monotonic()))
            return BuildOutcome(True, lock_path=tmp_path / f"{key}.lock", wheels=(wheel("same"),))

    builder = Resolving(lambda key: None, tmp_path / "steps", tmp_path / "cache", (), UI(quiet=True),  # type: ignore
                        resolve_steps=False)
    deferred = BuildOutcome(True, wheels=(wheel("same"),), deferred=True)
    with ThreadPoolExecutor(2) as pool:
        ahead = pool.submit(builder.complete, "c001", deferred, ahead=True)
        while not builder._running:  # the background one is resolving
            time.sleep(0.01)
        assert builder.complete("c002", deferred, ahead=True) is deferred  # the same requirements: not made
        named = pool.submit(builder.complete, "c003", deferred)
        time.sleep(0.2)
        assert not named.done()  # waits for c001's
        release.set()
        assert not ahead.result().deferred and not named.result().deferred
    (first, _, ended), (second, started, _) = calls
    assert (first, second) == ("c001", "c003") and started >= ended


def _may_lower_nice() -> bool:
    """Whether this process may lower a thread's nice value again (root, CAP_SYS_NICE or RLIMIT_NICE)."""
    out: list[bool] = []

    def probe() -> None:
        tid, base = threading.get_native_id(), os.getpriority(os.PRIO_PROCESS, os.getpid())
        os.setpriority(os.PRIO_PROCESS, tid, min(19, base + 1))
        try:
            os.setpriority(os.PRIO_PROCESS, tid, base)
            out.append(True)
        except PermissionError:
            out.append(False)

    thread = threading.Thread(target=probe)
    thread.start()
    thread.join()
    return out[0]


NICE_UNTIL_RENICED = """\
import os, sys, time
start = os.nice(0)
open(sys.argv[1], "w").close()
deadline = time.monotonic() + 20
while os.nice(0) == int(sys.argv[2]) and time.monotonic() < deadline:
    time.sleep(0.02)
print(start, os.nice(0))
"""


class NicedCompletions(Deferring):
    """A completion in the background runs a real process that waits while its nice value is `niced` (20 s at
    most), then says its nice value at its start and at its end, with its thread's after it."""

    def __init__(self, tester: Verdicts, folder: Path, niced: int) -> None:
        super().__init__(tester)
        self.folder, self.niced = folder, niced
        self.seen: list[tuple[int, int, int]] = []  # the child's nice at its start and end; its thread's after

    def complete(self, key: str, build: BuildOutcome, *, ahead: bool = False) -> BuildOutcome:
        if ahead:
            import subprocess
            import sys

            done = subprocess.run([sys.executable, "-c", NICE_UNTIL_RENICED, str(self.folder / key), str(self.niced)],
                                  capture_output=True, text=True, check=True)
            start, end = map(int, done.stdout.split())
            with self.changed:
                self.seen.append((start, end, os.getpriority(os.PRIO_PROCESS, threading.get_native_id())))
        return super().complete(key, build, ahead=ahead)


class WaitsForANicedChild(Verdicts):
    """The first step's test (after both ends') lasts until a background completion's process runs, the
    second's until three have (the ends' two, then one for an end the first step moved)."""

    folder: Path

    def test(self, cand: Candidate, build: BuildOutcome) -> TestOutcome:
        if len(self.calls) in (2, 3):
            deadline = time.monotonic() + 30
            while len(list(self.folder.iterdir())) < (1 if len(self.calls) == 2 else 3) \
                    and time.monotonic() < deadline:
                time.sleep(0.01)
        return super().test(cand, build)


@pytest.mark.skipif(not _may_lower_nice(), reason="lowering a nice value again is not allowed here")
def test_when_the_result_waits_for_background_completions_they_run_at_the_bisects_priority(tmp_path: Path):
    """A background completion runs at COMPLETE_NICE, its resolver too, but for the first (it fills the caches
    the others need: at the bisect's own nice value); once the bisect ends and waits for the completions
    running, they and their processes go on at the bisect's own nice value (a starved nicer one would hold the
    result up), and a completion's thread is back at it afterwards."""
    from toolchain.bisect.priority import COMPLETE_NICE

    base = os.getpriority(os.PRIO_PROCESS, os.getpid())
    tester = WaitsForANicedChild(41)
    tester.folder = tmp_path
    niced = min(19, base + COMPLETE_NICE)
    builder = tester.builder = NicedCompletions(tester, tmp_path, niced)  # type: ignore[attr-defined]
    started = time.monotonic()
    bisector = Bisector(cands(65), builder, tester, jobs=1, check_ends=True)
    result = bisector.run()
    bisector.wait_background()
    assert key(result.first_bad) == "c041"
    assert result.good_build is not None and not result.good_build.deferred
    assert builder.seen, "no completion ran in the background"
    assert builder.seen[0][0] == base, builder.seen  # the first, at the bisect's
    assert any(start == niced for start, _, _ in builder.seen), builder.seen  # one ran niced, then was reniced
    # (one started after it inherits its thread's, at the bisect's)
    assert all(start in (niced, base) and end == base and thread == base for start, end, thread in builder.seen), \
        builder.seen
    assert time.monotonic() - started < 20  # none waited out its 20 s: each was reniced when the result waited


def test_requirements_only_an_extra_asks_for_do_not_make_another_closure(tmp_path: Path):
    """Two builds whose wheels differ only in what an extra asks for (`numba; extra == "cpu"`) have the same
    requirements for a bisect's completions (the resolver leaves those lines out: one resolution, not two at
    once); a real requirement, a marker that is not just the extra, or another wheel of the set asking for that
    extra, and they differ."""
    from tests.support.native_wheels import write_wheel
    from toolchain.bisect.builder import wheel_requirements

    def reqs(folder: str, *requires: str, other: tuple[str, ...] = ()) -> tuple[tuple[str, ...], ...]:
        wheels = [write_wheel(tmp_path / folder, "app", "1.0", {"app/__init__.py": b""}, requires=requires)]
        if other:
            wheels.append(write_wheel(tmp_path / folder, "user", "1.0", {"user/__init__.py": b""}, requires=other))
        return wheel_requirements(wheels)

    base = reqs("a", "numpy<2", 'tbb; extra == "cpu"')
    assert reqs("b", "numpy<2", 'tbb; extra == "cpu"', 'numba; extra == "cpu"') == base
    assert reqs("c", "numpy<2", 'tbb; extra == "cpu"', "numba") != base
    assert reqs("d", "numpy<2", 'tbb; extra == "cpu"', 'numba; extra == "cpu" or python_version < "3.9"') != base
    with_user = reqs("e", "numpy<2", 'tbb; extra == "cpu"', other=("app[cpu]",))
    assert reqs("f", "numpy<2", 'tbb; extra == "cpu"', 'numba; extra == "cpu"', other=("app[cpu]",)) != with_user
