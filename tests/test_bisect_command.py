"""`toolchain bisect` end to end: a real recipe, a real git history, real test commands, an interrupt by a
real SIGINT and a resume. The pipeline call of the bisect builder is a stand-in writing real locks (each
"wheel" holds the commit's value.txt); tests/test_bisect_spine.py runs the same through real builds."""

from __future__ import annotations

import json
import os
import sys
import types
from pathlib import Path

import pytest

from tests.spine_helpers import GitRepo
from toolchain import cli
from toolchain.bisect.core import BuildOutcome, Candidate, Verdict, resumable
from toolchain.bisect.testers import CommandTester, TestCannotRun
from toolchain.build.cache import WheelRef
from toolchain.build.metrics import BuildMetrics
from toolchain.build.plan import component_env
from toolchain.build.stack import WheelSource
from toolchain.core.fs import sha256_file
from toolchain.core.proc.runner import run
from toolchain.core.proc.signals import STOPPING
from toolchain.core.serial import from_data, to_table
from toolchain.errors import BuildError, UsageError
from toolchain.lock import (
    Lock,
    LockedComponent,
    locked_env,
    read_lock,
    verify_wheels,
    write_lock,
)
from toolchain.target.facts import TargetInfo, ToolchainInfo

# ---- CommandTester: `git bisect run` semantics with real processes ------------------------------------------

SCRIPT = """\
import os, signal, sys, time
mode = sys.argv[1]
open(sys.argv[2], "w").write("|".join(os.environ[k] for k in
    ("TOOLCHAIN_BISECT_WHEELS", "TOOLCHAIN_BISECT_LOCK", "TOOLCHAIN_BISECT_COMMIT")))
open(sys.argv[2] + ".dir", "w").write("|".join(sorted(os.listdir(os.environ["TOOLCHAIN_BISECT_WHEEL_DIR"]))))
for i in range(30):
    print(f"line {i} of mode {mode}")
sys.stdout.flush()
if mode == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
if mode == "sleep":
    time.sleep(30)
sys.exit(int(mode))
"""


def _tester_run(tmp_path: Path, mode: str):
    script, seen = tmp_path / "t.py", tmp_path / "seen"
    script.write_text(SCRIPT)
    wheels = (tmp_path / "a-1-py3-none-any.whl", tmp_path / "b-1-py3-none-any.whl")
    for w in wheels:
        w.write_bytes(b"wheel")
    stale = tmp_path / "logs-wheels" / ("f" * 12)
    stale.mkdir(parents=True)
    (stale / "old-0-py3-none-any.whl").write_bytes(b"an earlier run's")  # the folder holds this step's only
    tester = CommandTester([sys.executable, str(script), mode, str(seen)], tmp_path / "logs",
                           timeout=3 if mode == "sleep" else 120)  # a loaded machine starts Python slowly
    build = BuildOutcome(True, lock_path=tmp_path / "stack.lock.toml", wheels=wheels)
    return tester, build, seen, wheels


@pytest.mark.parametrize(("mode", "verdict", "reason"), [
    ("0", Verdict.GOOD, "test exited 0"),
    ("125", Verdict.SKIP, "test exited 125 (cannot test this one)"),
    ("1", Verdict.BAD, "test exited 1"),
    ("3", Verdict.BAD, "test exited 3"),
    ("124", Verdict.BAD, "test exited 124"),
    ("sleep", Verdict.BAD, "test timed out after 3s"),
])
def test_command_tester_exit_codes_and_environment(tmp_path: Path, mode, verdict, reason):
    tester, build, seen, wheels = _tester_run(tmp_path, mode)
    got = tester.test(Candidate("f" * 40), build)
    assert (got.verdict, got.reason) == (verdict, reason)
    assert seen.read_text() == f"{os.pathsep.join(map(str, wheels))}|{tmp_path / 'stack.lock.toml'}|{'f' * 40}"
    assert Path(f"{seen}.dir").read_text() == "a-1-py3-none-any.whl|b-1-py3-none-any.whl"  # exactly this step's
    assert got.log == tmp_path / "logs" / f"{'f' * 12}.log" and got.log.is_file()
    if mode != "sleep":  # the last 20 lines (a test stopped after a timeout shows where it was)
        assert got.tail.splitlines() == [f"line {i} of mode {mode}" for i in range(10, 30)]
    else:
        assert "line 29 of mode sleep" in got.tail and got.tail.splitlines()[-1] == "KeyboardInterrupt"


