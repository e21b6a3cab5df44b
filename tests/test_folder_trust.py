"""Issue 47: what is read from the cache is trusted for the folders it lies in too (core/trust.py
`folder_problem`, walked as ssh's StrictModes walks a path), and each record knows its own key and checksum
(`sealed`); a recipe found by name in ./recipes is run only from folders of this user's or root's (git's
`safe.directory`). The other user is a real one (`setpriv --reuid 65534`: the suite runs as root), the renames
real `mv`s, the sticky folders real `chmod 1777` ones; everything lies under the test's tmp folder."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.spine_helpers import Cli, Result, isolated_env
from toolchain.build.cache import WheelCache, shared_folder_warnings
from toolchain.build.entry import EntryMeta
from toolchain.core import group, trust
from toolchain.core.probe_memo import remembered

NOBODY = 65534
AS_NOBODY = ["setpriv", "--reuid", str(NOBODY), "--regid", str(NOBODY), "--clear-groups"]

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another uid")


@pytest.fixture(autouse=True)
def fresh_rule(monkeypatch, tmp_path: Path):
    """No shared group; no folder verdict kept from another test; the tmp folder searchable by uid 65534."""
    monkeypatch.delenv(group.SHARED_GROUP_ENV, raising=False)
    group.declare_shared_group("")
    trust.forget_folders()
    for p in (tmp_path, *tmp_path.parents):
        os.chmod(p, p.stat().st_mode | 0o001)
    yield
    trust.forget_folders()


def as_nobody(*argv: object) -> None:
    subprocess.run([*AS_NOBODY, *map(str, argv)], check=True, timeout=60)


def shared_tmp(tmp_path: Path) -> Path:
    """A folder like /tmp: root's, sticky, everyone may add to it."""
    d = tmp_path / "tmp"
    d.mkdir()
    os.chmod(d, 0o1777)
    return d


def probe(memo: Path, name: str, answer: str) -> tuple[str, bool]:
    """A remembered probe of setvars `name` whose real answer is `answer`: (what it gave, whether it ran)."""
    ran: list[bool] = []

    def compute() -> tuple[str, list[str]]:
        ran.append(True)
        return answer, []

    return remembered(memo, "setvars", {"setvars": name}, compute), bool(ran)


def remember_two(cache: Path) -> tuple[Path, Path]:
    """Two recipes' remembered setvars (oneAPI 2025.2.0 and 2099.1.0) in `cache`: their memo files."""
    memo = cache / "memo"
    assert probe(memo, "/opt/a/setvars.sh", "2025.2.0") == ("2025.2.0", True)
    assert probe(memo, "/opt/b/setvars.sh", "2099.1.0") == ("2099.1.0", True)
    assert probe(memo, "/opt/a/setvars.sh", "unused") == ("2025.2.0", False)  # served warm
    trust.forget_folders()
    a, b = sorted(memo.glob("setvars-*.json"), key=lambda p: "2099.1.0" in p.read_text())
    return a, b


def swap(a: Path, b: Path, run=subprocess.run) -> None:
    tmp = a.with_name("swap.tmp")
    for src, dst in ((a, tmp), (b, a), (tmp, b)):
        run(["mv", str(src), str(dst)], check=True, timeout=60)


def test_a_cache_whose_folders_others_can_write_is_read_from_nowhere_with_one_warning(tmp_path: Path):
    cache = tmp_path / "cache"
    a, _ = remember_two(cache)
    subprocess.run(["chmod", "-R", "o+w", str(cache)], check=True, timeout=60)
    assert probe(cache / "memo", "/opt/a/setvars.sh", "probed again") == ("probed again", True)
    (warning,) = shared_folder_warnings(cache)
    assert warning.startswith(f"cache folder {cache}: it is writable by other users (mode 757)"), warning
    assert "nothing in it is read this run" in warning and f"chmod -R go-w {cache}" in warning
    assert a.stat().st_uid == os.geteuid() and not a.stat().st_mode & 0o022  # the file itself was fine
    with pytest.raises(trust.Untrusted, match="writable by other users"):
        trust.read_trusted(a)

    os.chmod(cache, 0o755)  # the root fixed, memo/ still open to all: what lies in memo/ is not read
    assert shared_folder_warnings(cache) and probe(cache / "memo", "/opt/b/setvars.sh", "again") == ("again", True)
    subprocess.run(["chmod", "-R", "go-w", str(cache)], check=True, timeout=60)  # the fix the warning gives
    assert shared_folder_warnings(cache) == []
    assert probe(cache / "memo", "/opt/b/setvars.sh", "unused") == ("again", False)


