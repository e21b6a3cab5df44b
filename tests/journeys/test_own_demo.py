"""A user's own recipe folder on top of the SHIPPED demo, with the tool installed from its wheel (issue 19).

~/mine holds recipes/my-demo.toml (`extends = "demo"`: the shipped recipe, although ~/mine has a recipes/
folder of its own) and patches/: an engine patch added with `extend-patches` (the demo's own engine patch is
kept) and an ARK patch made with `git format-patch` at the root of the suite repository (ARK builds from its
extension/ark subdirectory). The user builds only the engine first (a partial build), which also brings the
demo's repositories into the cache, clones the suite from there to make the patch, plans, builds, rebuilds
warm, replays the lock from another directory, bundles, and follows the bundle's INSTALL.txt in the bundle's
own directory.
"""

from __future__ import annotations

import shlex
import subprocess
import zipfile
from pathlib import Path

import pytest

from tests.spine_helpers import GitRepo, shipped_demo_commit
from tests.support.realstack import read_toml, sha256_file

pytestmark = pytest.mark.slow

ENGINE_COMMIT = shipped_demo_commit("engine")  # as the shipped demo.toml pins them
ARK_COMMIT = shipped_demo_commit("ark")
MY_DEMO = '''\
description = "my demo: the shipped demo with my own patches"
extends = "demo"

[components.engine]
extend-patches = ["engine/0001-user-note.patch"]   # after the demo's own engine patch

[components.ark]
extend-patches = ["ark/0001-ark-hello.patch"]      # made at the root of the suite repository
'''


def _patch_from_clone(bare: Path, commit: str, files: dict[str, str], dest: Path) -> str:
    """What a user does: clone, change, commit, `git format-patch -1` at the repository root."""
    clone = dest.parent / f"clone-{bare.stem}"
    subprocess.run(["git", "clone", "--quiet", str(bare), str(clone)], check=True, capture_output=True)
    repo = GitRepo(clone)
    repo.git("checkout", "--quiet", commit)
    text = repo.make_patch(files, f"{bare.stem}: the user's change")
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(text)
    return text


def _snapshot(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): (sha256_file(p) if p.is_file() else "dir") for p in sorted(root.rglob("*"))}


def test_own_recipe_folder_on_the_shipped_demo_from_a_wheel_install(user, tmp_path):
    home = tmp_path / "home"
    mine = home / "mine"
    (mine / "recipes").mkdir(parents=True)
    (mine / "recipes" / "my-demo.toml").write_text(MY_DEMO)
    me = user.at(mine)

    # 7 + 5: the wheel install has the shipped recipes; ~/mine/recipes does not hide them
    listed = {x["name"]: x["found-in"] for x in me.ok("recipes", "--json").json()["recipes"]}
    assert listed["demo"] == "the shipped recipes" and listed["my-demo"] == "./recipes", listed

    # 8: a partial build of the shipped demo: only the engine, and the lock says so
    part = me.ok("build", "--recipe", "demo", "--component", "engine", "--out", home / "engine-only", "--json").json()
    assert [c["name"] for c in part["components"]] == ["engine"]
    assert part["partial"] == ["engine"]
    lock = read_toml(home / "engine-only" / "stack.lock.toml")
    assert lock["recipe"]["partial"] == ["engine"]
    assert [c["name"] for c in lock["components"]] == ["engine"]
    assert "[components.kernels]" not in lock["recipe"]["text"]

    # the user's patches, made in clones of the demo's repositories (now in the cache)
    (repos,) = (home / "cache" / "demo-repos").glob("*/")
    suite = repos / "suite.git"
    init = subprocess.run(["git", "--git-dir", str(suite), "show", f"{ARK_COMMIT}:extension/ark/demo_ark/__init__.py"],
                          check=True, capture_output=True, text=True).stdout
    ark_patch = _patch_from_clone(suite, ARK_COMMIT, {"extension/ark/demo_ark/__init__.py": init + "\nHELLO = 'ark'\n"},
                                  mine / "patches" / "ark" / "0001-ark-hello.patch")
    assert "a/extension/ark/demo_ark/__init__.py" in ark_patch  # made at the repository root
    _patch_from_clone(repos / "engine.git", ENGINE_COMMIT, {"demo_engine/user_note.py": "NOTE = 'mine'\n"},
                      mine / "patches" / "engine" / "0001-user-note.patch")

    # 5: plan says where each recipe was found; 3: the root-made patch applies at the root
    plan = me.ok("plan", "--recipe", "recipes/my-demo.toml", "--json").json()
    assert [(f["name"], f["where"]) for f in plan["recipe"]["found"]] == [
        ("recipes/my-demo.toml", "a path"), ("demo", "the shipped recipes")]
    comps = {c["name"]: c for c in plan["components"]}
    assert [p["path"] for p in comps["engine"]["patches"]] == ["demo/0001-engine-reject-empty-prompt.patch",
                                                               "engine/0001-user-note.patch"]  # 4
    assert comps["ark"]["patches"] == [{"path": "ark/0001-ark-hello.patch", "applied-at": "root",
                                        "found-in": str(mine / "patches"),
                                        "sha256": sha256_file(mine / "patches" / "ark" / "0001-ark-hello.patch")}]

    # build, then a warm rebuild: everything from the cache
    built = me.ok("build", "--recipe", "my-demo", "--json").json()
    lock_path = mine / "dist" / "my-demo" / "stack.lock.toml"
    lock = read_toml(lock_path)
    ark = next(c for c in lock["components"] if c["name"] == "ark")
    assert ark["patches"][0]["applied-at"] == "root"  # 3: recorded in the lock
    wheels = {c["name"]: Path(c["path"]) for c in built["components"]}
    with zipfile.ZipFile(wheels["ark"]) as z:
        assert "HELLO = 'ark'" in z.read("demo_ark/__init__.py").decode()
    with zipfile.ZipFile(wheels["engine"]) as z:
        assert "demo_engine/user_note.py" in z.namelist()
    warm = me.ok("build", "--recipe", "my-demo", "--json").json()
    assert {c["source"] for c in warm["components"]} == {"local-cache"}

    # 1: the lock replayed from another directory (the inherited relative setvars is the shipped demo's)
    elsewhere = user.at(home / "elsewhere")
    replay = elsewhere.ok("build", "--from-lock", lock_path, "--out", home / "replayed", "--json").json()
    assert [(c["name"], c["sha256"]) for c in replay["components"]] == [
        (c["name"], c["sha256"]) for c in built["components"]]

    # 2: a bundle, and its INSTALL.txt followed to the letter in the bundle's own directory
    bundle = Path(me.ok("build", "--recipe", "my-demo", "--bundle", "--json").json()["bundle"])
    before = _snapshot(bundle)
    in_bundle = user.at(bundle)
    install = (bundle / "INSTALL.txt").read_text()
    assert "sha256sum -c SHA256SUMS" in install
    subprocess.run(["sha256sum", "--quiet", "-c", "SHA256SUMS"], cwd=bundle, check=True, capture_output=True)
    (line,) = [ln for ln in install.splitlines() if "toolchain verify-repro" in ln]
    argv = shlex.split(line[line.index("toolchain verify-repro"):])
    r = in_bundle.ok(*argv[1:], env={"COLUMNS": "400"})
    assert _snapshot(bundle) == before  # nothing written inside the bundle
    assert "reproducible: 3 wheel(s) identical" in r.stdout, str(r)
    # 10: a passing verify-repro names no folder it has deleted
    named = [w.strip("().,:") for w in r.stdout.split() if w.strip("().,:").startswith("/")]
    assert named and all(Path(w).exists() for w in named), (named, str(r))
