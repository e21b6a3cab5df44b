"""SIGINT, SIGTERM and SIGHUP to `toolchain bisect` mid-step (a Ctrl-C, a CI cancel or `timeout`, a closed
terminal), while a step's build runs and while its test command runs: the documented exit code and the
Interrupted error document, nothing of the tool's process group left running, a state file that holds the
steps that completed (the interrupted one is no verdict, and its build is not remembered as unbuildable),
and the same command typed again finishes the bisect with the right first bad commit.

Driven as a user types it (`python -m toolchain bisect ...` in a process group of its own), on real git
history and real `pip wheel` builds of the tiny backend; TINY_BUILD_GATE holds a build mid-way.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.spine_helpers import assert_interrupted, component, interrupt, kill_group, recipe_data, wait_for_text

pytestmark = pytest.mark.slow

FIRST_BAD = 6
COMMITS = 10          # c0 (good) .. c9 (the recipe's commit, bad): the steps test c4, c6, c5 (--jobs 1)
STEPS_BEFORE = 2      # the signal arrives during the third step (its build or its test)
SIGNALS = [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129)]

# The test command: good when the kern wheel's VALUE is 42. Each call appends its commit to `tested`. With
# HOLD=build:N:GATE in its environment, the Nth call creates GATE, so the next step's build waits there;
# with HOLD=test:N:MARK, the Nth call writes MARK and waits (for the signal).
TEST = """\
import os, sys, time, zipfile
tested = sys.argv[1]
mode, at, path = (os.environ["HOLD"].split(":", 2) if os.environ.get("HOLD") else ("", "0", ""))
with open(tested, "a") as f:
    f.write(os.environ["TOOLCHAIN_BISECT_COMMIT"] + "\\n")
calls = len(open(tested).read().split())
if mode == "build" and calls == int(at):
    open(path, "w").close()
if mode == "test" and calls == int(at):
    open(path, "w").write(str(os.getpid()))
    time.sleep(300)
