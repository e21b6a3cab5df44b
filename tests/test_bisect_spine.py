"""`toolchain bisect` through the real build spine, as a real process: real git, real `pip wheel` builds
(the tiny backend), a real Ctrl-C (SIGINT) and `--resume`, a repeated bisect that compiles nothing, and a
lock-to-lock bisect between two locks written by `toolchain build`."""

from __future__ import annotations

import json
import shlex
import socket
import sys
from dataclasses import replace
from pathlib import Path
from typing import ClassVar

import pytest

from tests.spine_helpers import TINY_INIT, component, recipe_data
from toolchain.lock import read_lock, verify_wheels

pytestmark = pytest.mark.slow

TEST = """\
import os, signal, sys, time, zipfile
stop = sys.argv[1] if len(sys.argv) > 1 else ""
if stop and not os.path.exists(stop):
    open(stop, "w").close()
    os.kill(os.getppid(), signal.SIGINT)   # Ctrl-C reaching `toolchain bisect` while this test runs
    time.sleep(30)
wheel = [w for w in os.environ["TOOLCHAIN_BISECT_WHEELS"].split(os.pathsep) if os.path.basename(w).startswith("tiny-")]
value = zipfile.ZipFile(wheel[0]).read("tiny/value.py").decode()
sys.exit(0 if "42" in value else 1)
"""
FIRST_BAD, UNBUILDABLE = 9, 6
FAULT_SERVER = Path(__file__).resolve().parent / "smoke" / "fault_server.py"
SERVE = """\
import runpy, sys
from tiny.value import VALUE   # the kern wheel, installed by `toolchain smoke` into its fresh venv
server = sys.argv[1]
sys.argv = [server, *sys.argv[2:], "--mode", "healthy" if VALUE == 42 else "oom"]
runpy.run_path(server, run_name="__main__")
"""


@pytest.fixture
def stack(ws, make_repo):
    """kern (the tiny package): c0..c12; c9 makes VALUE wrong, c6 does not build (c7 fixes it);
    other (a second package) pinned; the recipe `stack` pins kern at c12."""
    kern = make_repo("kern", "tiny")
    pyproject = (kern.path / "pyproject.toml").read_text()
    commits = [kern.commit("add value", {"tiny/value.py": "VALUE = 42\n"})]
    for i in range(1, 13):
        files = {"tiny/value.py": f"VALUE = {41 if i >= FIRST_BAD else 42}  # {i}\n",
                 "pyproject.toml": pyproject + ('fail = "TINY-BUILD-FAILS: syntax error"\n' if i == UNBUILDABLE else "")}
        commits.append(kern.commit(f"kern change {i}", files))
    other = make_repo("other", "distname")
    ws.recipe("stack", recipe_data({"other": component(other, dist="other-name"),
                                    "kern": component(kern, commits[-1], after=["other"], dist="tiny")}))
    script = ws.root / "repro.py"
    script.write_text(TEST)
    return kern, other, commits, script


def test_commit_bisect_interrupt_resume_and_a_repeat_that_compiles_nothing(ws, stack):
    _kern, _, c, script = stack
    counter = ws.root / "builds.txt"
    env = {"TINY_BUILD_COUNTER": str(counter)}
    out = ws.root / "bisect"
    args = ["bisect", "--recipe", "stack", "--component", "kern", "--good", c[0], "--cache-dir", ws.cache,
            "--jobs", "1", "--json"]
    r = ws.cli(*args, "--out", out, "--test-cmd", f"{sys.executable} {script} {ws.root / 'stop-once'}", env=env)
    assert r.returncode == 130, str(r)
    state = out / "bisect-state.json"
    assert f"resume with: toolchain bisect --resume --state {state}" in " ".join(r.stderr.split()), str(r)

    r = ws.cli("bisect", "--resume", "--state", state, "--json", env=env)
    assert r.returncode == 0, str(r)
    data = r.json()["result"]
    assert data["first_bad"]["key"] == c[FIRST_BAD]
    assert data["first_bad"]["subject"] == f"kern change {FIRST_BAD}"
    assert data["last_good"]["key"] == c[FIRST_BAD - 1]
    (skipped,) = data["skipped"]
    assert skipped["key"] == c[UNBUILDABLE]
    assert skipped["reason"].startswith("build failed: building kern@")
    for side, i in (("good", FIRST_BAD - 1), ("bad", FIRST_BAD)):
        lock = read_lock(out / side / "stack.lock.toml")
        verify_wheels(lock)
        assert lock.component("kern").commit == c[i]
        assert lock.component("other").commit
    compiled = counter.read_text().splitlines()
    # --jobs 1 holds after --resume: nothing was built ahead (a build ahead that no step needs is a compile)
    assert data["builds"]["speculative"] == 0 and not any(s["prefetched"] for s in data["steps"]), data
    # kern once per tested or skipped commit and per end (checked first; the interrupted check's build was kept,
    # not redone), `other` once: it came from the wheel cache at every other step
    assert [x["endpoint"] for x in data["checks"]] == ["good", "bad"]
    assert len(compiled) == len({s["key"] for s in data["steps"]} | {c[0], c[-1]}) + 1, compiled

    r = ws.cli(*args, "--out", ws.root / "again", "--test-cmd", f"{sys.executable} {script}", env=env)
    assert r.returncode == 0, str(r)
    again = r.json()["result"]
    assert again["first_bad"]["key"] == c[FIRST_BAD]
    assert counter.read_text().splitlines() == compiled  # nothing compiled the second time
    assert again["builds"]["compiled"] == 0
    assert all(s["cached"] for s in again["steps"])


