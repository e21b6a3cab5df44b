"""Sources: the mirror cache, URL rewrites, pinned commits, prepared trees, patch series, `toolchain update`.

All through real git repositories (tests/conftest.py GitRepo) and the real CLI.
"""

from __future__ import annotations

import contextlib
import functools
import json
import shutil
import subprocess
import threading
import time
import zipfile
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.spine_helpers import TINY_INIT, component, recipe_data, wheel_member
from toolchain.errors import UsageError
from toolchain.sources.mirrors import Mirrors, Rewrite, parse_rewrites, rewrite_url

FAKE_BASE = "https://git.example.invalid/team/"


def mirror_git(cache: Path, url: str, *args: str) -> str:
    return subprocess.run(["git", "--git-dir", str(Mirrors(cache).path(url)), *args], capture_output=True,
                          text=True, check=True, timeout=60).stdout.strip()


# ---- mirrors and URL rewrites ------------------------------------------------------------------------

def test_mirror_flag_rewrites_urls_and_the_cache_is_keyed_by_the_original_url(ws, make_repo, tmp_path):
    repo = make_repo("tiny", "tiny")
    url = FAKE_BASE + "tiny"  # not reachable: only the rewrite makes it buildable
    ws.recipe("r", recipe_data({"tiny": component(repo, url=url)}))
    r = ws.build("r", "out1", "--mirror", f"{FAKE_BASE}={repo.path.parent}/")
    assert r.returncode == 0, str(r)
    mirror = Mirrors(ws.cache).path(url)
    assert mirror.is_dir()
    assert mirror.parent == ws.cache / "git"
    assert [p.name for p in (ws.cache / "git").glob("*.git")] == [mirror.name]  # one, named by the recipe URL
    assert mirror_git(ws.cache, url, "config", "remote.origin.url") == repo.url  # fetched through the rewrite
    assert ws.lock("out1")["components"][0]["url"] == url  # the lock records the recipe's URL

    # The source moves: a different rewrite, and the mirror (keyed by the recipe URL) is still used,
    # with no fetch (the new target does not even exist), giving the same cache key and wheel.
    shutil.move(str(repo.path), str(tmp_path / "moved"))
    r2 = ws.build("r", "out2", "--no-cache", "--mirror", f"{FAKE_BASE}={tmp_path}/nowhere/")
    assert r2.returncode == 0, str(r2)
    one, two = ws.lock("out1")["components"][0], ws.lock("out2")["components"][0]
    assert one["cache-key"] == two["cache-key"]
    assert one["wheel"] == two["wheel"]


def test_mirrors_table_in_the_recipe_with_a_directory_relative_to_the_recipe(ws, make_repo):
    repo = make_repo("tiny", "tiny")
    local = ws.root / "git-mirror"
    shutil.copytree(repo.path, local / "tiny")
    ws.recipe("r", recipe_data({"tiny": component(repo, url=FAKE_BASE + "tiny")},
                               mirrors={FAKE_BASE: "../git-mirror/"}))
    r = ws.build("r")
    assert r.returncode == 0, str(r)
    assert mirror_git(ws.cache, FAKE_BASE + "tiny", "config", "remote.origin.url") == (local / "tiny").as_uri()


def test_the_command_line_mirror_wins_over_the_recipe_for_the_same_prefix(ws, make_repo):
    repo = make_repo("tiny", "tiny")
    ws.recipe("r", recipe_data({"tiny": component(repo, url=FAKE_BASE + "tiny")},
                               mirrors={FAKE_BASE: "../does-not-exist/"}))
    r = ws.build("r", "out", "--mirror", f"{FAKE_BASE}={repo.path.parent}/")
    assert r.returncode == 0, str(r)


def test_rewrites_longest_prefix_wins_and_bad_pairs_are_usage_errors():
    rw = parse_rewrites(["https://github.com/=file:///srv/all/", "https://github.com/intel/=file:///srv/intel/"])
    assert rewrite_url("https://github.com/intel/auto-round.git", rw) == "file:///srv/intel/auto-round.git"
    assert rewrite_url("https://github.com/vllm-project/vllm.git", rw) == "file:///srv/all/vllm-project/vllm.git"
    assert rewrite_url("https://gitlab.com/x.git", rw) == "https://gitlab.com/x.git"
    (local,) = parse_rewrites(["https://h/=relative/dir/"])
    assert local == Rewrite("https://h/", Path("relative/dir").resolve().as_uri() + "/")
    for bad in ("no-equals-sign", "=file:///x", "https://h/="):
        with pytest.raises(UsageError):
            parse_rewrites([bad])


def test_the_mirror_is_fetched_only_when_the_pinned_commit_is_missing(ws, make_repo):
    repo = make_repo("tiny", "tiny")
    first = repo.head()
    ws.recipe("r", recipe_data({"tiny": component(repo, first)}))
    assert ws.build("r", "a").returncode == 0
    assert mirror_git(ws.cache, repo.url, "rev-parse", "main") == first
    second = repo.commit("upstream moves on", {"NEWS": "x\n"})
    # the pinned commit is in the mirror: no fetch, the mirror does not learn about `second`
    r = ws.build("r", "b", "--no-cache")
    assert r.returncode == 0, str(r)
    assert mirror_git(ws.cache, repo.url, "rev-parse", "main") == first
    # pinning the new commit fetches
    ws.recipe("r", recipe_data({"tiny": component(repo, second)}))
    assert ws.build("r", "c").returncode == 0
    assert mirror_git(ws.cache, repo.url, "rev-parse", "main") == second


