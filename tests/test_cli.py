"""The command line: `python -m toolchain` as a real process. Exit codes (0 ok, 1 a build failed, 2 bad input),
`--json` on every command (one JSON document on stdout, nothing else), errors without tracebacks."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import tomlkit

from tests.spine_helpers import REPO_ROOT, Cli, component, isolated_env, recipe_data
from toolchain import __version__
from toolchain.recipe.load import load_recipe


@pytest.fixture
def cli(tmp_path) -> Cli:
    return Cli(tmp_path, isolated_env(tmp_path))


def subcommands(cli: Cli) -> list[str]:
    r = cli.ok("--help")
    block = r.stdout.split("positional arguments:")[1].split("options:")[0]
    return re.findall(r"^    (\S+)", block, re.M)


def test_version_and_help(cli):
    assert cli.ok("--version").stdout.strip() == f"toolchain {__version__}"
    names = subcommands(cli)
    assert {"build", "plan", "update", "recipes"} <= set(names), names


def test_no_command_is_a_usage_error(cli):
    r = cli()
    assert r.returncode == 2
    assert "usage: toolchain" in r.stderr


@pytest.mark.parametrize(("args", "message"), [
    (["bogus"], "invalid choice: 'bogus'"),
    (["build", "--no-such-flag"], "unrecognized arguments: --no-such-flag"),
    (["build", "--from-lock", "x.toml", "--recipe", "demo"], "--from-lock and --recipe exclude each other"),
    (["build", "--mirror", "no-equals-sign"], "--mirror 'no-equals-sign': expected FROM=TO"),
    (["build", "--from-lock", "does-not-exist.toml"], "does-not-exist.toml: no such lock file"),
])
def test_usage_errors_exit_2_with_one_error_line_and_json(cli, args, message):
    r = cli(*args)
    assert r.returncode == 2, str(r)
    assert r.stderr.startswith("ERROR: ")
    assert message in r.stderr
    assert "TIP: " in r.stderr
    assert "Traceback" not in r.output
    assert r.stdout == ""
    r = cli(*args, "--json")
    assert r.returncode == 2
    data = r.json()
    assert data["ok"] is False
    assert data["exit_code"] == 2
    assert message in data["error"]
    assert data["hint"]


def test_every_command_takes_json(cli):
    for name in subcommands(cli):
        r = cli.ok(name, "--help")
        assert "--json" in r.stdout, name


def test_recipes_lists_names_with_descriptions(cli):
    r = cli.ok("recipes", "--json")
    listed = {x["name"]: x["description"] for x in r.json()["recipes"]}
    shipped = sorted(p.stem for p in (REPO_ROOT / "recipes").glob("*.toml"))
    assert sorted(listed) == shipped
    assert {"demo", "ark-latest", "w4a16-workaround"} <= set(listed)
    for name in shipped:
        raw = tomlkit.parse((REPO_ROOT / "recipes" / f"{name}.toml").read_text())
        assert listed[name] == raw.get("description", "")
    assert listed["demo"] == load_recipe("demo").description
    human = cli.ok("recipes")
    assert "demo" in human.stdout
    assert "Offline demo" in human.stdout


def test_recipes_from_another_directory_including_a_broken_one(ws):
    ws.recipe("alpha", 'description = "the first"\n')
    ws.recipe("broken", 'description = "unterminated\n')
    r = ws.cli("recipes", "--recipes-dir", ws.recipes, "--json")
    assert r.returncode == 0, str(r)
    mine = [x for x in r.json()["recipes"] if x["found-in"] == "--recipes-dir"]
    assert mine == [{"name": "alpha", "description": "the first", "found-in": "--recipes-dir"},
                    {"name": "broken", "description": "(not valid TOML)", "found-in": "--recipes-dir"}]
    # the shipped recipes follow the user's (issue 19: a folder of one's own does not hide them)
    assert {x["name"] for x in r.json()["recipes"]} - {"alpha", "broken"} >= {"demo", "ark-latest"}
    r = ws.cli("recipes", "--json", env={"TOOLCHAIN_RECIPES_DIR": str(ws.recipes)})
    assert [x["name"] for x in r.json()["recipes"] if x["found-in"] == "$TOOLCHAIN_RECIPES_DIR"] == ["alpha", "broken"]


def test_recipes_lists_the_users_first_then_the_shipped_ones(ws):
    """As the README says (issue 40): a user's recipe named after every shipped one still comes first."""
    ws.recipe("zz-mine", 'description = "mine"\n')
    rows = ws.cli("recipes", "--recipes-dir", ws.recipes, "--json").json()["recipes"]
    where = [x["found-in"] for x in rows]
    assert where[0] == "--recipes-dir" and rows[0]["name"] == "zz-mine" and len(set(where)) == 2
    assert where == sorted(where, key=lambda w: w != "--recipes-dir")  # no user's recipe after a shipped one
    human = ws.cli("recipes", "--recipes-dir", ws.recipes).stdout
    assert human.index("zz-mine") < human.index("ark-latest")


