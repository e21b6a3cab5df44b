"""Bisect you can trust, as a user hunting a regression meets it: `toolchain bisect` as a real process, real git,
real `pip wheel` builds (the tiny backend), real test commands, a real PEP 503 index on 127.0.0.1 that goes
away, a full disk (a filled tmpfs), a build killed by a signal, and the README's demo bisect run line by line.

Each test fails on the code before issue 20 / issue 26's bisect part: a test that crashes blamed a commit,
endpoints that test wrongly or do not build gave a first bad commit anyway, a lock-to-lock bisect with a
crashing test named a harmless change, a configuration error said "resume with", and a network, disk or
signal failure was remembered as unbuildable for ever."""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.spine_helpers import Cli, component, isolated_env, recipe_data, wait_for_text
from toolchain.lock import read_lock

pytestmark = pytest.mark.slow

FIRST_BAD, BROKEN, LAST = 5, 3, 7

CHECK = """\
import glob, os, sys, zipfile
folder, files = os.environ["TOOLCHAIN_BISECT_WHEEL_DIR"], os.environ["TOOLCHAIN_BISECT_WHEELS"].split(os.pathsep)
assert sorted(os.listdir(folder)) == sorted(os.path.basename(f) for f in files), (os.listdir(folder), files)
assert os.path.isfile(os.environ["TOOLCHAIN_BISECT_LOCK"])
commit = os.environ["TOOLCHAIN_BISECT_COMMIT"]
assert len(commit) == 40 or commit.startswith("d"), commit  # a commit, or a lock-to-lock step d<i>
(wheel,) = glob.glob(os.path.join(folder, "tiny-*.whl"))
value = zipfile.ZipFile(wheel).read("tiny/value.py").decode()
print("tiny/value.py says", value.strip())
sys.exit(0 if "42" in value else 1)
"""
# The test from the issue: it takes $TOOLCHAIN_BISECT_WHEELS for a folder, and crashes on every step.
CRASH = """\
import os, sys
wheels = sorted(os.listdir(os.environ["TOOLCHAIN_BISECT_WHEELS"]))
sys.exit(0 if wheels[0] else 1)
"""


@pytest.fixture
def kern(ws, make_repo):
    """kern (the tiny package): c0..c7 on one line; c5 makes VALUE wrong (first bad), c3 does not build (the
    first midpoint: a skip away from the boundary); the recipe `stack` pins it at c7 beside `other`."""
    repo = make_repo("kern", "tiny")
    pyproject = (repo.path / "pyproject.toml").read_text()
    commits = []
    for i in range(LAST + 1):
        files = {"tiny/value.py": f"VALUE = {41 if i >= FIRST_BAD else 42}  # {i}\n",
                 "pyproject.toml": pyproject + ('fail = "TINY-BUILD-FAILS: the compiler exploded"\n' if i == BROKEN else "")}
        commits.append(repo.commit(f"kern change {i}", files))
    other = make_repo("other", "distname")
    ws.recipe("stack", recipe_data({"other": component(other, dist="other-name"),
                                    "kern": component(repo, commits[-1], after=["other"], dist="tiny")}))
    for name, text in (("check.py", CHECK), ("crash.py", CRASH)):
        (ws.root / name).write_text(text)
    return repo, commits


def _bisect(ws, out: str, *args, env=None):
    return ws.cli("bisect", "--recipe", "stack", "--component", "kern", "--cache-dir", ws.cache,
                  "--out", ws.root / out, "--jobs", "1", *args, env=env)


def _memos(ws) -> list[Path]:
    folder = ws.cache / "bisect" / "unbuildable"
    return sorted(folder.iterdir()) if folder.is_dir() else []