def test_a_pinned_commit_the_remote_lacks_is_a_clear_error(ws, make_repo):
    repo = make_repo("tiny", "tiny")
    missing = "deadbeef" * 5
    ws.recipe("r", recipe_data({"tiny": component(repo, missing)}))
    r = ws.build("r")
    assert r.returncode == 2, str(r)
    err = r.json()["error"]
    assert f"r.toml: components.tiny.commit: commit {missing} is not in {repo.url}" in err
    assert "force-pushed" in r.json()["hint"]
    assert "toolchain update" in r.json()["hint"]
    assert "Traceback" not in r.output
    assert not (ws.root / "out" / "stack.lock.toml").exists()
    assert not list(ws.cache.rglob("entry.json"))


def test_a_pinned_commit_missing_behind_a_mirror_names_both_urls(ws, make_repo):
    repo = make_repo("tiny", "tiny")
    missing = "0" * 40
    ws.recipe("r", recipe_data({"tiny": component(repo, missing, url=FAKE_BASE + "tiny")}))
    r = ws.build("r", "out", "--mirror", f"{FAKE_BASE}={repo.path.parent}/")
    assert r.returncode == 2, str(r)
    assert f"is not in {FAKE_BASE}tiny (fetched from {repo.url})" in r.json()["error"]


def test_an_unreachable_repository_names_the_url_and_suggests_a_mirror(ws, tmp_path):
    url = (tmp_path / "no-such-repo").as_uri()
    ws.recipe("r", {"toolchain": {"setvars": ""}, "components": {"x": {"url": url, "commit": "1" * 40}}})
    r = ws.build("r")
    assert r.returncode == 2, str(r)
    assert f"cannot fetch {url}" in r.json()["error"]
    assert "--mirror FROM=TO" in r.json()["hint"]
    assert not list(ws.cache.glob("git/.tmp-*"))  # no half-made mirror left behind


# ---- history, tags, checkouts ------------------------------------------------------------------------

def test_describe_sees_full_history_and_tags_through_merges(ws, make_repo):
    repo = make_repo("tiny", "tiny")  # v1.0.0
    repo.branch("feature")
    repo.switch("feature")
    repo.commit("feature work", {"FEATURE": "1\n"})
    repo.commit("more feature work", {"FEATURE": "2\n"})
    repo.switch("main")
    repo.commit("main work", {"MAIN": "1\n"})
    merge = repo.merge("feature", "merge feature")
    ws.recipe("r", recipe_data({"tiny": component(repo, merge)}))
    r = ws.build("r")
    assert r.returncode == 0, str(r)
    # v1.0.0 + main work + two feature commits + the merge = 4 commits since the tag
    assert ws.lock()["components"][0]["describe"] == f"v1.0.0-4-g{merge[:12]}"
    assert r.json()["components"][0]["describe"] == f"v1.0.0-4-g{merge[:12]}"


def test_a_checkout_shares_the_mirror_objects_and_keeps_tags(tmp_path, make_repo):
    from toolchain.sources.trees import SourceTrees

    repo = make_repo("tiny", "tiny")
    second = repo.commit("second", {"NEWS": "2\n"}, tag="v1.1.0")
    mirrors = Mirrors(tmp_path / "cache")
    mirrors.ensure(repo.url, second)
    with SourceTrees(tmp_path / "cache", mirrors).tree(repo.url, second) as tree:
        assert (tree / ".git" / "objects" / "info" / "alternates").read_text().strip() == \
            str(mirrors.path(repo.url) / "objects")  # borrowed, not copied
        git = ["git", "-C", str(tree)]
        assert subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip() == second
        tags = subprocess.run([*git, "tag"], capture_output=True, text=True).stdout.split()
        assert tags == ["v1.0.0", "v1.1.0"]
        assert (tree / "NEWS").read_text() == "2\n"



def test_a_mirror_on_this_machine_is_cloned_by_its_path_and_fetched_by_its_url(tmp_path, make_repo):
    """A rewrite to a folder here (file://) is cloned as git clones a path: its packs linked (same file
    system) or copied, not packed anew through the file:// transport (3 s of pack-objects for auto-round's
    history); the mirror keeps the URL as origin, and a later commit comes by a fetch from it."""
    repo = make_repo("tiny", "tiny")
    subprocess.run(["git", "-C", str(repo.path), "repack", "-a", "-d", "-q"], check=True, timeout=60)
    (pack,) = (repo.path / ".git" / "objects" / "pack").glob("*.pack")
    upstream = "https://git.example.invalid/team/tiny"
    mirrors = Mirrors(tmp_path / "cache", rewrites=(Rewrite(upstream, repo.url),))
    mirror = mirrors.ensure(upstream, repo.head())
    assert (mirror / "objects" / "pack" / pack.name).stat().st_ino == pack.stat().st_ino  # linked, not re-packed
    assert mirror_git(tmp_path / "cache", upstream, "config", "remote.origin.url") == repo.url
    later = repo.commit("later", {"NEWS": "later\n"})
    assert Mirrors(tmp_path / "cache", rewrites=(Rewrite(upstream, repo.url),)).ensure(upstream, later) == mirror
    assert mirror_git(tmp_path / "cache", upstream, "cat-file", "-t", later) == "commit"