def test_lock_to_lock_through_the_spine(ws, stack):
    kern, other, c, script = stack
    for side, commit, jobs, x in (("good", c[3], "2", "a"), ("bad", c[12], "3", "b")):
        ws.recipe(side, recipe_data({"other": component(other, dist="other-name"),
                                     "kern": component(kern, commit, after=["other"], dist="tiny")},
                                    env={"MAX_JOBS": jobs}, smoke={"model": "m", "env": {"X_BACKEND": x}}))
        r = ws.build(side, f"out-{side}")
        assert r.returncode == 0, str(r)
    out = ws.root / "lock-bisect"
    r = ws.cli("bisect", "--good-lock", ws.root / "out-good", "--bad-lock", ws.root / "out-bad" / "stack.lock.toml",
               "--test-cmd", f"{sys.executable} {script}", "--cache-dir", ws.cache, "--out", out, "--jobs", "1",
               "--json")
    assert r.returncode == 0, str(r)
    data = r.json()["result"]
    assert [(d["kind"], d["path"]) for d in data["differences"]] == [
        ("build-env", "env.MAX_JOBS"), ("commit", "components.kern.commit"), ("serve-env", "smoke.env.X_BACKEND")]
    assert data["culprit"]["kind"] == "commit"
    assert data["commits"]["first_bad"]["key"] == c[FIRST_BAD]
    bad = read_lock(out / "bad" / "stack.lock.toml")
    assert bad.path is not None
    verify_wheels(bad)
    assert bad.component("kern").commit == c[FIRST_BAD]
    assert json.loads(Path(bad.path).parent.joinpath("..", "result.json").read_text())["ok"] is True
    assert 'MAX_JOBS = "3"' in bad.recipe_text
    assert '"a"' in bad.recipe_text


def test_a_component_built_before_the_bisected_one_that_fails_stops_the_bisect(ws, stack, make_repo):
    kern, _, c, script = stack
    broken = make_repo("broken", "fails")
    ws.recipe("broken", recipe_data({"broken": component(broken), "kern": component(kern, c[-1], after=["broken"], dist="tiny")}))
    r = ws.cli("bisect", "--recipe", "broken", "--component", "kern", "--good", c[0], "--cache-dir", ws.cache,
               "--out", ws.root / "b", "--test-cmd", f"{sys.executable} {script}", "--jobs", "1", "--json")
    assert r.returncode == 1, str(r)
    err = r.json()["error"]
    assert err.startswith("broken does not build, and it is built before kern"), err
    assert "resume with" not in r.stderr  # final: the recipe must be mended, then a new bisect started
    state = json.loads((ws.root / "b" / "bisect-state.json").read_text())
    assert state["phases"] == {}  # stopped at the first build: no verdict recorded


