"""What stops a bisect, and how it is told: a given end that does not test as given (`EndpointError`), a
range with nothing to bisect (`check_candidates`), whether a stop can be resumed (`resumable`), and the first
line of an error that a step's reason, a log line or a skip shows."""

from __future__ import annotations

from collections.abc import Sequence

from toolchain.bisect.model import Candidate, StepRecord
from toolchain.core.regex import Regex
from toolchain.errors import BuildError, ToolError, TransientError, UsageError

SAME_FAILURES = 3  # this many builds in a row failing the same way, and none built yet: the recipe is wrong
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
        super().__init__(f"the {name} end {describe(cand)} {what}" + (f"\n  log: {record.log}" if record.log else "")
                         + (f"\n  last lines:\n{lines}" if lines else ""),
                         hint=(f"make the stack build at {cand.short} or give another --{name}" if record.build_failed
                               else f"give a --{name} that tests {name}, or a test that tells the two apart (it "
                                    f"exits 0 on good, 1 on {other.replace('good', 'bad')})")
                              + "; --no-check-endpoints skips this check if you know better")
        self.endpoint, self.candidate, self.record = name, cand, record


def resumable(error: BaseException) -> bool:
    """Whether a bisect stopped by `error` can go on with `--resume`: a stop (Ctrl-C, a signal), a failure of
    the surroundings (`TransientError`), a build error of the machine; not a configuration error (exit 2, or
    a ToolError marked `final`), which the same options would meet again."""
    if isinstance(error, TransientError) or not isinstance(error, ToolError):
        return True
    return not getattr(error, "final", error.return_code == 2)


def describe(cand: Candidate) -> str:
    """A candidate as an error names it: its short id, and its subject where it has one."""
    return f"{cand.short} ({cand.subject})" if cand.subject else cand.short


def check_candidates(candidates: tuple[Candidate, ...]) -> None:
    """UsageError when the range has nothing to bisect (good and bad the same) or names a candidate twice."""
    if len(candidates) < 2 or candidates[0].key == candidates[-1].key:
        key = candidates[0].key if candidates else "?"
        raise UsageError(f"nothing to bisect: good and bad are the same ({key[:12]})",
                         hint="pass a --good that is older than --bad")
    keys = [c.key for c in candidates]
    if len(set(keys)) != len(keys):
        dup = next(k for k in keys if keys.count(k) > 1)
        raise UsageError(f"candidate {dup[:12]} appears twice in the range")


def first_line(err: BaseException | str) -> str:
    """An error's first line: what a step's reason, a log line or a skip shows."""
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__



def systematic_failure(steps: Sequence[StepRecord]) -> BuildError | None:
    """The error to stop with when every build so far failed, the last SAME_FAILURES the same way (commit ids
    aside): that is the recipe or the machine, not the commits."""
    if len(steps) < SAME_FAILURES or not all(s.build_failed for s in steps):
        return None
    if len({_HEX.sub("<id>", s.reason) for s in steps[-SAME_FAILURES:]}) != 1:
        return None
    return BuildError(f"the first {len(steps)} builds all failed the same way: {steps[-1].reason}",
                      hint="that is the recipe or the build machine, not the commits: make the stack build at the "
                           "good commit (`toolchain build`), then resume; the bisect starts over")


__all__ = ["SAME_FAILURES", "EndpointError", "check_candidates", "describe", "first_line", "resumable",
           "systematic_failure"]