def test_a_prepared_tree_is_reused_after_a_build_and_prepared_again_when_its_tracked_state_moved(tmp_path,
                                                                                                make_repo):
    from toolchain.sources.trees import SourceTrees

    repo = make_repo("tiny", "tiny")
    second = repo.commit("second", {"NEWS": "2\n"})
    mirrors = Mirrors(tmp_path / "cache")
    mirrors.ensure(repo.url, second)
    trees = SourceTrees(tmp_path / "cache", mirrors)

    def use() -> tuple[Path, bool]:
        """(the tree, whether it is the one prepared before: a marker inside its .git survived), once the work
        started beside the build has ended, as it has when the tool's process exits (the changes below are
        made by hand, after it; git refuses them while that work holds the tree's index lock)"""
        with trees.tree(repo.url, second) as tree:
            kept = (tree / ".git" / "marker").exists()
            (tree / ".git" / "marker").write_text("")
        trees.settled()
        return tree, kept

    tree, kept = use()
    assert not kept
    assert use()[1]  # untouched
    for leftover in ("build/lib/tiny/__init__.py", "tiny.egg-info/PKG-INFO", "tiny/__pycache__/x.pyc"):
        (tree / leftover).parent.mkdir(parents=True, exist_ok=True)
        (tree / leftover).write_text("what a build leaves\n")
    assert use()[1]  # what a build leaves is cleaned away; the tree is kept
    assert not (tree / "build").exists()
    assert not (tree / "tiny.egg-info").exists()
    assert not (tree / "tiny" / "__pycache__").exists()
    moved = {
        "a tracked file edited, same size": lambda: (tree / "NEWS").write_text("3\n"),
        "an edit staged": lambda: ((tree / "NEWS").write_text("staged\n"),
                                   subprocess.run(["git", "-C", str(tree), "add", "NEWS"], check=True)),
        "a tracked file deleted": (tree / "NEWS").unlink,
        "HEAD moved": lambda: subprocess.run(["git", "-C", str(tree), "checkout", "-q", "--detach", "HEAD~1"],
                                             check=True),
    }
    for what, change in moved.items():
        change()
        tree, kept = use()
        assert not kept, what
        assert (tree / "NEWS").read_text() == "2\n", what
        assert use()[1], what


def test_a_reuse_moves_untracked_and_ignored_output_out_of_the_tree_and_deletes_it_beside_the_build(tmp_path,
                                                                                                      make_repo):
    from toolchain.sources.trees import TRASH, SourceTrees

    repo = make_repo("tiny", "tiny")
    commit = repo.commit("ignore byte code", {".gitignore": "*.pyc\n", "tiny/data.txt": "tracked\n"})
    mirrors = Mirrors(tmp_path / "cache")
    mirrors.ensure(repo.url, commit)
    trees = SourceTrees(tmp_path / "cache", mirrors)
    for _ in range(2):  # prepared (and settled when that use ends), then reused
        with trees.tree(repo.url, commit) as tree:
            (tree / ".git" / "marker").write_text("")
    trees.settled()  # (the process that used it has ended before a build writes below)
    # git lists an untracked folder and, again, the ignored files inside it; ignored files in tracked
    # folders one by one; a folder holding only ignored files once
    left = ["out/lib/x.py", "out/lib/x.pyc", "out/y.pyc", "tiny/a.pyc", "tiny/new.txt", "cache/z.pyc", "top.pyc"]
    for rel in left:
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        (tree / rel).write_text("what a build leaves\n")
    stale = trees.root / f"{TRASH}999999999-dead"  # a killed process's (no such pid)
    (stale / "0").mkdir(parents=True)
    (stale / "0" / "f").write_text("x")
    with trees.tree(repo.url, commit) as again:
        assert again == tree
        assert (tree / ".git" / "marker").exists()
        assert not any((tree / rel).exists() for rel in left)
        assert not (tree / "out").exists()
        assert not (tree / "cache").exists()
        assert (tree / "tiny" / "data.txt").read_text() == "tracked\n"
        assert (tree / ".gitignore").exists()
    trees.settled()
    assert not list(trees.root.glob(f"{TRASH}*"))  # this reuse's output and the stale folder: deleted