def test_a_folder_above_the_cache_that_others_can_write_makes_it_untrusted(tmp_path: Path):
    above = tmp_path / "projects"
    cache = above / "me" / "cache"
    remember_two(cache)
    os.chmod(above, 0o777)  # (not sticky: anyone may rename me/ away and put their own in its place)
    (warning,) = shared_folder_warnings(cache)
    assert f"{above} is writable by other users (mode 777)" in warning and "nothing in it is read" in warning
    assert probe(cache / "memo", "/opt/a/setvars.sh", "probed again") == ("probed again", True)
    os.chmod(above, 0o1777)  # root's sticky folder (/tmp): others may add, not rename ours
    trust.forget_folders()
    assert shared_folder_warnings(cache) == []
    assert probe(cache / "memo", "/opt/a/setvars.sh", "unused") == ("probed again", False)


def test_a_cache_folder_that_is_a_link_to_another_users_folder_is_not_read(tmp_path: Path):
    tmp = shared_tmp(tmp_path)
    as_nobody("mkdir", "-m", "755", tmp / "theirs")
    cache = tmp_path / "cache"
    cache.symlink_to(tmp / "theirs")
    memo = cache / "memo"
    assert probe(memo, "/opt/a/setvars.sh", "2025.2.0") == ("2025.2.0", True)  # (root can write there)
    assert (tmp / "theirs" / "memo").is_dir()
    trust.forget_folders()
    assert probe(memo, "/opt/a/setvars.sh", "probed again") == ("probed again", True)
    (warning,) = shared_folder_warnings(cache)
    assert f"{tmp / 'theirs'} is owned by uid {NOBODY}" in warning, warning

    # a link another user made (in a sticky folder: they may replace it whenever they like) to a folder of ours
    mine = tmp_path / "mine"
    remember_two(mine)
    as_nobody("ln", "-s", mine, tmp / "cache-link")
    assert probe(tmp / "cache-link" / "memo", "/opt/a/setvars.sh", "probed again") == ("probed again", True)
    (warning,) = shared_folder_warnings(tmp / "cache-link")
    assert f"cache folder {tmp / 'cache-link'}: it is a symbolic link of uid {NOBODY}" in warning, warning
    # our own link to our own folder is fine
    (tmp_path / "my-link").symlink_to(mine)
    assert shared_folder_warnings(tmp_path / "my-link") == []
    # (served: what the probe through their link wrote again, in our folder)
    assert probe(tmp_path / "my-link" / "memo", "/opt/a/setvars.sh", "unused") == ("probed again", False)


def test_a_sticky_tmp_folder_someone_else_created_first_is_not_read(tmp_path: Path):
    tmp = shared_tmp(tmp_path)
    as_nobody("mkdir", "-m", "1777", tmp / "xpu-toolchain")  # before this user's first build
    cache = tmp / "xpu-toolchain"
    assert probe(cache / "memo", "/opt/a/setvars.sh", "2025.2.0") == ("2025.2.0", True)
    trust.forget_folders()
    assert probe(cache / "memo", "/opt/a/setvars.sh", "probed again") == ("probed again", True)
    (warning,) = shared_folder_warnings(cache)
    assert warning.startswith(f"cache folder {cache}: it is owned by uid {NOBODY}"), warning

    os.mkdir(tmp / "mine", 0o1777)  # a sticky folder of this user's own (root's here): trusted
    os.chmod(tmp / "mine", 0o1777)
    assert probe(tmp / "mine" / "memo", "/opt/a/setvars.sh", "2025.2.0") == ("2025.2.0", True)
    trust.forget_folders()
    assert shared_folder_warnings(tmp / "mine") == []
    assert probe(tmp / "mine" / "memo", "/opt/a/setvars.sh", "unused") == ("2025.2.0", False)


