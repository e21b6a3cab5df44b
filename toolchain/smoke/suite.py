"""`toolchain smoke --lock LOCK` for a recipe whose `[smoke.suite]` names upstream's own tests: no server; the
lock's wheels (hashes checked) installed with --no-deps into a fresh venv over a base interpreter that provides
their runtime (a CPU torch: `--python`, default the lock's), upstream's test folder taken from the mirror at the
locked commit (never the source tree the wheel was built from: the tests import the installed package), pytest
run there with JUnit, and a report (`suite.json`) counting passed, failed, errors and skipped, each skip with
its reason: what needs an XPU is reported as skipped, never as passed. Exit 0 when something passed and nothing
failed, 1 otherwise. The venv is made by `scripts/make_venv.py` (it sees the base's packages, a venv's too).
"""

from __future__ import annotations

import json
import os
import shutil
import tarfile
import time
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path
from typing import Any

from toolchain import __version__
from toolchain.console import UI
from toolchain.core.fs import atomic_write_text
from toolchain.core.git import git
from toolchain.core.proc.runner import run
from toolchain.core.record import record
from toolchain.errors import TestFailed, UsageError
from toolchain.lock import Lock, verify_wheels
from toolchain.recipe.model import SuiteSpec

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


@record
class SuiteOutcome:
    """What one suite run found: the verdict, the counts, the skip reasons and where the report went."""
    passed: bool
    counts: dict[str, int]
    skipped: dict[str, int]   # reason -> how many tests were skipped for it
    flaky: tuple[str, ...]    # tests that failed, then passed when run again ([smoke.suite] reruns)
    report: Path
    junit: Path
    summary: str


def run_suite(lock: Lock, suite: SuiteSpec, *, out: Path, cache_dir: Path, python: str = "",
              keep_venv: bool = False, ui: UI | None = None) -> SuiteOutcome:
    """Install the lock's wheels over `python` (default: the lock's target interpreter), run the suite."""
    ui = ui or UI(quiet=True)
    started = time.monotonic()
    comp = next((c for c in lock.components if c.name == suite.component), None)
    if comp is None:
        raise UsageError(f"{lock.path} [smoke.suite] component = {suite.component!r}: not a component of the lock",
                         hint=f"components: {', '.join(c.name for c in lock.components)}")
    out = out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    log = out / "suite.log"
    ui.step(f"verifying {len(lock.components)} wheel(s) against {lock.path}")
    verify_wheels(lock)
    base = python or lock.target.python or "python3"
    venv = out / "venv"
    ui.step(f"creating a fresh venv {venv} over {base} (it sees that interpreter's packages)")
    run([base, str(SCRIPTS / "make_venv.py"), str(venv)], log=log, timeout=600)
    py = str(venv / "bin" / "python")
    try:
        wheels = [str(lock.wheel_path(c)) for c in lock.components]
        run([py, "-m", "pip", "install", "--no-deps", "--no-index", "--force-reinstall", *wheels], log=log, timeout=1800)
        tests = _tests_from_mirror(lock, comp.url, comp.commit, suite.dir, out / "tests", cache_dir, log)
        junit = out / "suite.junit.xml"
        ui.step(f"running upstream's tests: {suite.dir} at {comp.commit[:12]} (pytest)")
        # (pytest's cache, outside the test folder, only so that a rerun can ask for the last failed: --lf)
        pytest = [py, "-m", "pytest", "-o", f"cache_dir={out / 'pytest-cache'}", "-rs", *suite.args]
        selected = suite.tests or (".",)
        shutil.rmtree(out / "pytest-cache", ignore_errors=True)
        outcomes = _pytest([*pytest, f"--junitxml={junit}", *selected], junit, tests, log, base)
        for n in range(1, suite.reruns + 1):
            failing = [name for name, got in outcomes.items() if got in ("failed", "errors")]
            if not failing:
                break
            ui.step(f"running the {len(failing)} failed test(s) again ({n} of {suite.reruns}): a pass then is flaky")
            rerun = out / f"suite.rerun{n}.junit.xml"
            again = _pytest([*pytest, "--lf", f"--junitxml={rerun}", *selected], rerun, tests, log, base)
            outcomes.update({name: "flaky" for name in failing if again.get(name) == "passed"})
        flaky = [name for name, got in outcomes.items() if got == "flaky"]
        counts, skipped = _counted(outcomes)
    finally:
        if not keep_venv:
            shutil.rmtree(venv, ignore_errors=True)
    passed = counts["passed"] > 0 and counts["failed"] == 0 and counts["errors"] == 0
    summary = (f"{counts['passed']} passed, {counts['failed']} failed, {counts['errors']} errors, "
               f"{counts['skipped']} skipped" + (" (nothing ran)" if not counts["passed"] else "")
               + (f", {len(flaky)} flaky (failed, then passed when run again: {', '.join(flaky)})" if flaky else ""))
    rep: dict[str, Any] = {
        "tool": "toolchain smoke", "tool_version": __version__, "lock": str(lock.path), "recipe": lock.recipe_name,
        "suite": {"component": comp.name, "commit": comp.commit, "dir": suite.dir, "tests": list(suite.tests),
                  "args": list(suite.args), "reruns": suite.reruns},
        "python": base, "installed": [lock.wheel_path(c).name for c in lock.components],
        "unlocked": lock.closure is None, "counts": counts, "skipped": skipped, "flaky": flaky,
        "verdict": "pass" if passed else "fail", "exit_code": 0 if passed else 1, "junit": str(junit),
        "log": str(log), "seconds": round(time.monotonic() - started, 3)}
    report = out / "suite.json"
    atomic_write_text(report, json.dumps(rep, indent=2, sort_keys=True) + "\n")
    return SuiteOutcome(passed, counts, skipped, tuple(flaky), report, junit, summary)