def test_readers_of_a_tree_hold_it_at_once_and_a_user_who_builds_in_it_waits_for_them(tmp_path, make_repo):
    """A FetchContent source tree (`read=True`) is read by every build of a bisect at once: a second reader gets
    it while the first holds it (they used to wait for each other's whole build); a use that builds in the tree
    (exclusive) waits until no reader holds it; a reader that finds what a build left cleans it away alone first
    (the readers never see it); a tree not yet made is prepared by the first reader."""
    from toolchain.sources.trees import SourceTrees

    repo = make_repo("tiny", "tiny")
    mirrors = Mirrors(tmp_path / "cache")
    mirrors.ensure(repo.url, repo.head())
    trees = SourceTrees(tmp_path / "cache", mirrors)
    events: list[str] = []
    first_in, release = threading.Event(), threading.Event()

    def reader() -> None:
        with trees.tree(repo.url, repo.head(), read=True) as tree:
            assert (tree / ".git").exists()
            events.append("first in")
            first_in.set()
            release.wait(30)
            events.append("first out")

    def builder() -> None:
        with trees.tree(repo.url, repo.head()):
            events.append("builder in")

    held = threading.Thread(target=reader)
    held.start()  # prepares the tree (it is not made yet), then reads it under the shared lock
    assert first_in.wait(60)
    with trees.tree(repo.url, repo.head(), read=True) as tree:  # beside the first reader, not after it
        events.append("second in")
        waiting = threading.Thread(target=builder)
        waiting.start()
        time.sleep(0.5)
        assert "builder in" not in events  # the builder waits for the readers
    release.set()
    held.join(30)
    waiting.join(30)
    assert events.index("second in") < events.index("first out") < events.index("builder in")
    trees.settled()
    (tree / "build").mkdir()
    (tree / "build" / "left.o").write_text("what a build left\n")
    with trees.tree(repo.url, repo.head(), read=True) as again:
        assert again == tree
        assert not (tree / "build").exists()
    trees.settled()


def test_a_patched_tree_is_reused_while_its_index_holds_what_the_patches_staged(ws, make_repo):
    """A patch series that edits, adds and deletes files: the first use after preparing checks the index
    against what was staged (by object names), later uses compare the recorded status; an index moved away
    from the patches (unstaged, re-staged differently) is prepared again."""
    repo = make_repo("tiny", "tiny")
    repo.commit("a file to delete", {"tiny/gone.txt": "bye\n"})
    start = repo.head()
    repo.commit("the patch", {"tiny/__init__.py": TINY_INIT + "\nPATCHED = True\n", "tiny/added.py": "A = 1\n"})
    repo.git("rm", "--quiet", "tiny/gone.txt")
    repo.git("commit", "--quiet", "--amend", "--no-edit")
    patch = repo.git("format-patch", "-1", "--stdout", "HEAD")
    repo.git("reset", "--quiet", "--hard", start)
    ws.patch("tiny/0001-edit-add-delete.patch", patch)
    ws.recipe("r", recipe_data({"tiny": component(repo, patches=["tiny/0001-edit-add-delete.patch"])}))

    def build(out: str) -> bool:
        """Build; whether the tree was the one prepared before (a marker in its .git survived)."""
        r = ws.build("r", out, "--no-cache", "--no-resolve")
        assert r.returncode == 0, str(r)
        (tree,) = [t for t in (ws.cache / "trees").iterdir() if t.is_dir() and not t.name.startswith(".")]
        kept = (tree / ".git" / "marker").exists()
        (tree / ".git" / "marker").write_text("")
        assert "PATCHED = True" in wheel_member(ws.root / out, "tiny/__init__.py")
        return kept

    assert not build("a")  # prepared
    assert build("b")
    assert build("c")
    (tree,) = [t for t in (ws.cache / "trees").iterdir() if t.is_dir() and not t.name.startswith(".")]
    subprocess.run(["git", "-C", str(tree), "reset", "-q"], check=True)  # the patch unstaged, files as patched
    assert not build("d")
    assert build("e")
    (tree / "tiny" / "added.py").write_text("A = 2\n")  # staged differently: the index moved, the files agree
    subprocess.run(["git", "-C", str(tree), "add", "tiny/added.py"], check=True)
    assert not build("f")
    assert build("g")


def test_a_new_tree_is_settled_when_its_build_ends_and_one_the_build_broke_is_prepared_again(tmp_path, make_repo):
    """The check a tree's first reuse would make runs when the build that prepared it ends (beside the rest of
    that build): its status is recorded and what the build left is gone; a tree whose build edited a
    tracked file is not settled, and the next use prepares it again."""
    from toolchain.sources.trees import SourceTrees

    repo = make_repo("tiny", "tiny")
    mirrors = Mirrors(tmp_path / "cache")
    mirrors.ensure(repo.url, repo.head())
    trees = SourceTrees(tmp_path / "cache", mirrors)
    state = trees.root / f"{trees.key(repo.head(), (), '')}.state"
    with trees.tree(repo.url, repo.head()) as tree:
        assert "status" not in json.loads(state.read_text())  # prepared: nothing recorded yet
        (tree / ".git" / "marker").write_text("")
        (tree / "build" / "lib").mkdir(parents=True)
        (tree / "build" / "lib" / "x.py").write_text("what a build leaves\n")
    trees.settled()
    assert json.loads(state.read_text())["status"].startswith(f"# branch.oid {repo.head()}")
    assert not (tree / "build").exists()
    assert not list(trees.root.glob(".trash-*"))
    with trees.tree(repo.url, repo.head()):
        assert (tree / ".git" / "marker").exists()  # reused (the recorded status compared)

    other = repo.commit("second", {"NEWS": "2\n"})
    mirrors.ensure(repo.url, other)
    state = trees.root / f"{trees.key(other, (), '')}.state"
    with trees.tree(repo.url, other) as broken:
        (broken / ".git" / "marker").write_text("")
        (broken / "NEWS").write_text("the build rewrote a tracked file\n")
    trees.settled()
    assert "status" not in json.loads(state.read_text())
    with trees.tree(repo.url, other) as again:
        assert not (again / ".git" / "marker").exists()
        assert (again / "NEWS").read_text() == "2\n"


