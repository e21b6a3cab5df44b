"""Testing one step's build (mozregression's test runners): a command with `git bisect run` semantics, or
the smoke stage called as a library (`toolchain.smoke.run_smoke`) and judged by its `SmokeOutcome`."""

from __future__ import annotations

import os
import shutil
import signal
from collections.abc import Sequence
from pathlib import Path

from toolchain.bisect.core import BuildOutcome, Candidate, TestOutcome, Verdict, first_line
from toolchain.console import UI
from toolchain.core.proc.runner import CommandTimeout, display, run
from toolchain.core.proc.signals import STOPPING
from toolchain.errors import ToolError, UsageError
from toolchain.lock import read_lock
from toolchain.smoke.config import SmokeOptions
from toolchain.smoke.session import SmokeOutcome, run_smoke

ENV_WHEELS, ENV_LOCK, ENV_COMMIT = "TOOLCHAIN_BISECT_WHEELS", "TOOLCHAIN_BISECT_LOCK", "TOOLCHAIN_BISECT_COMMIT"
ENV_WHEEL_DIR = "TOOLCHAIN_BISECT_WHEEL_DIR"
SKIP_CODE = 125
CANNOT_RUN = (126, 127)  # the shell's "found but not executable" and "not found"
TAIL = 20  # lines of the test's output kept with each verdict

CONTRACT = (f"exit 0: good; {SKIP_CODE}: skip (this one cannot be tested); 1-124: bad; 126 or 127 (the test could "
            "not run) and 128 or more (killed by a signal) stop the bisect with the test's last lines: "
            "`git bisect run` counts 126/127 as bad, so a typo in the test would blame a commit")
"""The test command's contract, as `--help`, the README and the report say it."""

ENVIRONMENT = (f"${ENV_WHEELS} (the step's wheel files, joined by {os.pathsep!r}), ${ENV_WHEEL_DIR} (a folder "
               f"holding exactly the step's wheels), ${ENV_LOCK} (the step's lock: it pins the runtime closure "
               "only with --test-needs-closure, else the closures are resolved off the critical path, for the "
               f"locks the result names), ${ENV_COMMIT} (the commit, in a commit bisect; a lock-to-lock step's "
               "difference id d<i>)")


class TestCannotRun(UsageError):
    """The test command could not run (126/127) or was killed by a signal (128 and above): no verdict on the
    candidate. Exit 2; `final` when it cannot run (the command is wrong: fix it, start again), not when killed
    (an OOM kill or a stop from outside may pass on a retry: `--resume`)."""

    __test__ = False  # not a pytest class

    def __init__(self, message: str, *, tail: str, log: Path, final: bool, hint: str) -> None:
        shown = "\n".join("    " + line for line in tail.splitlines())
        super().__init__(f"{message}\n  log: {log}" + (f"\n  last lines:\n{shown}" if shown else ""), hint=hint)
        self.tail, self.log, self.final = tail, log, final