@pytest.mark.parametrize(("mode", "final", "message"), [
    ("126", True, "the test could not run (exit 126)"),
    ("127", True, "the test could not run (exit 127)"),
    ("128", False, "the test exited 128 (128 and above: killed by a signal)"),
    ("137", False, "the test exited 137 (128 and above: killed by a signal, SIGKILL)"),
    ("kill", False, "the test was killed by signal 9 (SIGKILL)"),
])
def test_command_tester_aborts_on_a_test_that_cannot_run_or_is_killed(tmp_path: Path, mode, final, message):
    """`git bisect run` would count 126/127 as bad (and blame a commit for a broken test): they stop the bisect,
    as a test killed by a signal does, with the test's last lines."""
    tester, build, _, _ = _tester_run(tmp_path, mode)
    with pytest.raises(TestCannotRun) as info:
        tester.test(Candidate("f" * 40), build)
    err = info.value
    assert str(err).startswith(message) and err.return_code == 2 and err.final is final
    assert f"line 29 of mode {mode}" in str(err) and "line 9 of" not in str(err)
    assert str(tmp_path / "logs" / f"{'f' * 12}.log") in str(err) and "git bisect run" in (err.hint or "")
    assert resumable(err) is not final


def test_command_tester_missing_program_is_a_usage_error(tmp_path: Path):
    tester = CommandTester(["no-such-program-here-xyz"], tmp_path)
    with pytest.raises(UsageError, match=r"could not run \(exit 127\)(.|\n)*program not found"):
        tester.test(Candidate("a" * 40), BuildOutcome(True))


# ---- usage errors ------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("argv", "message"), [
    (["--recipe", "r", "--component", "c", "--good", "x"], "--test smoke or --test-cmd"),
    (["--recipe", "r", "--component", "c", "--good", "x", "--test", "smoke", "--test-cmd", "true"], "not allowed"),
    (["--good-lock", "a", "--test", "smoke"], "both --good-lock and --bad-lock"),
    (["--good-lock", "a", "--bad-lock", "b", "--recipe", "r", "--test", "smoke"], "--recipe cannot be combined"),
    (["--recipe", "r", "--test-cmd", "true"], "missing --component, --good"),
    (["--recipe", "r", "--component", "c", "--good", "x", "--test-cmd", " "], "--test-cmd is empty"),
    (["--resume"], "no bisect to resume"),
    (["--jobs", "0", "--resume"], "--jobs must be at least 1"),
    (["--recipe", "r", "--component", "c", "--good", "x", "--test-cmd", "true", "--mirror", "nope"], "FROM=TO"),
    # --smoke-args is read at once (not after the first build), by the smoke command's own option definitions
    (["--recipe", "r", "--component", "c", "--good", "x", "--test", "smoke", "--smoke-args", "--casez qa"],
     "--smoke-args: unrecognized arguments: --casez qa"),
    (["--recipe", "r", "--component", "c", "--good", "x", "--test", "smoke", "--smoke-args", "--port many"],
     "--smoke-args: argument --port: invalid int value"),
    (["--recipe", "r", "--component", "c", "--good", "x", "--test", "smoke", "--smoke-args", "--out elsewhere"],
     "--smoke-args: unrecognized arguments: --out"),  # each step's reports go under the bisect's --out
    (["--recipe", "r", "--component", "c", "--good", "x", "--test-cmd", "true", "--smoke-args=--ladder"],
     "--smoke-args goes with --test smoke"),
])
def test_usage_errors_exit_2(tmp_path: Path, capsys, argv, message):
    code = cli.main(["bisect", "--out", str(tmp_path / "o"), *argv, "--json"])
    assert code == 2
    assert message in json.loads(capsys.readouterr().out)["error"]


