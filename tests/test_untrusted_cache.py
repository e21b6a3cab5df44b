"""Issue 47: a cache whose root another user can write (or that is a link to another user's folder) is untrusted
as a whole for the run, and "untrusted" covers everything under it: its git mirrors, prepared source trees,
compiler cache and work folder are not read, run or written; the run builds from a private, fresh folder of its
own (`core.trust.cache_for_run`), removed at exit, and says so once. The other user is a real one (`setpriv
--reuid 65534`: the suite runs as root); the demo builds are real (git, ccache, pip)."""

from __future__ import annotations

import json
import os
import re
import signal
import stat
import subprocess
import tempfile
import time
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
    from toolchain.core import group, trust

    monkeypatch.delenv(group.SHARED_GROUP_ENV, raising=False)
    group.declare_shared_group("")
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
    group.declare_shared_group(str(NOBODY))  # the recipe's [cache] shared-group: that group may write git/
    try:
        assert trust.cache_for_recipe(private) == cache
    finally:
        group.declare_shared_group("")
        trust.forget_folders()


def test_private_caches_killed_runs_left_are_removed_by_the_next_run_and_by_prune(cli: Cli, tmp_path: Path):
    """A real build with an untrusted cache, killed with SIGKILL once its private cache exists (no atexit runs),
    leaves that folder. The next run that needs a private cache removes it, and so does `cache prune` (after its
    --dry-run named it); what is not the tool's own is left: a folder of that name without the tool's marker,
    one of another uid (holding a copy of a dead run's owner record), one whose owner still runs."""
    from toolchain.core.proc.owner import owner_token
    from toolchain.core.trust import STAND_IN_OWNER, STAND_IN_PREFIX

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    os.chmod(tmp, 0o1777)
    env = {"TMPDIR": str(tmp)}
    cache = Path(cli.env["TOOLCHAIN_CACHE_DIR"])
    cache.mkdir()
    os.chmod(cache, 0o777)  # others can write it: every run uses a private cache instead

    def stand_ins() -> set[Path]:
        return {p.parent for p in tmp.glob(f"{STAND_IN_PREFIX}*/{STAND_IN_OWNER}")}

    def killed_run() -> Path:
        before = stand_ins()
        proc = cli.start("build", "--recipe", "demo", "--out", tmp_path / "out", env=env)
        try:
            deadline = time.monotonic() + 120
            while not (stand_ins() - before) and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.02)
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate(timeout=60)
        assert proc.returncode == -signal.SIGKILL, "the run ended before it was killed"
        (left,) = stand_ins() - before
        assert (left / ".toolchain-owned").is_file()  # (killed: nothing removed it)
        return left

    first = killed_run()
    token = (first / STAND_IN_OWNER).read_text()
    not_ours = tmp / f"{STAND_IN_PREFIX}notes"
    not_ours.mkdir()
    (not_ours / STAND_IN_OWNER).write_text(token)  # (a look-alike: no marker of the tool's)
    theirs = tmp / f"{STAND_IN_PREFIX}theirs"
    as_nobody("mkdir", "-m", "700", theirs)
    for name in (STAND_IN_OWNER, ".toolchain-owned"):
        (tmp_path / name).write_bytes((first / name).read_bytes())
        as_nobody("cp", tmp_path / name, theirs / name)
    live = tmp / f"{STAND_IN_PREFIX}live"
    live.mkdir(mode=0o700)
    (live / ".toolchain-owned").write_text("made by toolchain\n")
    (live / STAND_IN_OWNER).write_text(owner_token() + "\n")  # (this test's process: it still runs)
    others = {p: snapshot(p) for p in (not_ours, live)}

    r = cli("plan", "--recipe", "demo", env=env)  # the next run that needs a private cache
    assert r.returncode == 0, str(r)
    assert not first.exists()
    assert stand_ins() == {not_ours, theirs, live}  # (the plan's own private cache removed at its exit)

    second = killed_run()
    prune = ("cache", "prune", "--older-than", "3650d", "--cache-dir", tmp_path / "mine", "--json")
    r = cli(*prune, "--dry-run", env=env)  # (a cache of the user's own: no private one, prune removes them)
    assert r.returncode == 0, str(r)
    assert json.loads(r.stdout)["private-caches-removed"] == [str(second)] and second.exists()
    r = cli(*prune, env=env)
    assert r.returncode == 0, str(r)
    assert json.loads(r.stdout)["private-caches-removed"] == [str(second)], r.stdout
    assert stand_ins() == {not_ours, theirs, live}
    assert {p: snapshot(p) for p in (not_ours, live)} == others
    assert os.lstat(theirs).st_uid == NOBODY and sorted(os.listdir(theirs)) == sorted([STAND_IN_OWNER, ".toolchain-owned"])