def test_commit_bisect_with_the_smoke_regression_set(ws, stack):
    """--test smoke: each step's lock is installed into a fresh venv and served; the server (the smoke
    tests' fault server) answers wrongly when the installed kern is bad."""
    _kern, _, c, _ = stack
    serve = ws.root / "serve.py"
    serve.write_text(SERVE)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    serve_cmd = shlex.join(["{python}", str(serve), str(FAULT_SERVER), "--port", "{port}"])
    smoke_args = shlex.join(["--serve-cmd", serve_cmd, "--skip-device-check", "--cases", "models,math",
                             "--port", str(port), "--ready-timeout", "120"])
    out = ws.root / "smoke-bisect"
    r = ws.cli("bisect", "--recipe", "stack", "--component", "kern", "--good", c[FIRST_BAD - 2],
               "--bad", c[FIRST_BAD + 1], "--test", "smoke", "--smoke-args", smoke_args, "--cache-dir", ws.cache,
               "--out", out, "--jobs", "1", "--json")
    assert r.returncode == 0, str(r)
    data = r.json()["result"]
    assert data["first_bad"]["key"] == c[FIRST_BAD]
    steps = {s["key"]: s for s in data["steps"]}
    assert steps[c[FIRST_BAD - 1]]["verdict"] == "good"
    assert steps[c[FIRST_BAD - 1]]["reason"] == "smoke passed"
    bad = steps[c[FIRST_BAD]]
    assert bad["verdict"] == "bad"
    assert bad["reason"].startswith("smoke failed: ")
    assert "math=" in bad["reason"]
    report = json.loads((out / "tests" / c[FIRST_BAD][:12] / "report.json").read_text())
    assert report["verdict"] == "fail"


PATCHED_TEST = """\
import os, sys, zipfile
wheel = [w for w in os.environ["TOOLCHAIN_BISECT_WHEELS"].split(os.pathsep) if os.path.basename(w).startswith("tiny-")]
with zipfile.ZipFile(wheel[0]) as z:
    assert "PATCHED = True" in z.read("tiny/__init__.py").decode(), "the recipe's patch was not applied"
    sys.exit(0 if "42" in z.read("tiny/value.py").decode() else 1)
"""


def test_commit_bisect_of_a_patched_component(ws, stack):
    """A component with a patch (as the demo's engine and vLLM have): every step builds it patched, the
    remembered-failure key comes from the patch's sha256, and the published ends are readable (0644) like
    the cache's copies."""
    kern, other, c, _ = stack
    ws.patch("kern/0001-mark-patched.patch", kern.make_patch({"tiny/__init__.py": TINY_INIT + "PATCHED = True\n"}))
    ws.recipe("patched", recipe_data({"other": component(other, dist="other-name"),
                                      "kern": component(kern, c[-1], after=["other"], dist="tiny",
                                                        patches=["kern/0001-mark-patched.patch"])}))
    script = ws.root / "patched-test.py"
    script.write_text(PATCHED_TEST)
    out = ws.root / "patched-bisect"
    r = ws.cli("bisect", "--recipe", "patched", "--component", "kern", "--good", c[FIRST_BAD - 2],
               "--bad", c[FIRST_BAD + 1], "--test-cmd", f"{sys.executable} {script}", "--cache-dir", ws.cache,
               "--out", out, "--jobs", "1", "--json")
    assert r.returncode == 0, str(r)
    data = r.json()["result"]
    assert data["first_bad"]["key"] == c[FIRST_BAD]
    assert data["skipped"] == []
    assert {s["verdict"] for s in data["steps"]} == {"good", "bad"}  # the script's assert held: patched builds
    for side, i in (("good", FIRST_BAD - 1), ("bad", FIRST_BAD)):
        lock = read_lock(out / side / "stack.lock.toml")
        verify_wheels(lock)
        assert [p.path for p in lock.component("kern").patches] == ["kern/0001-mark-patched.patch"]
        assert lock.component("kern").commit == c[i]
        assert lock.path is not None
        published = [lock.path, *(lock.wheel_path(comp) for comp in lock.components)]
        assert {oct(p.stat().st_mode & 0o777) for p in published} == {"0o644"}, published
    cached = list((ws.cache / "wheels").rglob("*.whl"))
    assert cached
    assert {oct(p.stat().st_mode & 0o777) for p in cached} == {"0o644"}


def test_unbuildable_memo_key_follows_the_patch_identity(ws, stack):
    """The digest that remembers a failed build is the recipe text and every patch's sha256: a patch edited
    in place (same name) is a new key; a patch from another repository counts by its pinned sha256."""
    from toolchain.bisect.builder import recipe_digest
    from toolchain.recipe.load import load_recipe
    from toolchain.recipe.model import Patch

    kern, _other, c, _ = stack
    patch = ws.patch("kern/fix.patch", kern.make_patch({"tiny/__init__.py": TINY_INIT + "A = 1\n"}))
    ws.recipe("p", recipe_data({"kern": component(kern, c[-1], dist="tiny", patches=["kern/fix.patch"])}))
    recipe = load_recipe(str(ws.recipes / "p.toml"))
    first = recipe_digest(recipe)
    assert recipe_digest(load_recipe(str(ws.recipes / "p.toml"))) == first
    patch.write_text(kern.make_patch({"tiny/__init__.py": TINY_INIT + "A = 2\n"}))
    assert recipe_digest(load_recipe(str(ws.recipes / "p.toml"))) != first  # (each step's recipe is loaded anew)
    remote = Patch("fix.patch", "b" * 64, url="https://example.invalid/r.git", commit="a" * 40)
    comp = replace(recipe.components[0], patches=(remote,))
    with_remote = replace(recipe, components=(comp,))
    other_sha = replace(recipe, components=(replace(comp, patches=(replace(remote, sha256="c" * 64),)),))
    assert recipe_digest(with_remote) != recipe_digest(other_sha)