def _tests_from_mirror(lock: Lock, url: str, commit: str, folder: str, dest: Path, cache_dir: Path,
                       log: Path) -> Path:
    """`folder` of the repository at `commit`, from the mirror the build used (fetched if it lacks it)."""
    from toolchain.sources.mirrors import Mirrors

    mirror = Mirrors(cache_dir).ensure(url, commit, where=f"{lock.path} [smoke.suite]")
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    archive = dest.with_name("tests.tar")
    found = git(["ls-tree", "--name-only", commit, "--", folder], git_dir=mirror).stdout.strip()
    if not found:
        raise UsageError(f"{lock.path} [smoke.suite] dir = {folder!r}: no such folder at {commit[:12]}",
                         hint="name the test folder relative to the repository's root")
    git(["archive", "--format=tar", "-o", str(archive), commit, "--", folder], git_dir=mirror, log=log)
    with tarfile.open(archive) as tar:
        tar.extractall(dest, filter="data")
    archive.unlink()
    return dest / folder


def _pytest(argv: list[str], junit: Path, cwd: Path, log: Path, base: str) -> dict[str, str]:
    """Run pytest (`argv` writes JUnit to `junit`); each test's outcome (`_read_junit`)."""
    done = run(argv, cwd=cwd, log=log, check=False, timeout=6 * 3600,
               env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": None, "PYTHONHOME": None})
    if not junit.is_file():
        raise TestFailed(f"pytest wrote no JUnit report (exit {done.returncode}); log: {log}",
                         hint=f"is pytest installed in {base}? (`{base} -m pip install pytest`)")
    return _read_junit(junit)


def _read_junit(path: Path) -> dict[str, str]:
    """Each test case of a pytest JUnit file ("classname::name"), with its outcome: passed, failed, errors, or
    "skipped: REASON"."""
    got: dict[str, str] = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        if (skip := case.find("skipped")) is not None:
            got[name] = "skipped: " + ((skip.get("message") or "").strip() or "(no reason given)")
        elif case.find("failure") is not None:
            got[name] = "failed"
        elif case.find("error") is not None:
            got[name] = "errors"
        else:
            got[name] = "passed"
    return got


def _counted(outcomes: dict[str, str]) -> tuple[dict[str, int], dict[str, int]]:
    """(passed / failed / errors / skipped / flaky counts, skip reason -> count) of the tests' outcomes."""
    counts = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0, "flaky": 0}
    reasons: Counter[str] = Counter()
    for outcome in outcomes.values():
        kind, _, reason = outcome.partition(": ")
        counts[kind] += 1
        if kind == "skipped":
            reasons[reason] += 1
    return counts, dict(reasons.most_common())


__all__ = ["SuiteOutcome", "run_suite"]