def test_endpoints_are_checked_and_the_test_contract_holds(ws, kern):
    _, c = kern
    py = sys.executable
    # endpoints that build but test wrongly: `false` makes the good end bad, `true` the bad end good
    r = _bisect(ws, "o1", "--good", c[0], "--test-cmd", "false", "--json")
    assert r.returncode == 2, str(r)
    err = r.json()["error"]
    assert err.startswith(f"the good end {c[0][:12]} (kern change 0) tests bad (test exited 1), not good"), err
    assert "resume with" not in r.stderr and "--no-check-endpoints" in r.json()["hint"]
    r = _bisect(ws, "o2", "--good", c[0], "--test-cmd", "true", "--json")
    assert r.returncode == 2 and r.json()["error"].startswith(f"the bad end {c[-1][:12]} (kern change 7) tests good"), str(r)

    # a test that crashes (it takes $TOOLCHAIN_BISECT_WHEELS for a folder) is bad everywhere: the good end
    # says so with its traceback, instead of a "first bad commit"
    r = _bisect(ws, "o3", "--good", c[0], "--test-cmd", f"{py} crash.py", "--json")
    assert r.returncode == 2, str(r)
    err = r.json()["error"]
    assert "the good end" in err and "tests bad (test exited 1)" in err, err
    assert "os.listdir" in err and "Error: " in err and "last lines:" in err and str(ws.root / "o3" / "tests") in err, err
    assert "resume with" not in r.stderr  # a configuration error is final
    assert json.loads((ws.root / "o3" / "bisect-state.json").read_text())["done"] is True

    # the same --out, the test fixed to use $TOOLCHAIN_BISECT_WHEEL_DIR: a new bisect starts (no "unfinished")
    r = _bisect(ws, "o3", "--good", c[0], "--test-cmd", f"{py} check.py")
    assert r.returncode == 0, str(r)
    data = json.loads((ws.root / "o3" / "result.json").read_text())
    result = data["result"]
    assert result["first_bad"]["key"] == c[FIRST_BAD] and result["last_good"]["key"] == c[FIRST_BAD - 1]
    assert [(x["endpoint"], x["verdict"]) for x in result["checks"]] == [("good", "good"), ("bad", "bad")]
    assert "126 or 127" in data["contract"]
    for step in result["steps"]:  # every verdict with its evidence
        assert step["log"] and Path(step["log"]).exists(), step
        if not step["build_failed"]:
            assert step["tail"].startswith("tiny/value.py says VALUE = "), step
    (skipped,) = [s for s in result["steps"] if s["verdict"] == "skip"]
    assert skipped["key"] == c[BROKEN] and "TINY-BUILD-FAILS" in skipped["tail"]
    # the terminal shows the first bad step's and the first skip's verdicts with their last lines
    flat = " ".join(r.stderr.split()) + " ".join(r.stdout.split())
    assert f"first bad {c[FIRST_BAD][:12]}: bad (test exited 1); log: " in flat, flat
    assert "| tiny/value.py says VALUE = 41 # 5" in flat and f"first skip {c[BROKEN][:12]}: skip" in flat

    # 127 (the test could not run) and 128+ (killed by a signal) stop the bisect with the test's last lines;
    # `git bisect run` would have counted 127 as bad
    r = _bisect(ws, "o4", "--good", c[0], "--test-cmd", "sh -c 'echo about to run; no-such-test-program'", "--json")
    assert r.returncode == 2, str(r)
    assert "the test could not run (exit 127)" in r.json()["error"] and "about to run" in r.json()["error"]
    assert "git bisect run" in r.json()["hint"] and "resume with" not in r.stderr
    r = _bisect(ws, "o5", "--good", c[0], "--test-cmd", "sh -c 'echo dying; kill -9 $$'", "--json")
    assert r.returncode == 2, str(r)
    assert "killed by signal 9 (SIGKILL)" in r.json()["error"] and "dying" in r.json()["error"]
    assert "resume with: toolchain bisect --resume" in " ".join(r.stderr.split())  # no verdict: may pass later

    # an end that does not build: exit 2 naming it and why, not a first bad commit
    r = _bisect(ws, "o6", "--good", c[BROKEN], "--test-cmd", f"{py} check.py", "--json")
    assert r.returncode == 2, str(r)
    err = r.json()["error"]
    assert err.startswith(f"the good end {c[BROKEN][:12]} (kern change 3) does not build (") and "TINY-BUILD-FAILS" in err


def test_remembered_unbuildable_keeps_its_cause_and_can_be_built_again(ws, kern):
    _, c = kern
    counter = ws.root / "builds.txt"
    env = {"TINY_BUILD_COUNTER": str(counter)}
    r = _bisect(ws, "a", "--good", c[0], "--test-cmd", f"{sys.executable} check.py", "--json", env=env)
    assert r.returncode == 0, str(r)
    (memo,) = _memos(ws)
    remembered = json.loads(memo.read_text())
    assert remembered["reason"].startswith("building kern@") and remembered["when"]
    assert "TINY-BUILD-FAILS: the compiler exploded" in remembered["tail"]  # the cause, the build's last lines
    builds = len(counter.read_text().splitlines())
    # again in a new --out: nothing is built, the skip says when and why it was remembered
    r = _bisect(ws, "b", "--good", c[0], "--test-cmd", f"{sys.executable} check.py", "--json", env=env)
    assert r.returncode == 0, str(r)
    assert len(counter.read_text().splitlines()) == builds
    (skipped,) = r.json()["result"]["skipped"]
    assert skipped["reason"].startswith("build failed: building kern@") and "(remembered since " in skipped["reason"]
    assert "--retry-unbuildable" in skipped["reason"]
    (step,) = [s for s in r.json()["result"]["steps"] if s["key"] == c[BROKEN]]
    assert "TINY-BUILD-FAILS: the compiler exploded" in step["tail"] and step["log"] == remembered["log"]
    # --retry-unbuildable (here on the finished bisect's own state: the same command again) builds it again
    r = _bisect(ws, "b", "--good", c[0], "--test-cmd", f"{sys.executable} check.py", "--retry-unbuildable",
                "--json", env=env)
    assert r.returncode == 0, str(r)
    again = [line.split()[0] for line in counter.read_text().splitlines()[builds:]]
    assert again == ["tiny"], again  # only the unbuildable commit compiled
    assert r.json()["result"]["first_bad"]["key"] == c[FIRST_BAD]