def test_saved_options_round_trip_through_the_state_file(tmp_path: Path):
    """What `--resume` reads back is what was started: smoke options, URL rewrites and paths included."""
    from toolchain.bisect.session import BisectOptions
    from toolchain.commands.smoke import parse_options
    from toolchain.sources.mirrors import parse_rewrites

    smoke = parse_options(["--cases", "math,qa", "--port", "8123", "--skip-device-check", "--venv", "v"])
    assert smoke.cases == ("math", "qa")
    assert smoke.port == 8123
    assert smoke.venv == Path("v").resolve()
    opts = BisectOptions(mode="commits", out=tmp_path / "o", smoke=smoke, recipe=tmp_path / "r.toml",
                         component="kern", good="a" * 40, rewrites=parse_rewrites([f"https://x/={tmp_path}/"]),
                         cache_dir=tmp_path / "cache", jobs=2)
    assert from_data(BisectOptions, json.loads(json.dumps(to_table(opts)))) == opts
    with pytest.raises(TypeError, match="smoke_args"):
        from_data(BisectOptions, {**to_table(opts), "smoke_args": ["--cases", "qa"]})


# ---- a stand-in build spine --------------------------------------------------------------------------------

def fake_spine(monkeypatch, calls: list):
    """Replaces the pipeline call of the bisect builder (and the mirror the candidates come from: the
    component's own repository). Returns the stand-in `build_stack`."""
    def build_stack(recipe, options, ui):
        comps = []
        for comp in recipe.components:
            show = lambda f: run(["git", "-C", comp.url, "show", f"{comp.commit}:{f}"], capture=True).stdout
            calls.append((comp.name, comp.commit))
            if "BROKEN" in show("notes.txt"):
                raise BuildError(f"{comp.name}: command failed with exit code 1: gcc kern.c\n  kern.c:1: error")
            wheel = options.out_dir / "wheels" / f"{comp.name}-0.1-py3-none-any.whl"
            wheel.parent.mkdir(parents=True, exist_ok=True)
            wheel.write_text(show("value.txt"))
            comps.append(LockedComponent(  # recorded as a real lock records the recipe's component
                name=comp.name, url=comp.url, ref="", commit=comp.commit, describe="", subdir=comp.subdir,
                after=comp.after, dist=comp.name, import_name=comp.name, version="0.1",
                install_args=comp.install_args, patches=(), env=locked_env(component_env(recipe, comp).items()),
                command=comp.command, cache_key=comp.commit, build_seconds=0.1,
                wheel=WheelRef(wheel.name, sha256_file(wheel), wheel.stat().st_size)))
        lock = Lock(recipe_name=recipe.name, recipe_path=str(recipe.path), recipe_sha256=recipe.sha256,
                    recipe_text=recipe.text, toolchain=ToolchainInfo(), target=TargetInfo(), smoke={},
                    components=tuple(comps))
        return read_lock(write_lock(lock, options.out_dir))

    class Mirrors:
        def __init__(self, cache_dir, rewrites=(), log_dir=None, ui=None):
            self.rewrites = rewrites

        def ensure(self, url, commit=None, *, where=""):
            return Path(url)

    def build_stack_components(recipe, options, ui):  # every component compiled (BuiltComponent.source)
        lock = build_stack(recipe, options, ui)
        return lock, [types.SimpleNamespace(source=WheelSource.BUILT, metrics=BuildMetrics()) for _ in lock.components]

    monkeypatch.setattr("toolchain.bisect.builder.build_stack_components", build_stack_components)
    monkeypatch.setattr("toolchain.bisect.candidates.Mirrors", Mirrors)
    monkeypatch.setattr("toolchain.bisect.candidates.recipe_rewrites", lambda recipe, cache: ())
    return build_stack


