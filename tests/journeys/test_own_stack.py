"""A user's own recipe beside its patches/ (no recipes/ level), extending a team's stack recipe found through
$TOOLCHAIN_RECIPES_DIR, on the realstack fixture, with the tool installed from its wheel (issue 19).

The team's recipe names the oneAPI stand-in by a path relative to itself; the user adds a patch made with
`git format-patch` at the root of the suite repository (ARK builds from ext/ark) with `extend-patches`,
after the team's ARK patch (made inside ext/ark). The user updates a scratch recipe, plans, builds the
team's stack and their own, and bisects between their two locks, passing --recipes-dir to bisect too. The
plans of the team's B70 and B60 recipes show, at 80 columns, the AOT target that differs and every patch.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.spine_helpers import GitRepo, lock_and_record
from tests.support.realstack import ARK_PATCH, ENGINE_PATCH, STANDIN, stack_recipe

pytestmark = pytest.mark.slow

HELLO = "ext/ark/realstack_ark/hello.py"
NO_HELLO_TEST = """\
import os, sys, zipfile
wheels = [w for w in os.environ["TOOLCHAIN_BISECT_WHEELS"].split(os.pathsep) if "realstack_ark" in os.path.basename(w)]
assert len(wheels) == 1, wheels
sys.exit(1 if "realstack_ark/hello.py" in zipfile.ZipFile(wheels[0]).namelist() else 0)
"""


def test_own_recipe_beside_its_patches_extends_a_team_stack(make_user, realstack_built, tmp_path):
    s = realstack_built.stack
    team = tmp_path / "team"
    setvars = os.path.relpath(STANDIN / "setvars.sh", team / "recipes")  # relative to the team's recipe
    (team / "recipes").mkdir(parents=True)
    (team / "recipes" / "stack.toml").write_text(stack_recipe(s, setvars=setvars))
    shutil.copytree(s.base_patches, team / "patches")
    (team / "recipes" / "stack-b60.toml").write_text(
        'description = "the stack for the B60"\nextends = "stack"\n\n[components.ark.env]\n'
        'ARK_SYCL_TARGET = "intel_gpu_bmg_g21"\n')

    me = tmp_path / "me"
    clone = tmp_path / "suite-clone"
    subprocess.run(["git", "clone", "--quiet", s.suite.url, str(clone)], check=True, capture_output=True)
    repo = GitRepo(clone)
    repo.git("checkout", "--quiet", s.ark_commit)
    (me / "patches" / "ark").mkdir(parents=True)
    root_made = repo.make_patch({HELLO: "HELLO = 'from the root'\n"}, "ark: say hello")
    assert f"b/{HELLO}" in root_made
    (me / "patches" / "ark" / "0002-ark-hello.patch").write_text(root_made)
    (me / "my-stack.toml").write_text('description = "my stack"\nextends = "stack"\n\n[components.ark]\n'
                                      'extend-patches = ["ark/0002-ark-hello.patch"]\n')
    cli = make_user(me, tmp_path / "home", env={"TOOLCHAIN_RECIPES_DIR": str(team / "recipes")})
    cache = ("--cache-dir", realstack_built.cache)

    # 10: update on a child recipe: no empty table for a component that did not move; a moved commit gets
    # its own comment, not the old commit's
    scratch = me / "scratch.toml"
    scratch.write_text(f'extends = "stack"\n\n[components.kernels]\ncommit = "{s.kernels_commits[4]}"   # an older one\n')
    cli.ok("update", "--recipe", scratch, "--component", "engine", *cache)
    assert scratch.read_text().count("[components.") == 1, scratch.read_text()
    cli.ok("update", "--recipe", scratch, *cache)
    text = scratch.read_text()
    assert f'commit = "{s.kernels_commit}" # ci: build the kernels on every push (v0.1.1-1' in text, text
    assert "an older one" not in text
    assert "[components.engine]" not in text
    assert "[components.ark]" not in text

    # 5: the parent is found through $TOOLCHAIN_RECIPES_DIR, the user's patches beside the recipe;
    # 3 + 4: the team's ARK patch (made inside ext/ark) and the user's (made at the root), in that order
    plan = cli.ok("plan", "--recipe", "my-stack.toml", *cache, "--json").json()
    assert [(f["name"], f["where"]) for f in plan["recipe"]["found"]] == [
        ("my-stack.toml", "a path"), ("stack", "$TOOLCHAIN_RECIPES_DIR")]
    ark = next(c for c in plan["components"] if c["name"] == "ark")
    assert [(p["path"], p["applied-at"]) for p in ark["patches"]] == [(ARK_PATCH, "subdir"),
                                                                       ("ark/0002-ark-hello.patch", "root")]

    # the plan for both cards at 80 columns: what differs (the AOT target) and every patch are on the table
    for recipe, target in (("stack", "intel_gpu_bmg_g31"), ("stack-b60", "intel_gpu_bmg_g21")):
        shown = cli.ok("plan", "--recipe", recipe, *cache, env={"COLUMNS": "80"}).stdout
        table = shown[:shown.index("cache key")].splitlines()[:-1]
        assert all(len(line) <= 80 for line in table), shown
        assert f"ARK_SYCL_TARGET={target}" in "".join(table).replace(" ", ""), shown
        assert ARK_PATCH in shown and ENGINE_PATCH in shown, shown

    good, bad = tmp_path / "good", tmp_path / "bad"
    cli.ok("build", "--recipe", "stack", *cache, "--out", good)
    built = cli.ok("build", "--recipe", "my-stack.toml", *cache, "--out", bad, "--json").json()
    ark_wheel = next(Path(c["path"]) for c in built["components"] if c["name"] == "ark")
    assert "realstack_ark/hello.py" in zipfile.ZipFile(ark_wheel).namelist()  # at ext/ark, where the build looks
    lock = lock_and_record(bad)  # (where each key came from is this machine's path: the build record's part)
    assert lock["recipe"]["origins"]["toolchain.setvars"] == str(team / "recipes" / "stack.toml")
    assert next(c for c in lock["components"] if c["name"] == "engine")["patches"][0]["path"] == ENGINE_PATCH

    # 1 + 6: a lock-to-lock bisect between the user's two locks, from another directory, with --recipes-dir
    test = tmp_path / "no_hello.py"
    test.write_text(NO_HELLO_TEST)
    elsewhere = cli.at(tmp_path / "elsewhere")
    r = elsewhere("bisect", "--good-lock", good / "stack.lock.toml", "--bad-lock", bad / "stack.lock.toml",
                  "--recipes-dir", team / "recipes", "--test-cmd", f"{sys.executable} {test}", *cache,
                  "--out", tmp_path / "bisect", "--jobs", "1", "--json")
    assert r.returncode == 0, str(r)
    res = r.json()["result"]
    assert res["culprit"]["path"] == "components.ark.extend-patches", res  # the one difference, found