# ---- failures of the surroundings: stop, resume, never remembered ----------------------------------------

@contextlib.contextmanager
def _serve(root: Path, port: int):
    """`root` served over HTTP on 127.0.0.1:`port` (the index coming back after an outage, at the same URL)."""
    handler = lambda *a, **kw: http.server.SimpleHTTPRequestHandler(*a, directory=str(root), **kw)
    http.server.ThreadingHTTPServer.allow_reuse_address = True
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=30)


def test_a_network_outage_and_a_full_disk_stop_the_bisect_and_it_resumes(ws, make_repo, tmp_path):
    """kern needs `packaging`, from a PEP 503 index on 127.0.0.1. With the index down, the first build's closure
    cannot be resolved: the bisect stops naming the network, remembers nothing and resumes once it is back;
    with the resolver's cache on a full disk, the same. --no-resolve bisects with no index at all."""
    from tests.support.closure import free_port, full_disk, simple_index, wheelhouse

    repo = make_repo("kern", "tiny")
    pyproject = (repo.path / "pyproject.toml").read_text().replace(
        'version = "1.0.0"', 'version = "1.0.0"\ndependencies = ["packaging>=24"]')
    c = [repo.commit(f"kern change {i}", {"tiny/value.py": f"VALUE = {41 if i >= 2 else 42}\n",
                                          "pyproject.toml": pyproject}) for i in range(4)]
    port = free_port()
    ws.recipe("net", recipe_data({"kern": component(repo, c[-1], dist="tiny")},
                                 resolve={"indexes": [f"http://127.0.0.1:{port}/simple"]}))
    (ws.root / "check.py").write_text(CHECK)
    index = simple_index(wheelhouse(tmp_path / "wheels"), tmp_path / "index").parent
    args = ["bisect", "--recipe", "net", "--component", "kern", "--good", c[0], "--cache-dir", ws.cache,
            "--out", ws.root / "o", "--jobs", "1", "--test-cmd", f"{sys.executable} check.py", "--json"]

    r = ws.cli(*args)  # the index is down
    assert r.returncode == 1, str(r)
    err = r.json()
    assert err["kind"] == "TransientError" and f"127.0.0.1:{port}" in err["error"], err
    assert "resume with: toolchain bisect --resume" in " ".join(r.stderr.split()) and "network" in r.stderr
    assert _memos(ws) == []  # nothing remembered as unbuildable
    state = ws.root / "o" / "bisect-state.json"

    if os.geteuid() == 0:  # the resolver's cache on a full disk: the same stop, nothing remembered
        with _serve(index, port), full_disk(ws.cache / "resolve"):
            r = ws.cli("bisect", "--resume", "--state", state, "--json")
        assert r.returncode == 1 and "no space left on device" in r.json()["error"], str(r)
        assert "resume with" in r.stderr and _memos(ws) == []

    with _serve(index, port):  # the index is back: the same bisect resumes and finishes
        r = ws.cli("bisect", "--resume", "--state", state, "--json")
    assert r.returncode == 0, str(r)
    assert r.json()["result"]["first_bad"]["key"] == c[2] and r.json()["result"]["skipped"] == []
    assert read_lock(ws.root / "o" / "bad" / "stack.lock.toml").closure is not None

    # --no-resolve, as `build --no-resolve`: no index asked (it is down again), the locks pin no closure
    r = ws.cli(*[a if a != ws.root / "o" else ws.root / "o-offline" for a in args], "--no-resolve")
    assert r.returncode == 0, str(r)
    assert r.json()["result"]["first_bad"]["key"] == c[2]
    assert read_lock(ws.root / "o-offline" / "bad" / "stack.lock.toml").closure is None