@pytest.fixture
def project(tmp_path: Path, monkeypatch):
    """A kernels repository of 20 first-parent commits: k13 breaks value.txt, k6 does not build; a recipe
    pinning it at the last commit beside a second component."""
    r = GitRepo.create(tmp_path / "kern", tag=None)
    c = [r.commit("k0", {"value.txt": "42\n", "notes.txt": "ok\n"})]
    for i in range(1, 20):
        files = {"value.txt": ("41\n" if i >= 13 else "42\n"), "notes.txt": "BROKEN\n" if i == 6 else f"{i}\n"}
        c.append(r.commit(f"[kernels] change {i}", files))
    other = GitRepo.create(tmp_path / "other", tag=None)
    o = other.commit("o0", {"value.txt": "1\n", "notes.txt": "ok\n"})
    recipe = tmp_path / "recipes" / "stack.toml"
    recipe.parent.mkdir()
    recipe.write_text(f"""
[toolchain]
setvars = ""
[components.other]
url = "{other.path}"
commit = "{o}"
[components.kern]
url = "{r.path}"
commit = "{c[-1]}"
after = ["other"]
""")
    calls: list = []
    build_stack = fake_spine(monkeypatch, calls)
    monkeypatch.setenv("TOOLCHAIN_CACHE_DIR", str(tmp_path / "cache"))
    script = tmp_path / "repro.py"
    script.write_text("""\
import os, signal, sys, time
log, stop = sys.argv[1], sys.argv[2]
commit = os.environ["TOOLCHAIN_BISECT_COMMIT"]
with open(log, "a") as f:
    f.write(commit + "\\n")
if stop != "-" and not os.path.exists(stop):
    open(stop, "w").close()
    os.kill(os.getppid(), signal.SIGINT)   # Ctrl-C reaching toolchain while this test runs
    time.sleep(20)
kern = [w for w in os.environ["TOOLCHAIN_BISECT_WHEELS"].split(os.pathsep) if "kern-" in w][0]
sys.exit(0 if open(kern).read().strip() == "42" else 1)
""")
    return types.SimpleNamespace(repo=r, commits=c, recipe=recipe, calls=calls, script=script, tmp=tmp_path,
                                 build_stack=build_stack)