wheel = [w for w in os.environ["TOOLCHAIN_BISECT_WHEELS"].split(os.pathsep) if os.path.basename(w).startswith("tiny-")]
value = zipfile.ZipFile(wheel[0]).read("tiny/value.py").decode()
sys.exit(0 if "VALUE = 42" in value else 1)
"""


@pytest.fixture
def bisect(ws, make_repo):
    kern = make_repo("kern", "tiny")
    commits = [kern.commit("add value", {"tiny/value.py": "VALUE = 42\n"})]
    for i in range(1, COMMITS):
        commits.append(kern.commit(f"kern change {i}", {"tiny/value.py": f"VALUE = {41 if i >= FIRST_BAD else 42}"
                                                                          f"  # {i}\n"}))
    ws.recipe("stack", recipe_data({"kern": component(kern, commits[-1], dist="tiny")}))
    script = ws.root / "test.py"
    script.write_text(TEST)
    return kern, commits, script


def _argv(ws, commits, script, tested: Path) -> list:
    # the steps counted here are the bisect's own: the ends' checks (test_bisect_trust.py) are left out
    return ["bisect", "--recipe", "stack", "--component", "kern", "--good", commits[0], "--cache-dir", ws.cache,
            "--out", ws.root / "bisect", "--jobs", "1", "--json", "--no-check-endpoints",
            "--test-cmd", f"{sys.executable} {script} {tested}"]


@pytest.mark.parametrize("during", ["build", "test"])
@pytest.mark.parametrize(("sig", "code"), SIGNALS, ids=[s.name for s, _ in SIGNALS])
def test_a_signal_mid_step_stops_the_bisect_and_the_same_command_finishes_it(ws, bisect, during, sig, code):
    _, commits, script = bisect
    tested, counter = ws.root / "tested.txt", ws.root / "builds.txt"
    hold = ws.root / ("gate" if during == "build" else "testing")
    argv = _argv(ws, commits, script, tested)
    env = {"TINY_BUILD_COUNTER": str(counter), "TINY_BUILD_GATE": str(ws.root / "gate")}
    hold_at = STEPS_BEFORE if during == "build" else STEPS_BEFORE + 1
    proc = ws.cli.start(*argv, env={**env, "HOLD": f"{during}:{hold_at}:{hold}"})
    try:
        if during == "build":  # the third kern build started and waits at the gate
            wait_for_text(counter, "tiny ", STEPS_BEFORE + 1, proc=proc)
        else:                  # the third test runs
            wait_for_text(hold, proc=proc)
    except BaseException:
        kill_group(proc)
        raise
    r = interrupt(proc, sig)  # and nothing of the tool's process group keeps running
    assert_interrupted(r, sig, code)
    state_path = ws.root / "bisect" / "bisect-state.json"
    assert "resume with: toolchain bisect --resume --state " + str(state_path) in " ".join(r.stderr.split())

    # the state holds the steps that completed, each with its verdict; the interrupted one is no verdict
    state = json.loads(state_path.read_text())
    assert state["done"] is False
    phase = state["phases"]["commits"]
    done = tested.read_text().split()[:STEPS_BEFORE]
    assert [s["key"] for s in phase["steps"]] == done
    assert [s["verdict"] for s in phase["steps"]] == ["good" if commits.index(k) < FIRST_BAD else "bad"
                                                       for k in done]
    interrupted = tested.read_text().split()[STEPS_BEFORE] if during == "test" else None
    marked = {k for k, v in phase["verdicts"].items() if v["reason"] not in ("given as good", "given as bad")}
    assert marked == set(done)
    if interrupted:  # its build finished and is kept; its test did not
        assert interrupted not in marked
        assert phase["builds"][interrupted]["ok"] is True
    unbuildable = ws.cache / "bisect" / "unbuildable"
    assert not unbuildable.exists() or list(unbuildable.iterdir()) == []  # an interrupted build is no failure

    # the same command typed again continues the bisect and finds the first bad commit
    (ws.root / "gate").unlink(missing_ok=True)
    again = ws.cli(*argv, env=env)
    assert again.returncode == 0, str(again)
    result = again.json()["result"]
    assert result["first_bad"]["key"] == commits[FIRST_BAD]
    assert result["last_good"]["key"] == commits[FIRST_BAD - 1]
    steps = result["steps"]
    assert [s["key"] for s in steps[:STEPS_BEFORE]] == done  # resumed, not started over
    assert len({s["key"] for s in steps}) == len(steps)
    final = json.loads(state_path.read_text())
    assert final["done"] is True


PREFETCH = """\
import sys
import toolchain.bisect.core as core
core.idle_cores = lambda: 8.0  # a machine with idle cores: the builds ahead start whatever the load here
from toolchain.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize(("sig", "code"), SIGNALS, ids=[s.name for s, _ in SIGNALS])
def test_a_signal_while_builds_ahead_run_leaves_them_unrecorded(ws, bisect, sig, code):
    """With --jobs 3 the builds of both possible next steps start while a step's test runs; a signal then
    stops them too, and neither is recorded as a build, nor remembered as unbuildable."""
    kern, commits, script = bisect
    tested, counter, gate, mark = (ws.root / n for n in ("tested.txt", "builds.txt", "gate", "testing"))
    ws.recipe("first", recipe_data({"kern": component(kern, commits[4], dist="tiny")}))
    r = ws.build("first")
    assert r.returncode == 0, str(r)  # so the first step's build (c4) comes from the cache
    argv = [str(a) if a != "1" else "3" for a in _argv(ws, commits, script, tested)]
    gate.touch()  # every build that compiles waits here: the two builds ahead
    env = {"TINY_BUILD_COUNTER": str(counter), "TINY_BUILD_GATE": str(gate)}
    proc = subprocess.Popen([sys.executable, "-c", PREFETCH, *argv], cwd=ws.root,
                            env={**ws.env, **env, "HOLD": f"test:1:{mark}"}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_for_text(mark, proc=proc)
        wait_for_text(counter, "tiny ", 2, proc=proc)  # both builds ahead started, held at the gate
    except BaseException:
        kill_group(proc)
        raise
    assert_interrupted(interrupt(proc, sig), sig, code)
    phase = json.loads((ws.root / "bisect" / "bisect-state.json").read_text())["phases"]["commits"]
    assert phase["steps"] == []
    assert set(phase["builds"]) == {commits[4]}
    unbuildable = ws.cache / "bisect" / "unbuildable"
    assert not unbuildable.exists() or list(unbuildable.iterdir()) == []

    gate.unlink()
    again = ws.cli(*argv, env=env)  # `python -m toolchain`: whether it builds ahead does not matter now
    assert again.returncode == 0, str(again)
    assert again.json()["result"]["first_bad"]["key"] == commits[FIRST_BAD]
    assert not any(s["build_failed"] for s in again.json()["result"]["steps"])