def test_builds_ahead_run_concurrently_through_the_spine(ws, stack, monkeypatch):
    """jobs=3 with idle cores: builds ahead (spread over the range: a tiny build keeps about one core busy)
    run in threads into the same cache; the answer is the same and no commit is built twice."""
    from toolchain.bisect.builder import SpineBuilder
    from toolchain.bisect.candidates import git_candidates
    from toolchain.bisect.core import Bisector
    from toolchain.bisect.testers import CommandTester
    from toolchain.console import UI
    from toolchain.recipe import load as recipes

    kern, _, c, script = stack
    counter = ws.root / "builds.txt"
    monkeypatch.setenv("TINY_BUILD_COUNTER", str(counter))
    base = recipes.load_recipe(str(ws.recipes / "stack.toml"))
    builder = SpineBuilder(lambda sha: base.with_commit("kern", sha), ws.root / "steps", ws.cache, (),
                           UI(quiet=True), component="kern")
    tester = CommandTester([sys.executable, str(script)], ws.root / "logs", timeout=120)
    result = Bisector(git_candidates(kern.path, c[0], c[-1]), builder, tester, jobs=3, idle=lambda: 8.0).run()
    assert result.first_bad is not None
    assert result.first_bad.key == c[FIRST_BAD]
    assert any(s.prefetched for s in result.steps)
    assert result.builds_speculative >= 1
    built = result.builds_needed + result.builds_speculative
    assert len(counter.read_text().splitlines()) == built + 1  # each kern commit once, `other` once


def test_a_spread_bisect_through_the_spine_tests_what_plain_bisection_does(ws, stack):
    """2 idle cores, jobs=3: the first compiled build measures how many cores a build keeps busy (one: a
    `pip wheel` of the tiny package), then two builds at once spread over the range. The steps, the skip of
    the commit that does not build and the first bad commit are those of plain bisection."""
    from toolchain.bisect.builder import SpineBuilder
    from toolchain.bisect.candidates import git_candidates
    from toolchain.bisect.core import BisectHandler, Bisector, BuildOutcome, Verdict
    from toolchain.bisect.testers import CommandTester
    from toolchain.console import UI
    from toolchain.recipe import load as recipes

    class Plain:  # the same commits, scripted: plain bisection (jobs=1)
        def build(self, key):
            return BuildOutcome(key != c[UNBUILDABLE], reason="does not build")

        def test(self, cand, build):
            return Verdict.BAD if c.index(cand.key) >= FIRST_BAD else Verdict.GOOD

    class Seen(BisectHandler):
        events: ClassVar[list[str]] = []

        def building(self, cand):
            Seen.events.append("building")

        def prefetching(self, cand):
            Seen.events.append("ahead")

    kern, _, c, script = stack
    cands = git_candidates(kern.path, c[0], c[-1])
    base = recipes.load_recipe(str(ws.recipes / "stack.toml"))
    builder = SpineBuilder(lambda sha: base.with_commit("kern", sha), ws.root / "steps", ws.cache, (),
                           UI(quiet=True), component="kern")
    tester = CommandTester([sys.executable, str(script)], ws.root / "logs", timeout=120)
    result = Bisector(cands, builder, tester, Seen(), jobs=3, idle=lambda: 2.0).run()
    plain = Bisector(cands, Plain(), Plain()).run()
    assert result.first_bad is not None and plain.first_bad is not None
    assert result.first_bad.key == plain.first_bad.key == c[FIRST_BAD]
    assert [(s.key, s.verdict) for s in result.steps] == [(s.key, s.verdict) for s in plain.steps]
    assert any(s.key == c[UNBUILDABLE] and s.build_failed for s in result.steps)
    assert result.builds_needed == plain.builds_needed
    assert ("ahead", "building") in set(zip(Seen.events, Seen.events[1:], strict=False))  # spread: with a step's own build