def test_a_prepared_tree_edited_by_hand_is_prepared_again(ws, make_repo):
    repo = make_repo("tiny", "tiny")
    ws.recipe("r", recipe_data({"tiny": component(repo)}))
    assert ws.build("r", "a").returncode == 0
    (tree,) = [p for p in (ws.cache / "trees").iterdir() if p.is_dir()]
    (tree / "tiny" / "__init__.py").write_text("raise SystemExit('hand edit')\n")
    (tree / "tiny" / "stray.py").write_text("STRAY = 1\n")
    r = ws.build("r", "b", "--no-cache")
    assert r.returncode == 0, str(r)
    assert wheel_member(ws.root / "b", "tiny/__init__.py") == TINY_INIT
    with zipfile.ZipFile(next((ws.root / "b" / "wheels").glob("*.whl"))) as z:
        assert "tiny/stray.py" not in z.namelist()
        assert "tiny/__init__.py" in z.namelist()
    assert ws.lock("a")["components"][0]["wheel"] == ws.lock("b")["components"][0]["wheel"]


# ---- patches -----------------------------------------------------------------------------------------

def test_a_patch_series_applies_in_order_and_is_recorded(ws, make_repo):
    repo = make_repo("tiny", "tiny")
    one = repo.make_patch({"tiny/__init__.py": TINY_INIT + "\nPATCHED = ['one']\n"}, "one")
    two_base = TINY_INIT + "\nPATCHED = ['one']\n"
    repo.commit("tmp", {"tiny/__init__.py": two_base})
    two = repo.make_patch({"tiny/__init__.py": two_base.replace("['one']", "['one', 'two']")}, "two")
    repo.git("reset", "--quiet", "--hard", "HEAD~1")
    p1, p2 = ws.patch("tiny/0001-one.patch", one), ws.patch("tiny/0002-two.patch", two)
    ws.recipe("r", recipe_data({"tiny": component(repo, patches=["tiny/0001-one.patch", "tiny/0002-two.patch"])}))
    r = ws.build("r")
    assert r.returncode == 0, str(r)
    assert wheel_member(ws.root / "out", "tiny/__init__.py").endswith("PATCHED = ['one', 'two']\n")
    from toolchain.core.fs import sha256_file

    assert ws.lock()["components"][0]["patches"] == [
        {"path": "tiny/0001-one.patch", "sha256": sha256_file(p1)},
        {"path": "tiny/0002-two.patch", "sha256": sha256_file(p2)}]


def test_a_patch_conflict_names_patch_file_hunk_and_commit_and_leaves_nothing_half_applied(ws, make_repo):
    repo = make_repo("tiny", "tiny")
    commit = repo.head()
    one = repo.make_patch({"tiny/__init__.py": TINY_INIT + "\nPATCH_ONE = 1\n"}, "one")
    good_two = repo.make_patch({"tiny/__init__.py": TINY_INIT.replace('"hello "', '"hi "')}, "two")
    bad_two = good_two.replace('-    return "hello " + name', '-    return "howdy " + name')
    assert bad_two != good_two
    ws.patch("tiny/0001-one.patch", one)
    ws.patch("tiny/0002-greet.patch", bad_two)
    ws.recipe("r", recipe_data({"tiny": component(repo, patches=["tiny/0001-one.patch", "tiny/0002-greet.patch"])}))
    r = ws.build("r")
    assert r.returncode == 2, str(r)
    err = r.json()["error"]
    assert f"patch tiny/0002-greet.patch does not apply to tiny@{commit[:12]}" in err
    assert "patch failed: tiny/__init__.py:" in err  # the file and the hunk's line
    assert "refresh" in r.json()["hint"]
    assert "0002-greet.patch" in r.json()["hint"]
    trees = ws.cache / "trees"
    assert [p.name for p in trees.iterdir() if p.is_dir()] == []  # no tree with patch one alone, no .tmp-*
    assert not (ws.root / "out" / "stack.lock.toml").exists()

    ws.patch("tiny/0002-greet.patch", good_two)  # fixed: the next build applies both, each once
    r = ws.build("r")
    assert r.returncode == 0, str(r)
    text = wheel_member(ws.root / "out", "tiny/__init__.py")
    assert text.count("PATCH_ONE = 1") == 1
    assert '"hi "' in text
    assert '"hello "' not in text


