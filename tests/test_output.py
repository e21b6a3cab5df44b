"""What a log carries (issue 22) and what a terminal shows (issue 19, item 9): the build summary, `plan` and
`cache ls` rendered piped (a CI log, `nohup ... > build.log`) at 80 and 200 columns and in an 80-column
terminal (a real pseudo-terminal): tables wrap rows, never characters; whole wheel names, 12-hex sha256 and
commits, the whole describe; a wheel from the cache says so and when its build ran; `plan` shows the patches
and what differs between cards (the AOT devices, ARK_SYCL_TARGET).
"""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from tests.spine_helpers import REPO_ROOT, STANDIN_SETVARS, Cli, component, isolated_env, recipe_data

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")


def in_terminal(argv: Sequence[str | Path], cwd: Path, env: dict[str, str], columns: int = 80, timeout: float = 300) -> str:
    """Run `argv` with stdout and stderr on a pseudo-terminal `columns` wide; what it showed, without escapes."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    env = {k: v for k, v in env.items() if k not in ("COLUMNS", "LINES")}
    proc = subprocess.Popen(argv, cwd=cwd, env={**env, "TERM": "xterm"}, stdin=subprocess.DEVNULL,
                            stdout=follower, stderr=follower, start_new_session=True)
    os.close(follower)
    chunks = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([leader], [], [], 0.5)
        if ready:
            try:
                data = os.read(leader, 65536)
            except OSError:  # the last writer closed it
                break
            if not data:
                break
            chunks.append(data)
        elif proc.poll() is not None:
            break
    proc.wait(timeout=30)
    os.close(leader)
    text = ANSI.sub("", b"".join(chunks).decode("utf-8", "replace")).replace("\r\n", "\n")
    assert proc.returncode == 0, text
    return text


def grid_lines(text: str, title: str) -> list[str]:
    """The lines of the table titled `title...` (up to the first line after it that starts with no space and
    names no component), as shown."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(title))
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith(("lock:", "bundle:"))), len(lines))
    return lines[start:end]


@pytest.fixture(scope="module")
def warm(realstack_built, tmp_path_factory):
    """The realstack built again from its cache: the argv of that build, in a fresh directory."""
    root = tmp_path_factory.mktemp("warm")
    cli = Cli(root, isolated_env(root))

    def argv(out: str) -> list[str]:
        return cli.argv(["build", "--recipe", realstack_built.stack.stack, "--cache-dir", realstack_built.cache,
                         "--out", root / out])
    lock = realstack_built.lock()
    return root, cli, argv, lock


