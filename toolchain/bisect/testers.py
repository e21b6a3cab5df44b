"""Testing one step's build (mozregression's test runners): a command with `git bisect run` semantics, or
the smoke stage called as a library (`toolchain.smoke.run_smoke`) and judged by its `SmokeOutcome`."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from toolchain.bisect.core import BuildOutcome, Candidate, TestOutcome, Verdict, first_line
from toolchain.console import UI
from toolchain.core.proc import CommandTimeout, run
from toolchain.errors import ToolError, UsageError
from toolchain.lock import read_lock
from toolchain.smoke import SmokeOptions, SmokeOutcome, run_smoke

ENV_WHEELS, ENV_LOCK, ENV_COMMIT = "TOOLCHAIN_BISECT_WHEELS", "TOOLCHAIN_BISECT_LOCK", "TOOLCHAIN_BISECT_COMMIT"
SKIP_CODE = 125


class CommandTester:
    """`git bisect run` semantics: exit 0 good, 125 skip, anything else bad (a crash and a timeout too).
    The command gets the step's wheels, lock and candidate key in $TOOLCHAIN_BISECT_{WHEELS,LOCK,COMMIT}."""

    def __init__(self, argv: Sequence[str], logs: Path, *, timeout: float | None = None, verbose: bool = False) -> None:
        self.argv, self.logs, self.timeout, self.verbose = tuple(argv), logs, timeout, verbose

    def test(self, cand: Candidate, build: BuildOutcome) -> TestOutcome:
        env = {**os.environ, ENV_WHEELS: os.pathsep.join(str(w) for w in build.wheels),
               ENV_LOCK: str(build.lock_path or ""), ENV_COMMIT: cand.key}
        log = self.logs / f"{cand.short}.log"
        try:
            done = run(self.argv, env=env, log=log, check=False, verbose=self.verbose, timeout=self.timeout)
        except CommandTimeout as err:
            return TestOutcome(Verdict.BAD, f"test timed out after {err.timeout:g}s", log)
        if not done.started:  # the program could not be started at all
            raise UsageError(f"--test-cmd cannot run: {done.stderr.strip()}",
                             hint=f"check that {self.argv[0]!r} exists and is executable (or on PATH)")
        code = done.returncode
        if code == 0:
            return TestOutcome(Verdict.GOOD, "test exited 0", log)
        if code == SKIP_CODE:
            return TestOutcome(Verdict.SKIP, f"test exited {SKIP_CODE} (cannot test this one)", log)
        if code < 0:
            return TestOutcome(Verdict.BAD, f"test killed by signal {-code}", log)
        return TestOutcome(Verdict.BAD, f"test exited {code}", log)


class SmokeTester:
    """The smoke regression set on each step's lock, reports under `<logs>/<candidate>/`. Passed: good; failed
    (a case, readiness, a wheel hash or an installed version): bad; bad input: the bisect stops."""

    def __init__(self, logs: Path, options: SmokeOptions, ui: UI) -> None:
        self.logs, self.options, self.ui = logs, options, ui

    def test(self, cand: Candidate, build: BuildOutcome) -> TestOutcome:
        if build.lock_path is None:
            raise UsageError("--test smoke needs a lock for each step; this build produced none")
        out = self.logs / cand.short
        try:
            outcome = run_smoke(read_lock(build.lock_path), out_dir=out, options=self.options,
                                ui=UI(quiet=not self.ui.verbose, verbose=self.ui.verbose))
        except ToolError as err:
            if err.return_code != 1:
                raise
            return TestOutcome(Verdict.BAD, f"smoke: {first_line(err)}", out)
        if outcome.passed:
            return TestOutcome(Verdict.GOOD, "smoke passed", out)
        return TestOutcome(Verdict.BAD, "smoke failed: " + smoke_failures(outcome), out)


def smoke_failures(outcome: SmokeOutcome) -> str:
    """What failed: a server never ready, required cases not passed, findings (per run when several)."""
    parts = []
    for r in outcome.runs:
        if r.passed:
            continue
        where = f"{r.name}: " if len(outcome.runs) > 1 else ""
        if not r.ready.ok:
            parts.append(f"{where}server not ready ({r.ready.reason})")
        parts += [f"{where}{c.name}={c.verdict}" for c in r.failed]
        parts += [f"{where}finding {f.id}" for f in r.findings]
    return ", ".join(parts) or outcome.summary or "see the smoke report"

