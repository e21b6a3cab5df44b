"""What a bisect is made of (the records `bisect.core` steps through and its handler reports): candidates,
verdicts, build and test outcomes, steps, the saved state, the result with what the bisect spent, and the
protocols of the builder, tester and handler."""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

from toolchain.core.record import field, record, replace
from toolchain.core.serial import Data, from_data, meta, rounded, to_data, to_table


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
    seconds: float = field(default=0.0, metadata=meta(dump=rounded(3)))  # the build's wall time
    # the lock's runtime closure was left out to be fast, for `Completer.complete` (the test needs no closure)
    deferred: bool = False


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


@runtime_checkable
class Completer(Protocol):
    """What a builder that leaves work off a step's critical path offers too (optional): completing a build."""
    def complete(self, key: str, build: BuildOutcome, *, ahead: bool) -> BuildOutcome:
        """The build of `key` with what it left out done (`deferred` False: its lock pins the closure).
        `ahead` (in the background, for a build the result may name): the builder may do nothing and return
        `build` unchanged, e.g. when a build with the same requirements was completed already."""


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


@record
class Spent:
    """Where a bisect's time went, in seconds: compiling (every build's wall time, ahead or not, but cache
    hits), testing, resolving the closures the named locks need (`resolve`, of which `resolve_waited` held up
    the result; the rest ran in the background), waiting for builds (the steps' and ends' critical path),
    and the whole bisect (`wall`)."""
    compile: float = field(default=0.0, metadata=meta(dump=rounded(2)))
    test: float = field(default=0.0, metadata=meta(dump=rounded(2)))
    resolve: float = field(default=0.0, metadata=meta(dump=rounded(2)))
    resolve_waited: float = field(default=0.0, metadata=meta(dump=rounded(2)))
    wait: float = field(default=0.0, metadata=meta(dump=rounded(2)))
    wall: float = field(default=0.0, metadata=meta(dump=rounded(2)))

    def line(self) -> str:
        """One line for a summary: "spent: compile 3.1 s, test 2.0 s, ..."."""
        return (f"spent: compile {self.compile:.1f} s, test {self.test:.1f} s, resolve {self.resolve:.1f} s "
                f"({self.resolve_waited:.1f} s waited for), wait for builds {self.wait:.1f} s, wall {self.wall:.1f} s")


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
    spent: Spent = field(default_factory=Spent)

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


def _bounds(marks: Sequence[Verdict | None]) -> tuple[int, int]:
    hi = next(i for i, m in enumerate(marks) if m is Verdict.BAD)
    lo = max(i for i in range(hi) if marks[i] is Verdict.GOOD)
    return lo, hi