@pytest.mark.parametrize("columns", [80, 200])
def test_the_build_summary_piped(warm, columns):
    root, cli, argv, lock = warm
    r = subprocess.run(argv(f"out-{columns}"), cwd=root, env={**cli.env, "COLUMNS": str(columns)},
                       capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr
    table = grid_lines(r.stdout, "stack: ")
    assert "…" not in r.stdout + r.stderr
    assert all(len(line) <= columns for line in table[1:]), "\n".join(table)  # (the title holds a path)
    for c in lock["components"]:
        rows = [line for line in table if c["name"] in line.split()]
        assert rows, (c["name"], table)
        shown = "\n".join(table)
        assert c["wheel"]["file"] in shown
        assert c["wheel"]["sha256"][:12] in shown
        assert c["describe"] in shown
        assert c["commit"][:12] in shown
        assert c["wheel"]["sha256"][:13] not in shown
    assert len(re.findall(r"cached \(built in [0-9.]+ (s|min) on \d{4}-\d\d-\d\d\)", r.stdout)) == len(lock["components"])
    if columns == 200:  # the row's own line holds all but the build cost (below it)
        assert table[1].split() == ["component", "commit", "describe", "wheel", "sha256", "from"]
        for c in lock["components"]:
            (row,) = [line for line in table if line.startswith(c["name"] + " ")]
            assert c["wheel"]["file"] in row
            assert c["wheel"]["sha256"][:12] in row
    else:  # rows wrapped: the wheel on a line of its own, labelled
        for c in lock["components"]:  # the wheel whole on one line: beside its label, or below it
            assert re.search(rf"^ +(wheel +)?{re.escape(c['wheel']['file'])}$", "\n".join(table), re.M), table
    for line in r.stderr.splitlines():  # events: one line each, none wrapped (a path is never split)
        assert not line.startswith(" " * 6), r.stderr


def test_the_build_summary_in_an_80_column_terminal(warm):
    root, cli, argv, lock = warm
    shown = in_terminal(argv("out-tty"), root, cli.env, 80)
    table = grid_lines(shown, "stack: ")
    assert all(len(line) <= 80 for line in table[1:]), "\n".join(table)
    assert "…" not in shown
    for c in lock["components"]:
        assert c["wheel"]["file"] in shown
        assert c["wheel"]["sha256"][:12] in shown
    assert shown.count("cached (built in") == len(lock["components"])


def test_plan_in_an_80_column_terminal_shows_patches_and_what_differs_between_cards(realstack, tmp_path):
    """Issue 19 item 9: the B60 and B70 plans differ in their table, not only in --json; patches visible."""
    env = isolated_env(tmp_path)
    shown = {}
    for recipe in ("ark-latest", "ark-latest-b60"):
        shown[recipe] = in_terminal([sys.executable, "-m", "toolchain", "plan", "--recipe", recipe,
                                     "--recipes-dir", REPO_ROOT / "recipes", "--cache-dir", tmp_path / "cache"],
                                    tmp_path, env, 80)
        assert all(len(line) <= 80 for line in grid_lines(shown[recipe], "plan for")[1:]), shown[recipe]
    for key, b70, b60 in (("VLLM_XPU_AOT_DEVICES", "bmg-g31-a0", "bmg-g21-a0"),
                          ("ARK_SYCL_TARGET", "intel_gpu_bmg_g31", "intel_gpu_bmg_g21")):
        assert f"{key}={b70}" in shown["ark-latest"]
        assert f"{key}={b60}" not in shown["ark-latest"]
        assert f"{key}={b60}" in shown["ark-latest-b60"]
        assert f"{key}={b70}" not in shown["ark-latest-b60"]
    # a stack with patches: each patch is shown whole at 80 columns (the patches column never squeezed away)
    text = in_terminal([sys.executable, "-m", "toolchain", "plan", "--recipe", realstack.stack,
                        "--cache-dir", tmp_path / "cache2"], tmp_path, env, 80)
    table = grid_lines(text, "plan for")
    assert all(len(line) <= 80 for line in table[1:]), text
    assert "engine/0001-engine-reject-empty-prompt.patch" in text
    assert "ark/0001-ark-supported-devices.patch" in text


def test_cache_ls_at_80_columns_keeps_each_wheel_name_on_one_line(realstack_built):
    r = realstack_built.cli("cache", "ls", "--cache-dir", realstack_built.cache, env={"COLUMNS": "80"})
    assert r.returncode == 0, str(r)
    table = grid_lines(r.stdout, "local wheel cache")
    assert all(len(line) <= 80 for line in table[1:]), r.stdout
    for c in realstack_built.lock()["components"]:
        assert re.search(rf"^ +(wheel +)?{re.escape(c['wheel']['file'])}$", r.stdout, re.M), r.stdout


# ---- a log that is never silent while a build runs -----------------------------------------------------------

SLEEPY_STEP = """\
import subprocess, sys, time
print("step: compiling the slow part", flush=True)
time.sleep(float(sys.argv[3]))
subprocess.check_call([sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-q",
                       sys.argv[1], "-w", sys.argv[2]])
"""


def sleepy_build(ws, make_repo, seconds: float, *extra: str):
    repo = make_repo("sleepy", "tiny")
    repo.commit("a slow step", {"step.py": SLEEPY_STEP})
    ws.recipe("r", recipe_data({"sleepy": component(repo, command=["{python}", "{src}/step.py", "{src}", "{out}",
                                                                   str(seconds)], dist="tiny")}))
    r = ws.cli("build", "--recipe", "r", "--out", ws.root / "out", "--cache-dir", ws.cache, *extra, timeout=300)
    assert r.returncode == 0, str(r)
    lines = r.stderr.splitlines()
    done = next(i for i, line in enumerate(lines) if "sleepy: built" in line)
    beats = [line for line in lines[:done]
             if re.fullmatch(r"\[\d\d:\d\d:\d\d\] sleepy: building for \d+m\d\ds, \d+ jobs?, "
                             r"(peak \d+\.\d [KMG]iB, )?(ccache \d+ hits / \d+ misses, )?"
                             r"last: step: compiling the slow part", line)]
    return r, beats


def test_a_piped_build_shows_a_heartbeat_at_the_interval_asked(ws, make_repo):
    r, beats = sleepy_build(ws, make_repo, 5, "--progress-interval", "1")
    assert len(beats) >= 2, r.stderr
    # the runner's live reading (every 2 s): the peak memory so far, and this build's ccache counts (no compile);
    # on a loaded machine the runner's first reading can come after the first beats
    assert any(re.search(r", peak \d+\.\d [KMG]iB, ccache 0 hits / 0 misses, last:", b) for b in beats), r.stderr
    started = [line for line in r.stderr.splitlines() if "building sleepy@" in line]
    assert len(started) == 1 and re.match(r"\[\d\d:\d\d:\d\d\] building sleepy@\w{12} in the host \(log: \S+\)$",
                                          started[0]), r.stderr  # a change of state: one stamped line


@pytest.mark.slow
def test_a_piped_build_step_of_40s_shows_a_heartbeat_at_the_default_interval(ws, make_repo):
    r, beats = sleepy_build(ws, make_repo, 40)
    assert len(beats) >= 1, r.stderr
    # the first beat comes at the default 30 s interval, counted from the heartbeat's start: the build itself
    # started a moment later, so its elapsed time reads about 30 s (29 s was seen). The bounds only tell the
    # default from a 1 s or a 60 s one: a busy machine may start the build or wake the heartbeat late.
    elapsed = re.search(r"building for (\d+)m(\d+)s", beats[0])
    assert elapsed and 15 <= int(elapsed[1]) * 60 + int(elapsed[2]) < 60, r.stderr


# ---- TIPs lead with the cause at hand ----------------------------------------------------------------------

def test_a_build_failing_for_a_missing_requirement_under_the_stand_in_gets_no_stand_in_tip(ws, make_repo):
    """Issue 22: under the oneAPI stand-in, a build that lacks `ninja` is told to install ninja; no paragraph
    about the stand-in (it is not the cause). (A build that needs `icx` leads with the stand-in: test_issue9_cli.)"""
    repo = make_repo("needy", "tiny")
    pyproject = (repo.path / "pyproject.toml").read_text().replace("requires = []", 'requires = ["ninja-xpu-absent"]')
    repo.commit("needs ninja", {"pyproject.toml": pyproject})
    ws.recipe("r", recipe_data({"needy": component(repo, dist="tiny")}, setvars=str(STANDIN_SETVARS)))
    r = ws.build("r", env={"GITHUB_ACTIONS": "true"})
    assert r.returncode == 1, str(r)
    err = r.json()
    assert "build requirements missing" in err["error"] and "ninja-xpu-absent" in err["error"], str(r)
    # under GitHub Actions: the failed component's log tail folded under its name, and an error annotation
    group = r.stderr.split("::group::needy: FAILED\n", 1)[1].split("::endgroup::", 1)[0]
    assert "# needy file://" in group and "ninja-xpu-absent" in group, r.stderr
    assert re.search(r"^::error title=BuildError::.*build requirements missing", r.stderr, re.M), r.stderr
    assert err["hint"].startswith("builds use --no-build-isolation, so install them"), err["hint"]
    assert "STAND-IN" not in err["hint"] and "stand-in" not in err["hint"].lower(), err["hint"]
    assert "STAND-IN" not in r.stderr


def test_under_github_actions_recipe_errors_are_annotated_on_their_lines(ws):
    ws.recipe("bad", 'description = "x"\n\n[toolchain]\nsetvars = ""\n\n[components.engine]\n'
                     'url = "file:///nowhere"\ncommit = 12\nsurprise = 1\n')
    r = ws.cli("plan", "--recipe", "bad", env={"GITHUB_ACTIONS": "true"})
    assert r.returncode == 2, str(r)
    assert re.search(r"^::error file=recipes/bad.toml,line=8,title=RecipeError::bad.toml: components.engine.commit: ",
                     r.stderr, re.M), r.stderr
    assert re.search(r"^::error file=recipes/bad.toml,line=9,title=RecipeError::bad.toml: components.engine.surprise: ",
                     r.stderr, re.M), r.stderr
    assert "::error" not in ws.cli("plan", "--recipe", "bad").stderr  # only under GitHub Actions


def test_under_github_actions_each_component_is_a_group(warm):
    root, cli, argv, lock = warm
    r = subprocess.run(argv("out-gha"), cwd=root, env={**cli.env, "GITHUB_ACTIONS": "true"}, capture_output=True,
                       text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr
    for c in lock["components"]:
        group = r.stderr.split(f"::group::{c['name']}: local-cache {c['wheel']['file']}\n", 1)[1]
        assert "::endgroup::" in group and "# exit 0 after" in group.split("::endgroup::")[0], r.stderr