def test_one_patch_type_from_recipe_to_lock_and_back_a_remote_patch_included(ws, make_repo):
    """Issue 10: the recipe's patches and the lock's read back as the same values (identity: sha256); a pinned
    remote patch is recorded with its url and commit, and a rebuild from the lock takes it again."""
    from toolchain.core.fs import sha256_bytes, sha256_file
    from toolchain.lock import read_lock
    from toolchain.recipe.load import load_recipe

    repo = make_repo("tiny", "tiny")
    local = ws.patch("tiny/0001-local.patch", repo.make_patch({"tiny/__init__.py": TINY_INIT + "\nLOCAL = 1\n"}))
    remote_text = repo.make_patch({"NOTES": "from the integrator\n"}, "integrator")
    integrator = make_repo("integrator")
    pinned = integrator.commit("add the integrator's patch", {"patches/notes.patch": remote_text})
    remote = {"url": integrator.url, "commit": pinned, "path": "patches/notes.patch",
              "sha256": sha256_bytes(remote_text.encode())}
    path = ws.recipe("r", recipe_data({"tiny": component(repo, patches=["tiny/0001-local.patch", remote])}))
    r = ws.build("r")
    assert r.returncode == 0, str(r)
    assert ws.lock()["components"][0]["patches"] == [
        {"path": "tiny/0001-local.patch", "sha256": sha256_file(local)}, remote]
    recipe_patches = load_recipe(str(path)).component("tiny").patches
    assert read_lock(ws.root / "out").component("tiny").patches == recipe_patches
    assert recipe_patches[0].file == local.resolve()
    assert recipe_patches[1].remote
    again = ws.cli("build", "--from-lock", ws.root / "out" / "stack.lock.toml", "--out", ws.root / "again",
                   "--cache-dir", ws.cache, "--no-cache", "--json")
    assert again.returncode == 0, str(again)
    assert ws.lock("again")["components"][0]["wheel"] == ws.lock()["components"][0]["wheel"]
    local.write_text(local.read_text() + "\n")  # the lock's identity of a patch is its sha256
    changed = ws.cli("build", "--from-lock", ws.root / "out" / "stack.lock.toml", "--out", ws.root / "changed",
                     "--cache-dir", ws.cache, "--json")
    assert changed.returncode == 2, str(changed)
    assert "tiny: patch tiny/0001-local.patch has sha256" in changed.json()["error"]


def test_describe_has_a_fixed_abbreviation_recorded_in_the_lock_and_used_inside_the_tree(ws, make_repo):
    """Issue 9.4: the lock's describe and the one a build runs in its tree (setuptools-scm) have the same
    length whatever else the mirror holds; the rule is recorded."""
    from toolchain.sources.mirrors import DESCRIBE_ABBREV, DESCRIBE_RULE

    repo = make_repo("tiny", "tiny")
    head = repo.commit("after the tag", {"NEWS": "1\n"})
    ws.recipe("r", recipe_data({"tiny": component(repo, head)}))
    assert ws.build("r").returncode == 0
    lock = ws.lock()
    assert lock["describe-rule"] == DESCRIBE_RULE
    assert f"--abbrev={DESCRIBE_ABBREV}" in DESCRIBE_RULE
    assert lock["components"][0]["describe"] == f"v1.0.0-1-g{head[:DESCRIBE_ABBREV]}"
    (tree,) = [p for p in (ws.cache / "trees").iterdir() if p.is_dir()]
    in_tree = subprocess.run(["git", "describe", "--dirty", "--tags", "--long", "--match", "*[0-9]*"], cwd=tree,
                             capture_output=True, text=True, check=True).stdout.strip()  # setuptools-scm's
    assert in_tree == lock["components"][0]["describe"]


def test_patches_of_a_subdirectory_component_are_relative_to_it(ws, make_repo):
    repo = make_repo("suite", "tiny", subdir="extension/tiny")
    full = repo.make_patch({"extension/tiny/tiny/__init__.py": TINY_INIT + "\nIN_SUBDIR = True\n"})
    relative = full.replace("a/extension/tiny/", "a/").replace("b/extension/tiny/", "b/")
    ws.patch("suite/0001-subdir.patch", relative)
    ws.recipe("r", recipe_data({"tiny": component(repo, subdir="extension/tiny",
                                                  patches=["suite/0001-subdir.patch"])}))
    r = ws.build("r")
    assert r.returncode == 0, str(r)
    assert wheel_member(ws.root / "out", "tiny/__init__.py").endswith("IN_SUBDIR = True\n")
    assert ws.lock()["components"][0]["subdir"] == "extension/tiny"


# ---- toolchain update --------------------------------------------------------------------------------

UPDATE_RECIPE = """\
# Keep this comment: it explains the recipe.
description = "update test"

[toolchain]
setvars = ""   # pure Python

[target]
python = "python3"

[components.tiny]
url = "{url}"
ref = "{ref}"      # follow this ref
commit = "{commit}"   # pinned by hand
# a comment between keys
dist = "tiny"
"""


def test_update_pins_the_branch_head_and_keeps_comments(ws, make_repo):
    repo = make_repo("tiny", "tiny")
    old = repo.head()
    path = ws.recipe("r", UPDATE_RECIPE.format(url=repo.url, ref="main", commit=old))
    before = path.read_text()
    r = ws.cli("update", "--recipe", "r", "--json")  # the mirror now knows `old`
    assert r.returncode == 0, str(r)
    assert r.json()["changes"] == [{"component": "tiny", "ref": "main", "old": old, "new": old, "changed": False}]
    assert path.read_text() == before
    new = repo.commit("upstream moves on", {"NEWS": "x\n"})
    r = ws.cli("update", "--recipe", "r", "--json")
    assert r.returncode == 0, str(r)
    assert r.json()["changes"] == [{"component": "tiny", "ref": "main", "old": old, "new": new, "changed": True}]
    assert r.json()["recipe"] == str(path)
    # only the commit line changed: the new commit with its own subject and describe as its comment (the old
    # commit's comment would now describe the wrong commit); other comments and the layout are kept
    after = path.read_text()
    commit_line = next(line for line in before.splitlines() if old in line)
    assert after == before.replace(commit_line, f'commit = "{new}" # upstream moves on (v1.0.0-1-g{new[:12]})')