def test_cache_commands_offer_no_patches_dir(cli):
    """`cache ls` and `cache prune` read a recipe's [cache] only: --patches-dir would do nothing (issue 40)."""
    for action in ("ls", "prune"):
        r = cli.ok("cache", action, "--help")
        assert "--recipes-dir" in r.stdout and "--patches-dir" not in r.stdout, action


def test_plan_json_is_the_exact_resolved_plan_and_matches_the_build(demo_build, cli, tmp_path):
    r = cli("plan", "--recipe", "demo", "--json")  # in an empty directory, with the cache dir set inside it
    assert r.returncode == 0, str(r)
    plan = r.json()
    lock = demo_build.lock()
    assert plan["recipe"]["sha256"] == lock["recipe"]["sha256"]
    assert plan["toolchain"]["oneapi-version"] == "2025.2.0"
    assert plan["toolchain"]["env"]["CMPLR_ROOT"]
    for p, c in zip(plan["components"], lock["components"], strict=False):
        assert (p["name"], p["commit"], p["cache-key"], [{k: v for k, v in x.items() if k != "found-in"}
                                                          for x in p["patches"]]) == (
            c["name"], c["commit"], c["cache-key"], c["patches"])  # plan keys are the keys the build used
        assert all(Path(x["found-in"], x["path"]).is_file() for x in p["patches"])  # the folder each was found in
        assert p["command"] == c["command"]
        assert p["env"] == c["env"]
    assert plan["components"][1]["fetchcontent"][0]["name"] == "demoheaders"
    assert list(tmp_path.iterdir()) == []  # builds, fetches and writes nothing


def test_plan_human_output_is_a_table(demo_build):
    r = demo_build.cli("plan", "--recipe", "demo")
    assert r.returncode == 0, str(r)
    assert "plan for demo" in r.stdout
    assert "oneAPI 2025.2.0" in r.stdout
    for name in ("engine", "kernels", "ark"):
        assert name in r.stdout


def test_build_defaults_out_to_dist_and_cache_to_the_environment(ws, tiny_repo):
    ws.recipe("r", recipe_data({"tiny": component(tiny_repo)}))
    r = ws.cli("build", "--recipe", "r")  # human output; cache from TOOLCHAIN_CACHE_DIR
    assert r.returncode == 0, str(r)
    assert (ws.root / "dist" / "r" / "stack.lock.toml").is_file()
    assert list((ws.cache / "wheels").rglob("entry.json"))
    assert "lock:" in r.stdout
    assert "tiny" in r.stdout
    assert "==> building recipe r" in r.stderr
    assert "==> fetching " in r.stderr


def test_build_json_prints_one_document_and_nothing_else(ws, tiny_repo):
    ws.recipe("r", recipe_data({"tiny": component(tiny_repo)}))
    r = ws.build("r")
    assert r.returncode == 0, str(r)
    data = json.loads(r.stdout)  # the whole of stdout
    assert data["ok"] is True
    assert data["recipe"] == "r"
    assert r.stderr == ""
    (c,) = data["components"]
    assert c["name"] == "tiny"
    assert c["wheel"].startswith("tiny-1.0.0-")
    assert len(c["sha256"]) == 64
    assert data["lock"] == str(ws.root / "out" / "stack.lock.toml")
    assert data["pylock"] == str(ws.root / "out" / "pylock.toml")


