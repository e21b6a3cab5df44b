"""Issue 47: a cache whose root another user can write (or that is a link to another user's folder) is untrusted
as a whole for the run, and "untrusted" covers everything under it: its git mirrors, prepared source trees,
compiler cache and work folder are not read, run or written; the run builds from a private, fresh folder of its
own (`core.trust.cache_for_run`), removed at exit, and says so once. The other user is a real one (`setpriv
--reuid 65534`: the suite runs as root); the demo builds are real (git, ccache, pip)."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import tempfile
import tomllib
import zipfile
from pathlib import Path

import pytest

from tests.spine_helpers import Cli, Result, isolated_env

NOBODY = 65534
AS_NOBODY = ["setpriv", "--reuid", str(NOBODY), "--regid", str(NOBODY), "--clear-groups"]
PLANTED = "PLANTED_BY_65534"

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another uid")


def as_nobody(*argv: object) -> None:
    subprocess.run([*AS_NOBODY, *map(str, argv)], check=True, timeout=60)


def build(cli: Cli, out: Path) -> Result:
    return cli("build", "--recipe", "demo", "--out", out)


def commits(out: Path) -> dict[str, str]:
    """Each component's URL -> the commit the lock in `out` names."""
    lock = tomllib.loads((out / "stack.lock.toml").read_text())
    return {c["url"]: c["commit"] for c in lock["components"]}


def snapshot(root: Path) -> dict[str, tuple[int, int, int, int]]:
    """Every path under `root` (not followed through links): mode, owner, size, mtime."""
    found = {}
    for p in (root, *root.rglob("*")):
        st = os.lstat(p)
        found[str(p.relative_to(root))] = (st.st_mode, st.st_uid, st.st_size if not stat.S_ISDIR(st.st_mode) else 0,
                                           st.st_mtime_ns)
    return found


def git_logs(out: Path) -> str:
    return "".join(p.read_text() for p in sorted((out / "logs").glob("git-*.log")))


def plant(cache: Path, tmp_path: Path) -> Path:
    """As uid 65534, in `cache` (which it can write): a ccache folder whose ccache.conf runs its script before
    every compile, a git mirror of the engine with hooks and an fsmonitor that run it, and the prepared source
    trees' Python files with a line of its own. The file the script leaves when anything runs it."""
    ran = tmp_path / "RAN"
    script = tmp_path / "evil.sh"
    script.write_text(f'#!/bin/sh\ntouch "{ran}"\nexec "$@"\n')
    script.chmod(0o755)
    (tmp_path / "ccache.conf").write_text(f"prefix_command = {script}\n")
    if (cache / "ccache").exists():
        as_nobody("mv", cache / "ccache", cache / "ccache.old")
    as_nobody("mkdir", "-m", "755", cache / "ccache")
    as_nobody("cp", tmp_path / "ccache.conf", cache / "ccache" / "ccache.conf")
    for mirror in cache.glob("git/toolchain-demo-engine-*.git"):
        as_nobody("mv", mirror, mirror.with_name("old-engine.git"))
    if not (cache / "git").exists():
        as_nobody("mkdir", "-m", "755", cache / "git")
    mirror = cache / "git" / "toolchain-demo-engine-95d1dda02ec6.git"
    as_nobody("git", "init", "--bare", "-q", mirror)
    as_nobody("git", "--git-dir", mirror, "config", "core.fsmonitor", script)
    for hook in ("post-checkout", "reference-transaction", "post-merge", "pre-auto-gc"):
        as_nobody("cp", script, mirror / "hooks" / hook)
    for py in cache.glob("trees/*/**/*.py"):  # (a prepared tree's files: moved away, theirs put in their place)
        (tmp_path / "planted.py").write_text(py.read_text() + f"\n{PLANTED} = True\n")
        as_nobody("mv", py, py.with_name(py.name + ".old"))
        as_nobody("cp", tmp_path / "planted.py", py)
    return ran


def assert_built_privately(r: Result, cache: Path, out: Path, expected: dict[str, str], ran: Path) -> None:
    """The build succeeded from a private folder (named once in the one warning, gone after the run), with the
    recipe's commits, nothing of what was planted in `cache` run or in its wheels."""
    assert r.returncode == 0, str(r)
    assert r.stderr.count(f"cache folder {cache}") == 1, r.stderr
    flat = " ".join(r.stderr.split())
    found = re.search(r"private, empty cache instead, (\S+) \(yours alone", flat)
    assert found and "chmod -R go-w" in flat, flat
    private = Path(found.group(1))
    assert private.parent == Path(tempfile.gettempdir()) and not private.exists()
    assert commits(out) == expected
    assert not ran.exists(), "something planted in the untrusted cache ran"
    logs = git_logs(out)
    assert f"{private}/git/" in logs and f"{cache}/" not in logs, logs
    for wheel in (out / "wheels").glob("*.whl"):
        with zipfile.ZipFile(wheel) as z:
            assert not any(PLANTED.encode() in z.read(n) for n in z.namelist() if n.endswith(".py")), wheel


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    for p in (tmp_path, *tmp_path.parents):  # (the way to the cache searchable by uid 65534)
        os.chmod(p, p.stat().st_mode | 0o001)
    home = tmp_path / "home"
    home.mkdir()
    return Cli(home, isolated_env(tmp_path))


