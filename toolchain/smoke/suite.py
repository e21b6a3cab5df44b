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
        done = run([py, "-m", "pytest", "-p", "no:cacheprovider", "-rs", f"--junitxml={junit}", *suite.args,
                    *(suite.tests or (".",))], cwd=tests, log=log, check=False,
                   env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": None, "PYTHONHOME": None},
                   timeout=6 * 3600)
        if not junit.is_file():
            raise TestFailed(f"pytest wrote no JUnit report (exit {done.returncode}); log: {log}",
                             hint=f"is pytest installed in {base}? (`{base} -m pip install pytest`)")
        counts, skipped = _read_junit(junit)
    finally:
        if not keep_venv:
            shutil.rmtree(venv, ignore_errors=True)
    passed = counts["passed"] > 0 and counts["failed"] == 0 and counts["errors"] == 0
    summary = (f"{counts['passed']} passed, {counts['failed']} failed, {counts['errors']} errors, "
               f"{counts['skipped']} skipped" + (" (nothing ran)" if not counts["passed"] else ""))
    rep: dict[str, Any] = {
        "tool": "toolchain smoke", "tool_version": __version__, "lock": str(lock.path), "recipe": lock.recipe_name,
        "suite": {"component": comp.name, "commit": comp.commit, "dir": suite.dir, "tests": list(suite.tests),
                  "args": list(suite.args)},
        "python": base, "installed": [lock.wheel_path(c).name for c in lock.components],
        "unlocked": lock.closure is None, "counts": counts, "skipped": skipped,
        "verdict": "pass" if passed else "fail", "exit_code": 0 if passed else 1, "junit": str(junit),
        "log": str(log), "seconds": round(time.monotonic() - started, 3)}
    report = out / "suite.json"
    atomic_write_text(report, json.dumps(rep, indent=2, sort_keys=True) + "\n")
    return SuiteOutcome(passed, counts, skipped, report, junit, summary)


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


def _read_junit(path: Path) -> tuple[dict[str, int], dict[str, int]]:
    """(passed / failed / errors / skipped counts, skip reason -> count) of a pytest JUnit file."""
    counts = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0}
    reasons: Counter[str] = Counter()
    for case in ET.parse(path).getroot().iter("testcase"):
        if (skip := case.find("skipped")) is not None:
            counts["skipped"] += 1
            reasons[(skip.get("message") or "").strip() or "(no reason given)"] += 1
        elif case.find("failure") is not None:
            counts["failed"] += 1
        elif case.find("error") is not None:
            counts["errors"] += 1
        else:
            counts["passed"] += 1
    return counts, dict(reasons.most_common())


__all__ = ["SuiteOutcome", "run_suite"]