def test_update_resolves_an_annotated_tag_to_its_commit_and_pins_unpinned_components(ws, make_repo):
    repo = make_repo("tiny", "tiny")
    tagged = repo.commit("release", {"NEWS": "2\n"})
    repo.git("tag", "-a", "v2.0.0", "-m", "release 2")
    repo.commit("after the release", {"NEWS": "3\n"})
    other = make_repo("other", "tiny")
    text = UPDATE_RECIPE.format(url=repo.url, ref="v2.0.0", commit="").replace('commit = ""   # pinned by hand\n', "")
    text += f'\n[components.other]\nurl = "{other.url}"\nref = "main"\ncommit = "{"f" * 40}"\n'
    path = ws.recipe("r", text)
    assert ws.cli("build", "--recipe", "r", "--json").returncode == 2  # unpinned: cannot be built
    r = ws.cli("update", "--recipe", "r", "--component", "tiny", "--json")
    assert r.returncode == 0, str(r)
    assert r.json()["changes"] == [{"component": "tiny", "ref": "v2.0.0", "old": "", "new": tagged, "changed": True}]
    import tomlkit

    data = tomlkit.parse(path.read_text())
    assert data["components"]["tiny"]["commit"] == tagged
    assert data["components"]["other"]["commit"] == "f" * 40  # --component: the others are left alone
    assert "# Keep this comment" in path.read_text()


def test_update_of_a_variant_pins_the_inherited_component_in_the_variant(ws, make_repo):
    repo = make_repo("tiny", "tiny")
    old = repo.head()
    base = ws.recipe("base", UPDATE_RECIPE.format(url=repo.url, ref="main", commit=old))
    base_text = base.read_text()
    child = ws.recipe("child", '# a variant\nextends = "base"\n')
    new = repo.commit("upstream moves on", {"NEWS": "x\n"})
    r = ws.cli("update", "--recipe", "child", "--json")
    assert r.returncode == 0, str(r)
    assert base.read_text() == base_text
    assert child.read_text().startswith('# a variant\nextends = "base"\n')
    from toolchain.recipe.load import load_recipe

    assert load_recipe("child", ws.recipes).component("tiny").commit == new


def test_update_refuses_a_component_without_ref_and_an_unknown_ref(ws, make_repo):
    repo = make_repo("tiny", "tiny")
    path = ws.recipe("r", UPDATE_RECIPE.format(url=repo.url, ref="", commit=repo.head()))
    before = path.read_text()
    r = ws.cli("update", "--recipe", "r", "--json")
    assert r.returncode == 2, str(r)
    assert "components.tiny.ref: not set" in r.json()["error"]
    path.write_text(UPDATE_RECIPE.format(url=repo.url, ref="no-such-branch", commit=repo.head()))
    r = ws.cli("update", "--recipe", "r", "--json")
    assert r.returncode == 2, str(r)
    assert f"ref 'no-such-branch' not found in {repo.url}" in r.json()["error"]
    r = ws.cli("update", "--recipe", "r", "--component", "tinny", "--json")
    assert r.returncode == 2 and "did you mean 'tiny'" in r.json()["error"], str(r)
    assert before.replace('ref = ""', 'ref = "no-such-branch"') == path.read_text()


# ---- a remote patch whose URL carries credentials (issue 9) -------------------------------------------------

PASSWORD = "pw-s3cret-9137"
TOKEN = "tok-9137-abcdefgh"


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


class _Server(ThreadingHTTPServer):
    request_queue_size = 128  # (5 by default: four clones' parallel requests, each 0.3 s late, overflow it
    daemon_threads = True     # and the kernel resets connections: "Recv failure: Connection reset by peer")