def test_a_failed_build_exits_1_with_one_json_document(ws, make_repo):
    repo = make_repo("fails", "fails")
    ws.recipe("r", recipe_data({"fails": component(repo)}))
    r = ws.build("r")
    assert r.returncode == 1, str(r)
    data = json.loads(r.stdout)
    assert data["ok"] is False
    assert data["exit_code"] == 1
    assert data["kind"] == "BuildError"
    assert r.stderr.startswith("ERROR: building fails@")  # the build's own traceback is in the tail; ours is not
    assert "toolchain/cli.py" not in r.output
    assert "toolchain/build.py" not in r.output


def test_update_json(ws, make_repo):
    repo = make_repo("tiny", "tiny")
    ws.recipe("r", recipe_data({"tiny": component(repo)}))
    r = ws.cli("update", "--recipe", "r", "--json")
    assert r.returncode == 0, str(r)
    assert r.json() == {"ok": True, "recipe": str(ws.recipes / "r.toml"), "changes": [
        {"component": "tiny", "ref": "main", "old": repo.head(), "new": repo.head(), "changed": False}]}
    human = ws.cli("update", "--recipe", "r")
    assert human.returncode == 0
    assert "already at the head" in human.stdout


def test_error_messages_keep_square_brackets(ws):
    ws.recipe("r", 'description = "no components"\n')
    r = ws.cli("plan", "--recipe", "r")
    assert r.returncode == 2
    assert "at least one [components.NAME] table" in r.stderr  # not swallowed as console markup


def test_the_console_script_is_the_same_entry_point():
    from importlib.metadata import entry_points

    eps = entry_points()
    scripts = eps.select(group="console_scripts") if hasattr(eps, "select") else eps["console_scripts"]  # 3.9
    assert [e.value for e in scripts if e.name == "toolchain"] == ["toolchain.__main__:run"]  # (as python -m)


def test_plan_without_oneapi_and_with_the_mirror_as_it_is(ws, make_repo, tmp_path):
    """Issue 9.3: plan builds nothing, so it shows the whole plan on a machine without oneAPI (toolchain
    "not captured: <why>"), each commit as the local mirror has it, and never clones a mirror."""
    from toolchain.sources.mirrors import Mirrors

    repo = make_repo("tiny", "tiny")
    head = repo.commit("after the tag", {"NEWS": "1\n"})
    other = make_repo("other", "tiny")
    missing = tmp_path / "opt" / "intel" / "oneapi" / "setvars.sh"
    ws.recipe("r", recipe_data({"tiny": component(repo, head), "other": component(other)}, setvars=str(missing)))
    Mirrors(ws.cache).ensure(repo.url, head)  # as a build leaves it; `other` was never fetched
    before = sorted(p.name for p in (ws.cache / "git").iterdir())
    r = ws.cli("plan", "--recipe", "r", "--cache-dir", ws.cache, "--json")
    assert r.returncode == 0, str(r)
    data = r.json()
    assert data["toolchain"]["status"].startswith(f"not captured: r.toml: toolchain.setvars: {missing} does not exist")
    tiny, oth = data["components"]
    epoch = repo.git("show", "-s", "--format=%ct", head).strip()
    assert (tiny["describe"], tiny["source-date-epoch"], tiny["build-env"]["SOURCE_DATE_EPOCH"]) == \
        (f"v1.0.0-1-g{head[:12]}", epoch, epoch)
    assert tiny["date"] == repo.git("show", "-s", "--format=%cI", head).strip()
    assert tiny["cache-key"] == ""
    assert oth["describe"] == ""
    assert oth["mirror"].startswith("not fetched yet: no mirror of " + other.url)
    assert "committer date" in oth["build-env"]["SOURCE_DATE_EPOCH"]
    assert "<" not in r.stdout
    assert sorted(p.name for p in (ws.cache / "git").iterdir()) == before  # nothing cloned
    human = ws.cli("plan", "--recipe", "r", "--cache-dir", ws.cache)
    assert human.returncode == 0, str(human)
    assert "not captured: " in human.stdout
    assert f"v1.0.0-1-g{head[:12]}" in human.stdout
    # a commit the existing mirror still lacks after fetching it is bad input
    ghost = "deadbeef" * 5
    ws.recipe("ghost", recipe_data({"tiny": component(repo, ghost)}))
    r = ws.cli("plan", "--recipe", "ghost", "--cache-dir", ws.cache, "--json")
    assert r.returncode == 2, str(r)
    assert f"ghost.toml: components.tiny.commit: commit {ghost} is not in {repo.url}" in r.json()["error"]