class CommandTester:
    """The test contract (`CONTRACT`): exit 0 good, 125 skip, 1-124 bad (a timeout too: a hang); 126/127 and
    128+ (or a signal) raise `TestCannotRun`. The command gets `ENVIRONMENT` (the wheel folder is
    `<logs>-wheels/<candidate>`); its output goes to `<logs>/<candidate>.log`, whose last `TAIL` lines travel
    with the verdict. `needs_closure`: the test installs the step's lock with its closure (so each step's
    closure is resolved before it runs); False: it needs the wheels alone."""

    def __init__(self, argv: Sequence[str], logs: Path, *, timeout: float | None = None, verbose: bool = False,
                 needs_closure: bool = False) -> None:
        self.argv, self.logs, self.timeout, self.verbose = tuple(argv), logs, timeout, verbose
        self.needs_closure = needs_closure

    def test(self, cand: Candidate, build: BuildOutcome) -> TestOutcome:
        """Run the user's test command with the step's wheels and lock in its environment; exit 0 good, 125 skip."""
        wheel_dir = step_wheel_dir(self.logs.with_name(f"{self.logs.name}-wheels") / cand.short, build.wheels)
        env = {**os.environ, ENV_WHEELS: os.pathsep.join(str(w) for w in build.wheels), ENV_WHEEL_DIR: str(wheel_dir),
               ENV_LOCK: str(build.lock_path or ""), ENV_COMMIT: cand.key}
        log = self.logs / f"{cand.short}.log"
        log.unlink(missing_ok=True)  # this run's output only
        try:
            done = run(self.argv, env=env, log=log, check=False, verbose=self.verbose, timeout=self.timeout)
        except CommandTimeout as err:
            return TestOutcome(Verdict.BAD, f"test timed out after {err.timeout:g}s", log, tail=log_tail(log))
        code, tail = done.returncode, log_tail(log)
        if STOPPING.is_set() and (code < 0 or code >= 128):  # the stop signal reached the test too: not its verdict
            raise KeyboardInterrupt
        if not done.started or code in CANNOT_RUN:
            raise TestCannotRun(f"the test could not run (exit {code}) on {cand.short}: {display(self.argv)}",
                                tail=tail or done.stderr.strip(), log=log, final=True,
                                hint=f"check that {self.argv[0]!r} and what it runs exist and are executable (or on "
                                     "PATH); 126/127 stop the bisect instead of counting as bad (as `git bisect "
                                     "run` would), so a broken test cannot blame a commit. Fix it and start again")
        if code < 0 or code >= 128:
            how = f"was killed by signal {-code} ({_signame(-code)})" if code < 0 else \
                f"exited {code} (128 and above: killed by a signal{f', {_signame(code - 128)}' if code > 128 else ''})"
            raise TestCannotRun(f"the test {how} on {cand.short}: {display(self.argv)}", tail=tail, log=log,
                                final=False,
                                hint="a test killed by a signal (exit 128 or more: an OOM kill, a stop from outside) "
                                     "gives no verdict, so the bisect stops, as `git bisect run` does; if it was the "
                                     "machine, `--resume` runs it again; if the test crashes that way, make it exit "
                                     "1 (bad) instead")
        if code == 0:
            return TestOutcome(Verdict.GOOD, "test exited 0", log, tail=tail, code=code)
        if code == SKIP_CODE:
            return TestOutcome(Verdict.SKIP, f"test exited {SKIP_CODE} (cannot test this one)", log, tail=tail, code=code)
        return TestOutcome(Verdict.BAD, f"test exited {code}", log, tail=tail, code=code)


def step_wheel_dir(folder: Path, wheels: Sequence[Path]) -> Path:
    """`folder` holding exactly copies of `wheels`, made afresh. Copies, not hard links: a test may change what it
    is given without changing the step's out wheels, and those keep one name each (a wheel with a second name is
    not the tool's alone: the next completion into that out folder would warn and copy it from the cache again)."""
    tmp = folder.with_name(f".tmp-{folder.name}-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for wheel in wheels:
        shutil.copyfile(wheel, tmp / wheel.name)
    shutil.rmtree(folder, ignore_errors=True)
    tmp.rename(folder)
    return folder


def log_tail(log: Path, n: int = TAIL) -> str:
    """The last `n` lines a test wrote to its log (the tool's own header and exit lines left out)."""
    try:
        lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return ""
    if lines and lines[0].startswith("$ "):
        lines = lines[1:]
    if lines and lines[0].startswith("  (in "):
        lines = lines[1:]
    if lines and lines[-1].startswith("# ") and " after " in lines[-1]:
        lines = lines[:-1]
    return "\n".join(lines[-n:])


def _signame(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


class SmokeTester:
    """The smoke regression set on each step's lock, reports under `<logs>/<candidate>/`. Passed: good; failed
    (a case, readiness, a wheel hash or an installed version): bad; bad input: the bisect stops. It installs
    the closure: each step's is resolved before it runs."""

    needs_closure = True

    def __init__(self, logs: Path, options: SmokeOptions, ui: UI) -> None:
        self.logs, self.options, self.ui = logs, options, ui

    def test(self, cand: Candidate, build: BuildOutcome) -> TestOutcome:
        """Smoke-test the candidate's lock: good when the smoke passes, bad when it fails (or stops with exit 1)."""
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

