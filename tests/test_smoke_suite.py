"""`[smoke.suite]` runs upstream's own tests against the lock's installed wheels (smoke/suite.py): here a tiny
package of a real git repository whose test folder has a test that passes, one that skips itself as an XPU test
does, one that fails the first time it runs and passes after (a kernel whose threads add in another order from
run to run), and one that always fails when asked to. A failed test runs again `reruns` times; one that passes
then is reported flaky by name, never counted passed, and a test that fails again still fails the run."""

from __future__ import annotations

import json

import pytest

from tests.spine_helpers import GitRepo, Workspace, component, recipe_data

UPSTREAM_TESTS = {
    "upstream/test_things.py": '''import os
from pathlib import Path

import pytest


def test_passes():
    import tiny
    assert tiny.__name__ == "tiny"


def test_needs_a_device():
    pytest.skip("No XPU Device")


def test_fails_the_first_time():
    runs = Path(os.environ["SUITE_TEST_RUNS"])
    runs.write_text(runs.read_text() + "x" if runs.exists() else "x")
    assert len(runs.read_text()) > 1, "first run: the threads added in another order"


def test_fails_when_asked():
    assert os.environ.get("SUITE_TEST_FAIL") != "1"
''',
}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("suite")
    repo = GitRepo.create(root / "repo", "tiny")
    repo.commit("upstream's tests", UPSTREAM_TESTS)
    ws = Workspace(root / "ws")
    for reruns in (0, 1):
        ws.recipe(f"suite{reruns}", recipe_data(
            {"tiny": component(repo)},
            smoke={"suite": {"component": "tiny", "dir": "upstream", "tests": ["test_things.py"], "reruns": reruns}}))
        r = ws.build(f"suite{reruns}", f"out{reruns}", "--no-resolve")
        assert r.returncode == 0, str(r)
    return ws


def _smoke(ws: Workspace, reruns: int, name: str, fail: bool):
    import sys

    runs = ws.root / f"runs-{name}"
    r = ws.cli("smoke", "--lock", ws.root / f"out{reruns}" / "stack.lock.toml", "--python", sys.executable,
               "--out", ws.root / name, "--json", env={"SUITE_TEST_RUNS": str(runs), "SUITE_TEST_FAIL": "1" if fail else "0"})
    return r, json.loads((ws.root / name / "suite.json").read_text())


def test_a_test_that_passes_when_run_again_is_reported_flaky_and_the_run_passes(built):
    r, report = _smoke(built, 1, "flaky", fail=False)
    assert r.returncode == 0, str(r)
    flaky = "test_things::test_fails_the_first_time"
    assert r.json()["flaky"] == [flaky] and report["flaky"] == [flaky], report
    assert report["counts"] == {"passed": 2, "failed": 0, "errors": 0, "skipped": 1, "flaky": 1}, report["counts"]
    assert report["skipped"] == {"No XPU Device": 1} and report["suite"]["reruns"] == 1
    assert (built.root / "flaky" / "suite.rerun1.junit.xml").is_file()


def test_a_test_that_fails_again_fails_the_run_and_the_flaky_one_is_still_named(built):
    r, report = _smoke(built, 1, "failing", fail=True)
    assert r.returncode == 1, str(r)
    assert report["counts"] == {"passed": 1, "failed": 1, "errors": 0, "skipped": 1, "flaky": 1}, report["counts"]
    assert report["flaky"] == ["test_things::test_fails_the_first_time"] and report["verdict"] == "fail"


def test_without_reruns_a_flaky_test_fails_the_run(built):
    r, report = _smoke(built, 0, "once", fail=False)
    assert r.returncode == 1, str(r)
    assert report["counts"] == {"passed": 2, "failed": 1, "errors": 0, "skipped": 1, "flaky": 0}, report["counts"]
    assert report["flaky"] == [] and not (built.root / "once" / "suite.rerun1.junit.xml").exists()


def test_reruns_beyond_three_is_a_recipe_error(tmp_path):
    ws = Workspace(tmp_path)
    repo = GitRepo.create(tmp_path / "repo", "tiny")
    ws.recipe("many", recipe_data({"tiny": component(repo)},
                                  smoke={"suite": {"component": "tiny", "dir": "upstream", "reruns": 4}}))
    r = ws.cli("plan", "--recipe", "many", "--json")
    assert r.returncode == 2, str(r)
    assert "smoke.suite.reruns" in r.stdout and "0 to 3" in r.stdout, r.stdout