def test_commit_bisect_end_to_end_with_interrupt_and_resume(project, capsys, monkeypatch):
    p = project
    monkeypatch.setattr("toolchain.bisect.core.idle_cores", lambda: 8.0)  # cores to spare: only --jobs stops builds ahead
    out, tested = p.tmp / "out", p.tmp / "tested.txt"
    test_cmd = f"{sys.executable} {p.script} {tested} {p.tmp / 'stop-once'}"
    argv = ["bisect", "--recipe", str(p.recipe), "--component", "kern", "--good", p.commits[0][:10],
            "--test-cmd", test_cmd, "--out", str(out), "--jobs", "1"]
    assert cli.main(argv) == 130
    assert not STOPPING.is_set()  # the stop is over: a later call in this process is no stop's victim
    err = capsys.readouterr().err
    state = out / "bisect-state.json"
    assert f"resume with: toolchain bisect --resume --state {state}" in " ".join(err.split())
    saved = json.loads(state.read_text())
    assert saved["phases"]["commits"]["steps"] == []
    assert not saved["done"]
    other = [a if a != p.commits[0][:10] else p.commits[1][:10] for a in argv]
    assert cli.main(other) == 2  # an unfinished bisect is not overwritten by another one
    assert "holds an unfinished bisect with other options" in capsys.readouterr().err

    assert cli.main(["bisect", "--resume", "--state", str(state), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["result"]["builds"]["speculative"] == 0  # the resume kept --jobs 1
    assert not any(s["prefetched"] for s in data["result"]["steps"])
    first_bad = data["result"]["first_bad"]
    assert first_bad["key"] == p.commits[13]
    assert first_bad["subject"] == "[kernels] change 13"
    assert data["result"]["last_good"]["key"] == p.commits[12]
    lines = tested.read_text().split()
    assert len(lines) == len(set(lines)) + 1  # only the interrupted test ran twice
    assert [s["key"] for s in data["result"]["steps"]] == [p.commits[i] for i in (9, 14, 11, 12, 13)]
    # the good and bad locks are written beside the result, with their wheels
    for side, commit in (("good", p.commits[12]), ("bad", p.commits[13])):
        lock = read_lock(out / side / "stack.lock.toml")
        verify_wheels(lock)
        assert lock.component("kern").commit == commit
        assert lock.component("other").commit
    assert json.loads((out / "result.json").read_text())["result"]["first_bad"]["key"] == p.commits[13]
    log = (out / "bisect.log").read_text()
    assert "interrupted" in log
    assert "done after" in log
    # every step built only the pinned commit of kern beside the recipe's `other`
    assert {name for name, _ in p.calls} == {"kern", "other"}


def test_an_unbuildable_commit_next_to_the_boundary_and_a_rerun(project, capsys):
    p = project
    out = p.tmp / "out2"
    test_cmd = f"{sys.executable} {p.script} {p.tmp / 't2.txt'} -"
    base = ["bisect", "--recipe", str(p.recipe), "--component", "kern", "--test-cmd", test_cmd,
            "--out", str(out), "--jobs", "1", "--json"]
    # k6 does not build: between good k5 and bad k7 the first bad is k6 or k7; exit 1 says "not found" (k7 is
    # not bad for this test: the endpoint check, skipped here, would refuse it; see test_bisect_trust.py)
    assert cli.main([*base, "--good", p.commits[5], "--bad", p.commits[7], "--no-check-endpoints"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert not data["ok"]
    assert data["result"]["first_bad"] is None
    assert [c["key"] for c in data["result"]["possible"]] == [p.commits[6], p.commits[7]]
    assert [(c["key"], c["reason"]) for c in data["result"]["skipped"]] == [
        (p.commits[6], "build failed: kern: command failed with exit code 1: gcc kern.c")]
    assert set(data["locks"]) == {"good", "bad"}
    # the state file holds a finished bisect: a new one may start over it (--bad defaults to the recipe's)
    assert cli.main([*base, "--good", p.commits[10]]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["result"]["first_bad"]["key"] == p.commits[13]
    assert data["result"]["skipped"] == []


def test_lock_mode_needs_readable_locks(tmp_path: Path, capsys):
    code = cli.main(["bisect", "--good-lock", str(tmp_path / "a"), "--bad-lock", str(tmp_path / "b"),
                     "--test-cmd", "true", "--out", str(tmp_path / "o"), "--json"])
    assert code == 2
    assert "no such lock file" in json.loads(capsys.readouterr().out)["error"]


def test_lock_to_lock_end_to_end(project, capsys):
    """Two locks built from recipes that differ in MAX_JOBS, the kernels commit and a serve env variable:
    the commit change is found, then the first bad commit inside it; every step is a table row."""
    from toolchain.build.stack import BuildOptions
    from toolchain.console import UI
    from toolchain.recipe import load as recipes

    p = project
    text = p.recipe.read_text()
    locks = {}
    for side, commit, jobs, backend in (("good", p.commits[0], "2", "w4a16"), ("bad", p.commits[-1], "4", "ark")):
        path = p.tmp / "recipes" / f"{side}.toml"
        path.write_text(text.replace(p.commits[-1], commit) + f'[env]\nMAX_JOBS = "{jobs}"\n'
                        f'[smoke]\nmodel = "m"\n[smoke.env]\nVLLM_XPU_INC_WNA16_BACKEND = "{backend}"\n')
        lock = p.build_stack(recipes.load_recipe(str(path)), BuildOptions(p.tmp / side, p.tmp / "cache"), UI())
        locks[side] = lock.path
    out, tested = p.tmp / "lout", p.tmp / "tested-locks.txt"
    code = cli.main(["bisect", "--good-lock", str(locks["good"].parent), "--bad-lock", str(locks["bad"]),
                     "--test-cmd", f"{sys.executable} {p.script} {tested} -", "--out", str(out), "--jobs", "1",
                     "--json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 0, data
    result = data["result"]
    assert [d["kind"] for d in result["differences"]] == ["build-env", "commit", "serve-env"]
    assert result["culprit"]["kind"] == "commit"
    assert result["culprit"]["component"] == "kern"
    assert result["changes"]["first_bad"]["key"] == "d2"
    assert result["commits"]["first_bad"]["key"] == p.commits[13]
    for side, commit in (("good", p.commits[12]), ("bad", p.commits[13])):
        lock = read_lock(out / side / "stack.lock.toml")
        verify_wheels(lock)
        assert lock.component("kern").commit == commit
        assert 'MAX_JOBS = "4"' in lock.recipe_text
        assert '"w4a16"' in lock.recipe_text
    assert json.loads((out / "bisect-state.json").read_text())["done"] is True