def test_memos_another_uid_swapped_are_not_served(tmp_path: Path):
    """The issue's case: in a cache others can write, uid 65534 swaps two recipes' setvars memos (files that stay
    this user's, mode 644): the warm lookup took the other recipe's oneAPI."""
    cache = tmp_path / "cache"
    a, b = remember_two(cache)
    os.chmod(cache / "memo", 0o777)
    swap(a, b, run=lambda argv, **kw: subprocess.run([*AS_NOBODY, *argv], **kw))
    assert "2099.1.0" in a.read_text() and a.stat().st_uid == os.geteuid() and a.stat().st_mode & 0o777 == 0o644
    trust.forget_folders()
    assert probe(cache / "memo", "/opt/a/setvars.sh", "2025.2.0") == ("2025.2.0", True)


def test_a_memo_renamed_over_another_or_edited_by_its_owner_is_a_miss(tmp_path: Path):
    cache = tmp_path / "cache"
    a, b = remember_two(cache)
    swap(a, b)  # in a folder of this user's: the folder is fine, each record knows its own key
    assert "2099.1.0" in a.read_text()
    assert probe(cache / "memo", "/opt/a/setvars.sh", "2025.2.0") == ("2025.2.0", True)
    assert probe(cache / "memo", "/opt/b/setvars.sh", "2099.1.0") == ("2099.1.0", True)
    assert probe(cache / "memo", "/opt/a/setvars.sh", "unused") == ("2025.2.0", False)

    a.write_text(a.read_text().replace("2025.2.0", "2099.9.9"))  # an edit: the checksum no longer holds
    assert probe(cache / "memo", "/opt/a/setvars.sh", "2025.2.0") == ("2025.2.0", True)
    data = json.loads(a.read_text())
    assert data[trust.RECORD_KEY] == a.stem and len(data[trust.RECORD_SHA]) == 64


def test_wheel_cache_entries_renamed_over_each_other_are_misses(tmp_path: Path):
    cache = WheelCache(tmp_path / "cache")
    keys = ("a" * 64, "b" * 64)
    for key, name in zip(keys, ("one", "two"), strict=True):
        wheel = tmp_path / "made" / key / f"{name}-1.0-py3-none-any.whl"
        wheel.parent.mkdir(parents=True)
        wheel.write_bytes(name.encode() * 100)
        cache.put(key, wheel, EntryMeta(component=name))
    got = cache.get(keys[0])
    assert got is not None and got.meta.component == "one"
    one, two = (cache.root / k[:2] / k for k in keys)
    tmp = one.with_name("swapping")
    one.rename(tmp)  # the whole entries (wheel and entry.json, consistent with each other) swapped by name
    two.rename(one)
    tmp.rename(two)
    warned: list[str] = []
    cache.warn = warned.append
    assert cache.get(keys[0]) is None and cache.get(keys[1]) is None
    assert len(warned) == 2 and all("not this key's record as stored" in w for w in warned), warned


# ---- recipes found by name ----------------------------------------------------------------------------------

def plan(cwd: Path, *extra: object) -> Result:
    """`toolchain plan --recipe demo` run in `cwd` (a recipe found by name: ./recipes first)."""
    return Cli(cwd, isolated_env(cwd.parent / "home"))("plan", "--recipe", "demo", *extra)


def demo_copy() -> str:
    """The shipped demo recipe's text, its setvars named by absolute path (the copy lies elsewhere)."""
    from toolchain.recipe.load import shipped_recipes_dir

    text = (shipped_recipes_dir() / "demo.toml").read_text()
    standin = (shipped_recipes_dir() / "../../demo_src/oneapi-standin/setvars.sh").resolve()
    assert standin.is_file()
    return text.replace('"../../demo_src/oneapi-standin/setvars.sh"', f'"{standin}"')


