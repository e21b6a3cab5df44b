"""The command line's contract, driven as a user types it (`python -m toolchain ...` as a real process):
shared options declared once, global options before or after the command, `--json` owning stdout,
suggestions for typos, an out dir that is the tool's own, clean errors for paths that cannot be used
(files, read-only mounts, a full disk), documented signal exits and error text printed literally.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.spine_helpers import assert_interrupted, component, interrupt, kill_group, recipe_data, wait_for_text

ROOT = os.geteuid() == 0


def one_error_line(r) -> str:
    """The ERROR line of a failed run: exactly one, no traceback."""
    assert "Traceback" not in r.output, str(r)
    errors = [line for line in r.stderr.splitlines() if line.startswith("ERROR: ")]
    assert len(errors) == 1, str(r)
    return errors[0]


# ---- one definition per shared option (issue 10) ------------------------------------------------------------

COMMANDS_WITH_CACHE_DIR = [
    ["build", "--recipe", "r"],
    ["plan", "--recipe", "r"],
    ["update", "--recipe", "r"],
    ["verify-repro", "--recipe", "r"],
    ["bisect", "--recipe", "r", "--component", "tiny", "--good", "HEAD~1", "--test-cmd", "true"],
]


@pytest.mark.parametrize("argv", COMMANDS_WITH_CACHE_DIR, ids=lambda a: a[0])
def test_every_command_treats_a_cache_dir_that_is_a_file_the_same_way(ws, tiny_repo, argv):
    ws.recipe("r", recipe_data({"tiny": component(tiny_repo)}))
    file = ws.root / "not-a-dir"
    file.write_text("a file\n")
    before = ws.snapshot()
    r = ws.cli(*argv, "--cache-dir", file, "--out", ws.root / "out")
    assert r.returncode == 2, str(r)
    line = one_error_line(r)
    assert f"--cache-dir {file}" in line and "is a file, not a directory" in line, line
    assert ws.snapshot() == before


def test_shared_options_have_one_help_text_across_commands(cli_anywhere):
    shared = {"--mirror FROM=TO": "rewrite repository URLs starting with FROM to start with TO (repeatable)",
              "--cache-dir DIR": "mirrors, source trees and wheels (default: $TOOLCHAIN_CACHE_DIR or "
                                 "~/.cache/xpu-toolchain)"}
    for name in ("build", "plan", "update", "bisect", "verify-repro"):
        text = " ".join(cli_anywhere.ok(name, "--help").stdout.split())
        assert f"--mirror FROM=TO {shared['--mirror FROM=TO']}" in text, (name, text)
        if name != "verify-repro":  # its cache only lends the mirror: said so in its own words
            assert f"--cache-dir DIR {shared['--cache-dir DIR']}" in text, (name, text)


def test_a_commands_help_names_only_options_it_takes():
    """Every `--option` a command's help names (its description and each option's text) is one that command (or
    one of its subcommands) takes: another command's option is named with it, in backticks (`build --from-lock`),
    so that no help sends a reader to an option the command refuses (verify-repro's --patches-dir named
    `--from-lock`, image's and smoke's --cache-dir promised mirrors and source trees they do not hold)."""
    import re

    from toolchain.cli import build_parser

    def subparsers(p: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
        return next((dict(a.choices) for a in p._actions if isinstance(a, argparse._SubParsersAction)), {})

    def flags(p: argparse.ArgumentParser) -> set[str]:
        return {s for a in p._actions for s in a.option_strings} | {s for q in subparsers(p).values() for s in flags(q)}

    top = build_parser()
    wrong = []
    for name, parser in subparsers(top).items():
        takes = flags(parser) | {s for a in top._actions for s in a.option_strings}
        for where, text in [("description", parser.description or ""), *((a.option_strings[0], a.help or "")
                                                                          for a in parser._actions if a.option_strings)]:
            bare = re.sub(r'`[^`]*`|"[^"]*"', "", text)  # (another command's line, or an example, quoted)
            wrong += [f"{name} {where}: {flag}" for flag in re.findall(r"(?<![\w-])--[a-z][a-z-]*", bare)
                      if flag not in takes]
    assert not wrong, wrong
    for name, holds in (("image", "the base's layout and the image's layer"), ("smoke", "native audits")):
        cache = next(a.help or "" for a in subparsers(top)[name]._actions if "--cache-dir" in a.option_strings)
        assert holds in cache and "source trees" not in cache, (name, cache)


@pytest.fixture
def cli_anywhere(tmp_path):
    from tests.spine_helpers import Cli, isolated_env

    return Cli(tmp_path, isolated_env(tmp_path))


# ---- global options before or after the command; --json owns stdout -------------------------------------

def test_json_and_verbose_before_the_command_with_a_failing_command(cli_anywhere):
    for argv in (["--json", "plan", "--recipe", "no-such-recipe"], ["plan", "--recipe", "no-such-recipe", "--json"],
                 ["--json", "-v", "plan", "--recipe", "no-such-recipe"]):
        r = cli_anywhere(*argv)
        assert r.returncode == 2, str(r)
        data = r.json()
        assert data["ok"] is False and "no-such-recipe" in data["error"], data


def test_json_with_verbose_keeps_stdout_for_the_document(ws, tiny_repo):
    ws.recipe("r", recipe_data({"tiny": component(tiny_repo)}))
    r = ws.cli("--json", "-v", "build", "--recipe", "r", "--cache-dir", ws.cache, "--out", ws.root / "out")
    assert r.returncode == 0, str(r)
    assert json.loads(r.stdout)["ok"] is True  # the whole of stdout is one document
    # -v before the command streamed the build, to stderr (the backend called as pip calls it: build/frontend.py)
    assert "the backend built tiny-1.0.0-py3-none-any.whl" in r.stderr


def test_no_command_with_json_is_one_json_error(cli_anywhere):
    r = cli_anywhere("--json")
    assert r.returncode == 2 and r.json()["kind"] == "UsageError", str(r)


# ---- usage: suggestions that point at the command's help ---------------------------------------------------

def test_a_mistyped_flag_suggests_the_flag_and_points_at_the_command_help(cli_anywhere):
    r = cli_anywhere("build", "--recipie", "demo")
    assert r.returncode == 2
    line = one_error_line(r)
    assert "--recipie" in line and "did you mean --recipe?" in line, line
    assert "TIP: see `toolchain build --help`" in r.stderr, str(r)
    data = cli_anywhere("build", "--recipie", "demo", "--json").json()
    assert "did you mean --recipe?" in data["error"]
    assert data["hint"] == "see `toolchain build --help`"


def test_a_mistyped_command_is_suggested(cli_anywhere):
    r = cli_anywhere("biuld", "--recipe", "demo")
    assert r.returncode == 2 and "did you mean build?" in one_error_line(r), str(r)


def test_help_offers_only_what_applies_and_documents_exit_codes(cli_anywhere):
    top = cli_anywhere.ok("--help").stdout
    assert "exit codes:" in top
    assert "130" in top
    assert "SIGINT" in top
    assert "SIGTERM" in top
    recipes = cli_anywhere.ok("recipes", "--help").stdout
    assert "--recipes-dir" in recipes
    assert "--cache-dir" not in recipes
    assert "--out" not in recipes


# ---- the output directory is the tool's own (issue 14.6) ---------------------------------------------------

def test_out_that_is_a_foreign_non_empty_directory_is_refused_and_untouched(ws, tiny_repo):
    ws.recipe("r", recipe_data({"tiny": component(tiny_repo)}))
    project = ws.root / "project"
    (project / "src").mkdir(parents=True)
    (project / "README").write_text("mine\n")
    before = ws.snapshot()
    r = ws.build("r", "project")
    assert r.returncode == 2, str(r)
    data = r.json()
    assert "not empty and was not written by toolchain" in data["error"] and "README" in data["error"], data
    assert ws.snapshot() == before  # nothing written, in the project or anywhere else


def test_out_slash_is_refused(ws, tiny_repo):
    ws.recipe("r", recipe_data({"tiny": component(tiny_repo)}))
    made = [Path("/", n) for n in ("logs", "wheels", "stack.lock.toml", "pylock.toml", ".toolchain-out")]
    assert not any(p.exists() for p in made)
    r = ws.cli("build", "--recipe", "r", "--cache-dir", ws.cache, "--out", "/")
    try:
        assert r.returncode == 2, str(r)
        assert "not empty and was not written by toolchain" in one_error_line(r)
        assert not any(p.exists() for p in made)
    finally:
        for p in made:
            if p.is_dir():
                import shutil
                shutil.rmtree(p)
            elif p.exists():
                p.unlink()


def test_a_file_the_tool_did_not_write_in_wheels_survives_a_rebuild(ws, make_repo):
    repo = make_repo("tiny", "tiny")
    first = repo.head()
    ws.recipe("r", recipe_data({"tiny": component(repo, first)}))
    assert ws.build("r").returncode == 0
    (old_wheel,) = (ws.root / "out" / "wheels").glob("tiny-*.whl")
    theirs = ws.root / "out" / "wheels" / "torch-2.9.0-cp311-cp311-linux_x86_64.whl"
    theirs.write_bytes(b"the user's own wheel")
    repo.commit("tiny 1.1.0", {"pyproject.toml": repo.read("pyproject.toml").replace('"1.0.0"', '"1.1.0"')})
    ws.recipe("r", recipe_data({"tiny": component(repo, repo.head())}))
    r = ws.build("r")
    assert r.returncode == 0, str(r)
    (new_wheel,) = [p for p in (ws.root / "out" / "wheels").glob("tiny-*.whl")]
    assert new_wheel.name != old_wheel.name
    assert not old_wheel.exists()
    assert theirs.read_bytes() == b"the user's own wheel"  # the user's: kept


def test_an_earlier_output_without_the_marker_is_still_the_tool_s(ws, tiny_repo):
    ws.recipe("r", recipe_data({"tiny": component(tiny_repo)}))
    assert ws.build("r").returncode == 0
    (ws.root / "out" / ".toolchain-out").unlink()  # as written by a version before the marker
    r = ws.build("r")
    assert r.returncode == 0, str(r)
    assert (ws.root / "out" / ".toolchain-out").is_file()


# ---- paths that cannot be used: a file, a read-only mount, a full disk (issue 14.9) ------------------------

def test_out_that_is_a_file_is_bad_input(ws, tiny_repo):
    ws.recipe("r", recipe_data({"tiny": component(tiny_repo)}))
    (ws.root / "out").write_text("a file\n")
    r = ws.build("r")
    assert r.returncode == 2 and "is a file, not a directory" in r.json()["error"], str(r)
    assert "Traceback" not in r.output


@pytest.fixture
def mount_point() -> Iterator[Callable[..., Path]]:
    """mount(kind, path, size): a tmpfs ("tmpfs") or a read-only bind mount of `path` onto itself ("ro");
    unmounted after the test."""
    if not ROOT:
        pytest.skip("mounting needs root")
    mounted: list[Path] = []

    def mount(kind: str, path: Path, size: str = "64k") -> Path:
        path.mkdir(parents=True, exist_ok=True)
        source = ["-t", "tmpfs", "-o", f"size={size}", "tmpfs"] if kind == "tmpfs" else ["--bind", str(path)]
        subprocess.run(["mount", *source, str(path)], check=True)
        mounted.append(path)
        if kind == "ro":
            subprocess.run(["mount", "-o", "remount,ro,bind", str(path)], check=True)
        return path

    yield mount
    for path in reversed(mounted):
        subprocess.run(["umount", "-l", str(path)], check=False)


@pytest.mark.parametrize("which", ["--out", "--cache-dir"])
def test_a_read_only_out_or_cache_is_a_clean_error(ws, tiny_repo, mount_point, which):
    ws.recipe("r", recipe_data({"tiny": component(tiny_repo)}))
    ro = mount_point("ro", ws.root / "ro")
    out = ro / "out" if which == "--out" else ws.root / "out"
    cache = ro / "cache" if which == "--cache-dir" else ws.cache
    r = ws.cli("build", "--recipe", "r", "--out", out, "--cache-dir", cache)
    assert r.returncode == 2, str(r)
    assert "read-only file system" in one_error_line(r)


def test_a_full_disk_for_the_out_dir_is_exit_1_with_one_line(ws, tiny_repo, mount_point):
    ws.recipe("r", recipe_data({"tiny": component(tiny_repo)}))
    full = mount_point("tmpfs", ws.root / "full", size="64k")
    fd = os.open(full / "filler", os.O_WRONLY | os.O_CREAT)
    try:  # fill it up
        while os.write(fd, b"\0" * 4096):
            pass
    except OSError:
        pass
    finally:
        os.close(fd)
    for argv in (["--json"], []):
        r = ws.cli("build", "--recipe", "r", "--out", full / "out", "--cache-dir", ws.cache, *argv)
        assert r.returncode == 1, str(r)
        assert "No space left on device" in one_error_line(r)
        if argv:
            assert r.json()["exit_code"] == 1
    (full / "filler").unlink()  # with space again, the same out dir builds
    assert ws.build("r", "full/out").returncode == 0


# ---- signals (issue 14.11) and literal error text (14.12) --------------------------------------------------

@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129)],
                         ids=["SIGINT", "SIGTERM", "SIGHUP"])
def test_a_signal_during_a_build_stops_it_with_the_documented_exit(ws, tiny_repo, tmp_path, sig, code):
    ws.recipe("r", recipe_data({"tiny": component(tiny_repo)}))
    counter = tmp_path / "builds"
    proc = ws.cli.start("build", "--recipe", "r", "--out", ws.root / "out", "--cache-dir", ws.cache, "--json",
                        env={"TINY_BUILD_COUNTER": str(counter), "TINY_BUILD_SLEEP": "120"})
    try:
        wait_for_text(counter, proc=proc)  # the build has started
    except BaseException:
        kill_group(proc)
        raise
    assert_interrupted(interrupt(proc, sig), sig, code)  # and nothing of its process group keeps running
    assert ws.build("r").returncode == 0  # and the next run succeeds


def test_error_text_is_printed_literally(cli_anywhere):
    r = cli_anywhere("plan", "--recipe", "sys:x:3:3:[bold]sys")
    assert r.returncode == 2, str(r)
    line = one_error_line(r)
    assert "sys:x:3:3:[bold]sys" in line and "❌" not in r.stderr, line


def test_every_command_taking_recipe_finds_recipes_the_same_way():
    """Issue 19: the options that find recipes are declared once (options.FIND_RECIPES) and every command
    taking --recipe, bisect included, takes them with the same help."""
    from toolchain.cli import build_parser
    from toolchain.commands.options import SHARED

    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    takers = {}
    for sub in commands.values():
        subs = [sub] + [p for a in sub._actions if isinstance(a, argparse._SubParsersAction) for p in a.choices.values()]
        for p in subs:
            flags = {s: a.help for a in p._actions for s in a.option_strings}
            if "--recipe" in flags:
                takers[p.prog] = flags
    assert {"toolchain bisect", "toolchain build", "toolchain plan", "toolchain update", "toolchain verify-repro",
            "toolchain cache ls"} <= set(takers), sorted(takers)
    for prog, flags in takers.items():
        if prog.startswith("toolchain cache "):  # reads a recipe's [cache] only: no patch, no --patches-dir (issue 40)
            assert "--patches-dir" not in flags and flags.get("--recipes-dir") == SHARED["recipes-dir"].help, prog
            continue
        for flag in ("--recipes-dir", "--patches-dir"):
            assert flags.get(flag) == SHARED[flag.lstrip("-")].help, (prog, flag)