@contextlib.contextmanager
def _dumb_http(root: Path, handler: type[SimpleHTTPRequestHandler] = _Quiet) -> Iterator[int]:
    """A dumb-HTTP git server on 127.0.0.1 over `root`, a directory of bare repositories (`serve_bare`): its
    port; a path that is not there answers 404."""
    root.mkdir(parents=True, exist_ok=True)
    server = _Server(("127.0.0.1", 0), functools.partial(handler, directory=str(root)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def serve_bare(repo, root: Path) -> Path:
    """`repo` as the bare repository `root/<name>.git` that a dumb-HTTP server can serve."""
    bare = root / f"{repo.path.name}.git"
    subprocess.run(["git", "clone", "--quiet", "--bare", str(repo.path), str(bare)], check=True)
    subprocess.run(["git", "update-server-info"], cwd=bare, check=True)
    return bare


@pytest.fixture
def git_http(tmp_path):
    """(root, port) of a dumb-HTTP git server on 127.0.0.1."""
    with _dumb_http(tmp_path / "served") as port:
        yield tmp_path / "served", port


@pytest.fixture
def slow_git_http(tmp_path):
    """A dumb-HTTP git server on 127.0.0.1 that answers each request 0.3 s late (a network remote's latency)
    and records which repositories it served at the same time (git itself asks for one repository's objects
    in parallel requests, so only different repositories at once tell that clones overlapped)."""
    seen: dict = {"in-flight": [], "together": set(), "paths": []}  # together: repositories served at once
    lock = threading.Lock()

    class Slow(_Quiet):
        def do_GET(self) -> None:
            repo = self.path.split("/")[1]
            with lock:
                seen["together"].update(frozenset({repo, other}) for other in seen["in-flight"] if other != repo)
                seen["in-flight"].append(repo)
                seen["paths"].append(self.path)
            try:
                time.sleep(0.3)
                super().do_GET()
            finally:
                with lock:
                    seen["in-flight"].remove(repo)

    with _dumb_http(tmp_path / "served", Slow) as port:
        yield tmp_path / "served", port, seen


def test_a_cold_stack_fetches_its_sources_at_once_and_a_bad_pin_stops_it_before_any_compile(ws, make_repo,
                                                                                           slow_git_http):
    """Three components and a FetchContent dependency behind a remote with latency: their mirrors are fetched
    at the same time (the server sees requests overlap), not one after the other; the stack builds. A pin the
    remote lacks, in the last component, stops the build before the first component compiles."""
    root, port, seen = slow_git_http
    repos = [make_repo(n, "tiny") for n in ("one", "two", "three")]
    dep = make_repo("dep")
    dep.commit("the pinned header", {"include/dep.h": "#define DEP 1\n"})
    for repo in (*repos, dep):
        serve_bare(repo, root)
    base = f"http://127.0.0.1:{port}/"
    comps = {r.path.name: component(r, url=FAKE_BASE + r.path.name + ".git", dist="tiny") for r in repos}
    comps["three"]["fetchcontent"] = [{"name": "dep", "url": FAKE_BASE + "dep.git", "commit": dep.head()}]
    ws.recipe("r", recipe_data(comps))
    r = ws.build("r", "out", "--mirror", f"{FAKE_BASE}={base}")
    assert r.returncode == 0, str(r)
    assert [c["source"] for c in r.json()["components"]] == ["built"] * 3
    assert {p.split("/")[1] for p in seen["paths"]} == {"one.git", "two.git", "three.git", "dep.git"}
    assert len(seen["together"]) >= 2, seen  # the clones overlapped

    missing = "0" * 40
    comps["three"]["commit"] = missing
    changed = comps["one"]["commit"] = repos[0].commit("one: a change to compile", {"tiny/extra.py": "X = 1\n"})
    served_one = root / "one.git"
    subprocess.run(["git", "fetch", "--quiet", str(repos[0].path), "+refs/heads/*:refs/heads/*"], cwd=served_one,
                   check=True)
    subprocess.run(["git", "update-server-info"], cwd=served_one, check=True)
    ws.recipe("r", recipe_data(comps))
    entries = sorted(ws.cache.rglob("entry.json"))
    r = ws.build("r", "out2", "--mirror", f"{FAKE_BASE}={base}")
    assert r.returncode == 2, str(r)
    assert f"components.three.commit: commit {missing} is not in {FAKE_BASE}three.git" in r.json()["error"]
    assert sorted(ws.cache.rglob("entry.json")) == entries  # nothing was compiled, one included
    assert not (ws.root / "out2" / "logs" / "one.log").exists()  # its build never started
    assert mirror_git(ws.cache, FAKE_BASE + "one.git", "cat-file", "-t", changed) == "commit"  # fetched all the same


@pytest.mark.parametrize("userinfo", [f"ci:{PASSWORD}", TOKEN], ids=["user-password", "token-as-user"])
@pytest.mark.parametrize("served", [False, True], ids=["404", "path-missing-at-commit"])
def test_a_remote_patch_url_with_credentials_never_shows_them(ws, make_repo, git_http, userinfo, served):
    """A pinned remote patch fetched over HTTP with credentials in its URL: whether the server answers 404
    or the patch is not at the pinned commit, the error names the patch and the URL without the secret,
    and no log (nor anything under --out) holds it."""
    from toolchain.core.fs import sha256_bytes

    root, port = git_http
    repo = make_repo("tiny", "tiny")
    integrator = make_repo("integrator")
    pinned = integrator.commit("the integrator's notes", {"NOTES": "no patch here\n"})
    if served:
        serve_bare(integrator, root)
    url = f"http://{userinfo}@127.0.0.1:{port}/integrator.git"
    remote = {"url": url, "commit": pinned, "path": "patches/notes.patch", "sha256": sha256_bytes(b"x")}
    ws.recipe("r", recipe_data({"tiny": component(repo, patches=[remote])}))
    r = ws.build("r")
    assert r.returncode in (1, 2), str(r)
    error = r.json()["error"]
    secret = userinfo.split(":")[-1]
    assert secret not in r.output, str(r)
    assert f"127.0.0.1:{port}/integrator.git" in error, error
    if served:  # the fetch worked: the patch's own check failed, naming the path and commit
        assert "patches/notes.patch does not exist at" in error and pinned in error, error
    else:
        assert "cannot fetch" in error, error
    logs = [p for p in [*ws.cache.rglob("*.log"), *(ws.root / "out").rglob("*")] if p.is_file()]
    assert logs, "the build wrote no log"
    for log in logs:
        assert secret not in log.read_text(errors="replace"), log