def with_patches(folder: Path) -> None:
    """The shipped patches in `folder`/patches (beside recipes/, where a copy of the demo recipe finds them)."""
    import shutil

    from toolchain.recipe.load import shipped_recipes_dir

    shutil.copytree(shipped_recipes_dir().parent / "patches", folder / "patches")


def planted_recipe(folder: Path) -> Path:
    """Another user's ./recipes/demo.toml in `folder`: a copy of the shipped one with its own setvars, which
    leaves `folder`/RAN when it runs (then sources the stand-in)."""
    text = demo_copy()
    with_patches(folder)
    standin = text.split('setvars = "', 1)[1].split('"', 1)[0]
    (folder / "evil.sh").write_text(f'touch "{folder}/RAN"\nsource "{standin}" "$@"\n')
    as_nobody("mkdir", "-m", "755", folder / "recipes", folder / "theirs")
    as_nobody("cp", folder / "evil.sh", folder / "theirs" / "setvars.sh")
    (folder / "planted.toml").write_text(text.replace(standin, str(folder / "theirs" / "setvars.sh")))
    as_nobody("cp", folder / "planted.toml", folder / "recipes" / "demo.toml")
    return folder / "recipes" / "demo.toml"


def test_another_users_recipe_in_a_shared_sticky_folder_is_not_run(tmp_path: Path):
    tmp = shared_tmp(tmp_path)
    planted = planted_recipe(tmp)
    r = plan(tmp)
    assert r.returncode == 2, str(r)
    assert f"the recipe {planted} was found in ./recipes" in r.stderr and f"owned by uid {NOBODY}" in r.stderr
    assert "--recipes-dir" in r.stderr and "chown -R $USER" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp / "RAN").exists()  # their setvars did not run

    named = Cli(tmp, isolated_env(tmp_path / "home"))("plan", "--recipe", "demo", "--recipes-dir", tmp / "recipes")
    assert named.returncode == 0, str(named)  # named by the user: their choice, as a path to a .toml is
    assert (tmp / "RAN").exists()


@pytest.mark.parametrize("case", ["folder others can write", "file of another user", "file others can write",
                                  "link of another user", "current folder of another user", "patch of another user"])
def test_a_recipe_found_in_recipes_others_can_change_is_refused(tmp_path: Path, case: str):
    here = tmp_path / "work"
    recipes = here / "recipes"
    recipes.mkdir(parents=True)
    demo = recipes / "demo.toml"
    text = demo_copy()
    if case == "folder others can write":
        os.chmod(recipes, 0o777)
        demo.write_text(text)
        expected = f"{recipes} is writable by other users (mode 777)"
    elif case == "file of another user":
        demo.write_text(text)
        os.chown(demo, NOBODY, NOBODY)
        expected = f"{demo} is owned by uid {NOBODY}"
    elif case == "file others can write":
        demo.write_text(text)
        os.chmod(demo, 0o666)
        expected = f"{demo} is writable by other users (mode 666)"
    elif case == "link of another user":
        (here / "real.toml").write_text(text)
        demo.symlink_to(here / "real.toml")
        os.lchown(demo, NOBODY, NOBODY)
        expected = f"{demo} is a symbolic link of uid {NOBODY}"
    elif case == "current folder of another user":
        demo.write_text(text)
        os.chown(here, NOBODY, NOBODY)
        expected = f"{here} is owned by uid {NOBODY}"
    else:  # the recipe is this user's, a patch it applies is not
        demo.write_text(text)
        with_patches(here)
        patch = sorted((here / "patches").rglob("*.patch"))[0]
        os.chown(patch, NOBODY, NOBODY)
        expected = f"{patch} is owned by uid {NOBODY}"
    r = plan(here)
    assert r.returncode == 2 and expected in r.stderr, (case, str(r))

    # the same recipe in a folder of this user's, writable by no one else: run
    trusted = tmp_path / "mine"
    (trusted / "recipes").mkdir(parents=True)
    with_patches(trusted)
    (trusted / "recipes" / "demo.toml").write_text(text)
    ok = plan(trusted)
    assert ok.returncode == 0, str(ok)