def _ppid(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def test_a_build_killed_by_a_signal_stops_the_bisect_and_is_not_remembered(ws, kern):
    """An OOM kill (here a real SIGKILL to the step's `pip wheel`, held mid-build) says nothing about the commit:
    the bisect stops naming the signal, remembers nothing, and resumes."""
    _, c = kern
    counter, gate = ws.root / "builds.txt", ws.root / "gate"
    gate.touch()
    env = {"TINY_BUILD_COUNTER": str(counter), "TINY_BUILD_GATE": str(gate)}
    proc = ws.cli.start("bisect", "--recipe", "stack", "--component", "kern", "--cache-dir", ws.cache,
                        "--out", ws.root / "k", "--jobs", "1", "--good", c[0], "--test-cmd",
                        f"{sys.executable} check.py", "--json", env=env)
    wait_for_text(counter, "tiny ", proc=proc)
    line = next(x for x in counter.read_text().splitlines() if x.startswith("tiny "))
    os.kill(_ppid(int(line.split()[1])), signal.SIGKILL)  # the backend's parent: `pip wheel`
    gate.unlink()
    r = ws.cli.finish(proc)
    assert r.returncode == 1, str(r)
    assert r.json()["kind"] == "TransientError" and "killed by signal 9" in r.json()["error"], r.json()
    assert "resume with" in r.stderr and _memos(ws) == []
    r = ws.cli("bisect", "--resume", "--state", ws.root / "k" / "bisect-state.json", "--json", env=env)
    assert r.returncode == 0, str(r)
    assert r.json()["result"]["first_bad"]["key"] == c[FIRST_BAD]


# ---- lock to lock ----------------------------------------------------------------------------------------

def test_lock_to_lock_with_a_crashing_test_names_the_good_lock_not_a_change(ws, kern):
    """The issue's lock-to-lock bisect named `toolchain.setvars` as the change that turns good into bad, because
    the test crashed on every step; the good lock is now tested first and the bisect stops there."""
    repo, c = kern
    for side, commit, jobs in (("good", c[0], "2"), ("bad", c[-1], "3")):
        ws.recipe(side, recipe_data({"kern": component(repo, commit, dist="tiny")}, env={"MAX_JOBS": jobs}))
        r = ws.build(side, f"out-{side}")
        assert r.returncode == 0, str(r)
    args = ["bisect", "--good-lock", ws.root / "out-good", "--bad-lock", ws.root / "out-bad", "--cache-dir", ws.cache,
            "--jobs", "1", "--json"]
    r = ws.cli(*args, "--out", ws.root / "l1", "--test-cmd", f"{sys.executable} crash.py")
    assert r.returncode == 2, str(r)
    err = r.json()["error"]
    assert err.startswith("the good end d0 (the good lock, no difference applied) tests bad (test exited 1)"), err
    assert "os.listdir" in err and "NotADirectoryError" in err and "resume with" not in r.stderr
    r = ws.cli(*args, "--out", ws.root / "l2", "--test-cmd", f"{sys.executable} check.py")
    assert r.returncode == 0, str(r)
    result = r.json()["result"]
    assert result["culprit"]["kind"] == "commit" and result["commits"]["first_bad"]["key"] == c[FIRST_BAD]
    assert [x["endpoint"] for x in result["changes"]["checks"]] == ["good", "bad"]
    assert result["commits"]["checks"] == []  # its ends were tested in the first phase


# ---- the README's demo bisect ------------------------------------------------------------------------------

README = Path(__file__).resolve().parents[1] / "README.md"


def readme_demo_bisect() -> str:
    text = README.read_text()
    block = text.split("<!-- demo-bisect:", 1)[1].split("```sh\n", 1)[1]
    return block.split("```", 1)[0]


def test_the_readmes_demo_bisect_works_as_written(demo_build, tmp_path):
    """The README's lines, run by `sh` in a fresh folder with `toolchain` on PATH (and the demo's compiled
    components in the cache, as after the README's demo build)."""
    lines = readme_demo_bisect()
    assert "toolchain bisect --recipe demo --component engine" in lines
    cache = tmp_path / "cache"
    shutil.copytree(demo_build.cache, cache, symlinks=True)
    bin_dir, work = tmp_path / "bin", tmp_path / "work"
    bin_dir.mkdir()
    work.mkdir()
    (bin_dir / "toolchain").write_text(f"#!/bin/sh\nexec {sys.executable} -m toolchain \"$@\"\n")
    (bin_dir / "toolchain").chmod(0o755)
    env = {**isolated_env(tmp_path), "TOOLCHAIN_CACHE_DIR": str(cache),
           "PATH": f"{bin_dir}{os.pathsep}{os.path.dirname(sys.executable)}{os.pathsep}{os.environ['PATH']}"}
    env["PYTHONPATH"] = Cli(work, isolated_env(tmp_path)).env.get("PYTHONPATH", "")
    r = subprocess.run(["sh", "-e", "-c", lines], cwd=work, env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr
    result = json.loads((work / "bisect-demo" / "result.json").read_text())["result"]
    first_bad = result["first_bad"]
    assert first_bad["subject"] == "engine: count words by their spaces, without building a list", first_bad
    flat = " ".join((r.stdout + r.stderr).split())
    assert "word_count('two words ') = 4" in flat and (work / "bisect-demo" / "bad" / "stack.lock.toml").is_file()