def test_a_cache_others_can_write_is_not_used_at_all_the_run_builds_in_a_private_one(cli: Cli, tmp_path: Path):
    cache = Path(cli.env["TOOLCHAIN_CACHE_DIR"])
    r = build(cli, tmp_path / "out-cold")
    assert r.returncode == 0 and "cache folder" not in r.stderr, str(r)
    expected = commits(tmp_path / "out-cold")
    # trusted: the mirrors are reused (the same folder, no clone), whatever else must be prepared again
    (engine,) = cache.glob("git/toolchain-demo-engine-*.git")
    inode = engine.stat().st_ino
    subprocess.run(["rm", "-rf", str(cache / "trees"), str(cache / "wheels")], check=True, timeout=60)
    r = build(cli, tmp_path / "out-warm")
    assert r.returncode == 0 and "cache folder" not in r.stderr, str(r)
    assert engine.stat().st_ino == inode and "clone --bare" not in git_logs(tmp_path / "out-warm")
    assert commits(tmp_path / "out-warm") == expected

    for folder in (cache, *(p for p in cache.rglob("*") if p.is_dir() and not p.is_symlink())):
        os.chmod(folder, folder.stat().st_mode | 0o002)  # folders others can write; the files stay 644
    ran = plant(cache, tmp_path)
    before = snapshot(cache)
    out = tmp_path / "out"
    assert_built_privately(build(cli, out), cache, out, expected, ran)
    assert snapshot(cache) == before, "the run wrote in the untrusted cache"


def test_a_cache_that_is_a_link_to_another_users_folder_is_not_used(cli: Cli, tmp_path: Path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    os.chmod(tmp, 0o1777)
    as_nobody("mkdir", "-m", "755", tmp / "theirs")
    cache = Path(cli.env["TOOLCHAIN_CACHE_DIR"])
    cache.symlink_to(tmp / "theirs")
    ran = plant(tmp / "theirs", tmp_path)
    before = snapshot(tmp / "theirs")
    out = tmp_path / "out"
    r = build(cli, out)
    assert_built_privately(r, cache, out, commits_of_recipe(), ran)
    assert f"{tmp / 'theirs'} is owned by uid {NOBODY}" in " ".join(r.stderr.split()), r.stderr
    assert snapshot(tmp / "theirs") == before, "the run wrote in the other user's folder"


def commits_of_recipe() -> dict[str, str]:
    """The shipped demo recipe's components: URL -> pinned commit."""
    from toolchain.recipe.load import shipped_recipes_dir

    recipe = tomllib.loads((shipped_recipes_dir() / "demo.toml").read_text())
    return {c["url"]: c["commit"] for c in recipe["components"].values()}


def test_the_private_folder_is_one_per_cache_yours_alone_and_a_declared_group_takes_the_cache_back(tmp_path: Path,
                                                                                                   monkeypatch):
    from toolchain.build.cache import shared_folder_warnings
    from toolchain.core import trust

    monkeypatch.delenv(trust.SHARED_GROUP_ENV, raising=False)
    trust.declare_shared_group("")
    trust.forget_folders()
    mine = tmp_path / "mine"
    (mine / "git").mkdir(parents=True)
    assert trust.cache_for_run(mine) == mine  # trusted: itself
    cache = tmp_path / "cache"
    (cache / "git").mkdir(parents=True)
    os.chmod(cache / "git", 0o775)  # a folder in it the group can write: the cache as a whole is not used
    os.chown(cache / "git", 0, NOBODY)
    private = trust.cache_for_run(cache)
    st = private.stat()
    assert private != cache and st.st_uid == os.geteuid() and stat.S_IMODE(st.st_mode) == 0o700
    assert trust.cache_for_run(cache) == private and trust.cache_for_run(private) == private  # one per run
    (warning,) = shared_folder_warnings(private)
    assert warning.startswith(f"cache folder {cache}: git is writable by other users (mode 775)"), warning
    assert f"private, empty cache instead, {private}" in warning
    assert trust.cache_for_recipe(private) == private  # no group declared
    trust.declare_shared_group(str(NOBODY))  # the recipe's [cache] shared-group: that group may write git/
    try:
        assert trust.cache_for_recipe(private) == cache
    finally:
        trust.declare_shared_group("")
        trust.forget_folders()
