"""One owner for what the tool removes, replaces or fills (core/owned.py, issue 47): every path-taking option is
driven through it, one row each, at a folder holding a user's notes (exit 2 naming the folder, the notes as they
were). The destructive cases (`/`, a mount point, a home folder, a folder above the current one) run in a
throwaway root: a private mount namespace whose `/` is a tmpfs (the tool's own files bound read-only, `chroot`
into it), so that even a bug cannot delete the machine's files."""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.spine_helpers import Cli, component, isolated_env, recipe_data
from toolchain.core.owned import OWNED_MARKER, CorruptRecord, claim, refusal, remove_ours, safe_name, safe_relpath
from toolchain.errors import UsageError

ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="needs root for a private mount namespace")
TOOLCHAIN = Path(sys.executable).with_name("toolchain")


def notes(folder: Path) -> dict[str, bytes]:
    """A user's folder of notes: what must survive."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "notes.txt").write_text("my notes\n")
    (folder / "build-1").mkdir(exist_ok=True)   # (names the tool uses inside its own folders)
    (folder / "build-1" / "keep.txt").write_text("mine too\n")
    (folder / "blobs").mkdir(exist_ok=True)
    return snapshot(folder)


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): (p.read_bytes() if p.is_file() else b"<dir>")
            for p in sorted(folder.rglob("*"))}


# ---- the table: every path-taking option, at a folder of notes ---------------------------------------------

def _argv_rows(tmp: Path) -> list[tuple[str, list[str]]]:
    """(the option, the command line) with the option at `tmp / "notes"`; every other input is made to get
    that far (the folder is checked before anything is built or read)."""
    d = str(tmp / "notes")
    cache = str(tmp / "cache")
    lock = str(tmp / "no-such" / "stack.lock.toml")
    return [
        ("build --out", ["build", "--recipe", "r", "--out", d, "--cache-dir", cache]),
        ("image --oci-dir", ["image", "--lock", lock, "--tag", "localhost/x:1", "--oci-dir", d, "--cache-dir", cache]),
        ("verify-repro --work-dir", ["verify-repro", "--recipe", "r", "--work-dir", d, "--cache-dir", cache]),
        ("verify-repro --image --work-dir", ["verify-repro", "--lock", lock, "--image", "localhost/x:1",
                                             "--work-dir", d, "--cache-dir", cache]),
        ("bisect --out", ["bisect", "--good-lock", lock, "--bad-lock", lock, "--test-cmd", "true", "--out", d,
                          "--cache-dir", cache]),
        ("smoke --venv", ["smoke", "--lock", str(tmp / "out"), "--venv", d, "--skip-device-check",
                          "--serve-cmd", "true"]),
        ("smoke --out", ["smoke", "--lock", str(tmp / "out"), "--out", d, "--skip-device-check",
                         "--serve-cmd", "true"]),
        ("lock --out", ["lock", "--image", "localhost/none:1", "--out", d, "--cache-dir", cache]),
    ]


ROWS = [name for name, _ in _argv_rows(Path("/x"))]


@pytest.fixture(scope="module")
def built_lock(tmp_path_factory, tiny_repo) -> Path:
    """A real lock (the tiny package, built on this host) for the rows that need one to get to their folder."""
    root = tmp_path_factory.mktemp("owned-lock")
    (root / "recipes").mkdir()
    import tomlkit

    (root / "recipes" / "r.toml").write_text(tomlkit.dumps(recipe_data({"tiny": component(tiny_repo)})))
    r = Cli(root, isolated_env(root))("build", "--recipe", "r", "--out", root / "out", "--cache-dir", root / "cache",
                                      "--json")
    assert r.returncode == 0, str(r)
    return root


@pytest.mark.parametrize("row", ROWS)
def test_every_path_option_refuses_a_folder_it_did_not_make_and_touches_nothing(row, tmp_path, built_lock):
    shutil.copytree(built_lock / "recipes", tmp_path / "recipes")
    shutil.copytree(built_lock / "out", tmp_path / "out", symlinks=True)
    before = notes(tmp_path / "notes")
    argv = dict(_argv_rows(tmp_path))[row]
    r = Cli(tmp_path, isolated_env(tmp_path))(*argv, "--json")
    assert r.returncode == 2, str(r)
    error = r.json()["error"]
    assert str(tmp_path / "notes") in error and "was not written by toolchain" in error, error
    assert snapshot(tmp_path / "notes") == before  # nothing removed, nothing added


def test_the_table_names_every_option_that_takes_a_folder_to_fill_or_replace():
    """A new path option must be added to the table (and routed through core/owned.py)."""
    from toolchain.cli import build_parser

    folders = set()
    parser = build_parser()
    subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, sub in subs.choices.items():
        for action in sub._actions:
            if action.metavar == "DIR" or action.dest in ("venv", "oci_dir", "work_dir", "out"):
                folders.add(f"{name} {action.option_strings[-1]}")
    # the folders the tool only reads, or whose own entries it manages inside (the cache: core/trust.py)
    covered = {row.replace(" --image", "") for row in ROWS}
    missing = {f for f in folders if f not in covered
               and not f.endswith(("--recipes-dir", "--patches-dir", "--cache-dir"))}
    assert not missing, f"path options not driven through core/owned.py by this table: {sorted(missing)}"


# ---- the rule itself, in a tmp folder --------------------------------------------------------------------------

def test_a_folder_the_tool_made_is_replaced_and_an_empty_one_removed_only_while_empty(tmp_path):
    made = claim(tmp_path / "made", "--x")
    (made / "old.txt").write_text("old\n")
    assert refusal(made) == ""
    assert remove_ours(made, "--x") and not made.exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    assert remove_ours(empty, "--x") and not empty.exists()
    assert not remove_ours(tmp_path / "absent", "--x")


def test_a_link_to_a_folder_of_the_tools_is_refused_not_followed(tmp_path):
    made = claim(tmp_path / "made", "--x")
    (tmp_path / "link").symlink_to(made)
    with pytest.raises(UsageError, match="symbolic link"):
        remove_ours(tmp_path / "link", "--x")
    assert (made / OWNED_MARKER).is_file()


@ROOT_ONLY
def test_a_marker_of_another_user_or_in_a_folder_of_another_user_is_not_the_tools(tmp_path):
    theirs = tmp_path / "theirs"
    claim(theirs, "--x")
    (theirs / "work.txt").write_text("theirs\n")
    os.chown(theirs / OWNED_MARKER, 65534, 65534)
    assert "not a file of yours" in refusal(theirs)
    os.chown(theirs / OWNED_MARKER, 0, 0)
    os.chown(theirs, 65534, 65534)  # their folder, our marker copied in (a hard link, a copy by root)
    assert "not a file of yours" in refusal(theirs)
    with pytest.raises(UsageError):
        remove_ours(theirs, "--x")
    assert (theirs / "work.txt").read_text() == "theirs\n"


@pytest.mark.parametrize("bad", ["../../victim.txt", "/etc/passwd", "a/b.whl", "..", ".", "", "x\0y", 7, None])
def test_a_record_naming_a_path_is_corrupt(bad):
    with pytest.raises(CorruptRecord):
        safe_name(bad, "the marker")


def test_a_relative_record_path_stays_below_its_folder():
    assert safe_relpath("wheels/a-1.whl") == "wheels/a-1.whl"
    for bad in ("../x", "a/../../x", "/abs", "a//b", "a/./b", "a\0b"):
        with pytest.raises(CorruptRecord):
            safe_relpath(bad)


# ---- the destructive cases, in a throwaway root ----------------------------------------------------------------

def _binds() -> list[str]:
    """What the tool needs to run, bound read-only into the throwaway root: the interpreter, the venv, the
    worktree, the system's libraries and /dev (not recursively: its own mounts stay out)."""
    needed = {"/usr", "/etc", "/dev", sys.base_prefix, sys.prefix, str(Path(__file__).resolve().parents[1])}
    for top in ("/bin", "/lib", "/lib64", "/sbin"):
        if os.path.isdir(top) and not os.path.islink(top):
            needed.add(top)
    return sorted(needed)


def in_throwaway_root(script: str, tmp_path: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run `script` (sh) as root chrooted in a private mount namespace whose `/` is a fresh tmpfs: the tool's
    files are read-only binds in it, so `rm -rf /` there removes only the tmpfs's own files."""
    root = tmp_path / "throwaway-root"
    root.mkdir()
    links = [top for top in ("/bin", "/lib", "/lib64", "/sbin") if os.path.islink(top)]
    setup = [f"mount -t tmpfs -o size=64m none {shlex.quote(str(root))}"]
    for src in _binds():
        dst = shlex.quote(str(root) + src)
        setup += [f"mkdir -p {dst}", f"mount --bind {shlex.quote(src)} {dst}",
                  f"mount -o remount,bind,ro {dst}"]
    setup += [f"ln -s {shlex.quote(os.readlink(top))} {shlex.quote(str(root) + top)}" for top in links]
    setup += [f"mkdir -p {root}/proc {root}/tmp {root}/home/u/work", f"mount -t proc proc {root}/proc",
              f"chroot {root} /bin/sh -c {shlex.quote(script)}"]
    return subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-ec", "\n".join(setup)],
                          capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def _tool(*args: str, cwd: str = "/home/u/work", home: str = "/home/u") -> str:
    """The tool's command line inside the throwaway root, with its exit code and error printed after it."""
    argv = " ".join(shlex.quote(a) for a in (str(TOOLCHAIN), *args, "--json"))
    return (f"cd {cwd} && HOME={home} TOOLCHAIN_CACHE_DIR=/tmp/cache {argv} > /tmp/out.json 2>/tmp/err.txt "
            f"|| echo \"exit=$?\"; cat /tmp/out.json")


@ROOT_ONLY
@pytest.mark.parametrize(("option", "folder", "why", "prepare"), [
    ("--oci-dir", "/", "it is the root folder", ""),
    ("--oci-dir", "/mnt/m", "it is a mount point", "mkdir -p /mnt/m && mount -t tmpfs none /mnt/m"),
    ("--oci-dir", "/home/u", "it is a home folder", f"touch /home/u/{OWNED_MARKER}"),
    ("--oci-dir", "/home", "it is the current folder or holds it", f"touch /home/{OWNED_MARKER}"),
    ("--work-dir", "/", "it is the root folder", ""),
    ("--work-dir", "/home/u/work", "it is the current folder or holds it", f"touch /home/u/work/{OWNED_MARKER}"),
])
def test_never_the_root_a_mount_point_a_home_or_above_the_current_folder(option, folder, why, prepare, tmp_path):
    """Even a folder marked as the tool's (or empty, the mount point) is never removed when it is one of these."""
    command = ["image", "--lock", "/nolock/stack.lock.toml", "--tag", "localhost/x:1", "--oci-dir", folder] \
        if option == "--oci-dir" else ["verify-repro", "--recipe", "demo", "--work-dir", folder]
    script = "\n".join([
        "set -e", "echo precious > /precious.txt", "mkdir -p /home/u/work && echo notes > /home/u/notes.txt",
        *([prepare] if prepare else []),
        _tool(*command),
        "test -f /precious.txt && test -f /home/u/notes.txt && ls /usr/bin >/dev/null && echo INTACT"])
    r = in_throwaway_root(script, tmp_path)
    assert r.returncode == 0, r.stderr
    assert "exit=2" in r.stdout and '"exit_code": 2' in r.stdout, r.stdout + r.stderr
    assert why in r.stdout and folder in r.stdout, r.stdout
    assert r.stdout.rstrip().endswith("INTACT"), r.stdout


@ROOT_ONLY
def test_oci_dir_over_a_users_notes_as_root_deletes_nothing(tmp_path):
    """The reported bug: `image --oci-dir` over a folder of notes deleted them (and `/` deleted /etc): now exit 2,
    in a throwaway root even if it were not."""
    script = "\n".join([
        "set -e", "mkdir -p /home/u/notes /home/u/work && echo mine > /home/u/notes/todo.txt",
        _tool("image", "--lock", "/nolock/stack.lock.toml", "--tag", "localhost/x:1", "--oci-dir", "/home/u/notes"),
        "cat /home/u/notes/todo.txt"])
    r = in_throwaway_root(script, tmp_path)
    assert r.returncode == 0, r.stderr
    assert "exit=2" in r.stdout and "/home/u/notes" in r.stdout and "was not written by toolchain" in r.stdout
    assert r.stdout.rstrip().endswith("mine"), r.stdout


_KEY = "ab" + "1" * 62  # a name in the link cache's shape: 64 hex digits, in the fan-out folder of its first two
_PLANTED = (f"/links/ab/{_KEY}", f"/links/stat/{'cd' * 32}", f"/wheels/ab/{_KEY}/entry.json")


def _plant(root: str) -> list[str]:
    """Files in the cache's shape under `root`, 40 days old, that the tool did not make (another store's)."""
    out = []
    for path in _PLANTED:
        path = root.rstrip("/") + path
        out += [f"mkdir -p {shlex.quote(os.path.dirname(path))}", f"echo theirs > {shlex.quote(path)}",
                f"touch -d '40 days ago' {shlex.quote(path)}"]
    return out


@ROOT_ONLY
@pytest.mark.parametrize(("folder", "why", "prepare"), [
    ("/", "it is the root folder", ""),  # (nothing else at / : the trust rule alone would take it)
    ("/home/u", "it is a home folder", ""),
    ("/srv/c", "is not trusted (notes.txt is not a folder)", "echo mine > /srv/c/notes.txt"),
    ("/srv/c", "is not trusted (links is writable by other users", "chmod 777 /srv/c/links"),
    ("/home/u/work/c", "(a link to /): it is the root folder", "ln -s / /home/u/work/c"),
    ("/home/u/work/c", "(a link to /home/u): it is a home folder", "ln -s /home/u /home/u/work/c"),
])
def test_cache_prune_of_the_root_a_home_or_an_untrusted_folder_prunes_nothing(folder, why, prepare, tmp_path):
    """`cache prune --cache-dir /` (a home folder, a folder the trust rule refuses, a link to / or to a home
    folder): exit 2 naming the folder and why, nothing pruned there, not even what has the link cache's shape
    (its stale links and hashes), and no private cache pruned in its place as if it were the one named."""
    link = prepare.startswith("ln -s ")  # (made before the cache's shape is planted through it)
    script = "\n".join([
        "set -e", "mkdir -p /home/u/work /srv/c", *([prepare] if link else []), *_plant(folder),
        *([prepare] if prepare and not link else []),
        _tool("cache", "prune", "--cache-dir", folder, "--older-than", "30d", "--keep-size", "1"),
        *(f"test -f {shlex.quote(folder.rstrip('/') + p)}" for p in _PLANTED),
        "ls /usr/bin >/dev/null && echo INTACT"])
    r = in_throwaway_root(script, tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "exit=2" in r.stdout and '"exit_code": 2' in r.stdout, r.stdout + r.stderr
    assert why in r.stdout and f"cache folder {folder}" in r.stdout and "nothing was" in r.stdout, r.stdout
    assert "pruned" in r.stdout.split("nothing was", 1)[1], r.stdout
    assert r.stdout.rstrip().endswith("INTACT"), r.stdout


@ROOT_ONLY
@pytest.mark.parametrize(("command", "how", "link"), [
    (["build", "--recipe", "demo", "--cache-dir", "/"], "", ""),
    (["build", "--recipe", "demo", "--cache-dir", "/home/u"], "", ""),
    (["build", "--recipe", "demo"], "TOOLCHAIN_CACHE_DIR=/", ""),  # (the default, from the environment)
    (["cache", "ls", "--cache-dir", "/"], "", ""),
    (["plan", "--recipe", "demo", "--cache-dir", "/"], "", ""),
    # a link to the root or to a home folder, given or in the environment, as the folder itself
    (["build", "--recipe", "demo", "--cache-dir", "/home/u/work/c"], "", "/"),
    (["build", "--recipe", "demo", "--cache-dir", "/home/u/work/c"], "", "/home/u"),
    (["build", "--recipe", "demo"], "TOOLCHAIN_CACHE_DIR=/home/u/work/c", "/"),
    (["plan", "--recipe", "demo"], "TOOLCHAIN_CACHE_DIR=/home/u/work/c", "/home/u"),
    (["build", "--recipe", "demo", "--cache-dir", "c"], "", "../../.."),  # (relative, from the current folder)
    (["cache", "ls", "--cache-dir", "/home/u/work/c"], "", "/home/u"),
    (["cache", "ls"], "TOOLCHAIN_CACHE_DIR=/home/u/work/c", "/"),
])
def test_no_command_uses_the_root_or_a_home_folder_as_its_cache(command, how, link, tmp_path):
    """`build --cache-dir /` made the cache's folders (git/, trees/, wheels/, work/...) in / and read what lay
    there in their shape: every command now refuses the root or a home folder as its cache (exit 2, naming it),
    before anything is made there; a link to one of them (--cache-dir or $TOOLCHAIN_CACHE_DIR) too, named with
    where it leads."""
    tool = _tool(*command)
    if how:
        tool = tool.replace("TOOLCHAIN_CACHE_DIR=/tmp/cache", how)
    script = "\n".join([
        "set -e", "mkdir -p /home/u/work", *([f"ln -s {link} /home/u/work/c"] if link else []),
        "ls -A / | sort > /tmp/before.txt", "ls -A /home/u | sort > /tmp/before-home.txt",
        tool, "ls -A / | sort | diff /tmp/before.txt - && ls -A /home/u | sort | diff /tmp/before-home.txt - && echo INTACT"])
    r = in_throwaway_root(script, tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "exit=2" in r.stdout and '"exit_code": 2' in r.stdout, r.stdout + r.stderr
    assert "never a cache" in r.stdout and ("it is the root folder" in r.stdout or "it is a home folder" in r.stdout)
    if link:
        target = "/" if link.startswith("..") else link
        assert f"c (a link to {target}): it is" in r.stdout, r.stdout
    assert r.stdout.rstrip().endswith("INTACT"), r.stdout


def test_a_cache_folder_given_as_a_link_to_an_ordinary_folder_is_used(tmp_path):
    """A link to a folder of the user's (given, or in $TOOLCHAIN_CACHE_DIR) is a cache like the folder: it is
    listed and pruned, and what a command writes goes into the folder it leads to."""
    real = tmp_path / "disk" / "cache"
    real.mkdir(parents=True)
    link = tmp_path / "c"
    link.symlink_to(real)
    cli = Cli(tmp_path, isolated_env(tmp_path / "home"))
    for args, env in ((("--cache-dir", link), {}), ((), {"TOOLCHAIN_CACHE_DIR": str(link)})):
        r = cli("cache", "ls", *args, "--json", env=env)
        assert r.returncode == 0 and r.json()["entries"] == [], str(r)
        r = cli("cache", "prune", *args, "--older-than", "30d", "--json", env=env)
        assert r.returncode == 0, str(r)
    r = cli("build", "--recipe", "demo", "--cache-dir", link, "--out", tmp_path / "out", "--json")
    assert r.returncode == 0, str(r)
    assert link.is_symlink() and (real / "wheels").is_dir(), "the build's wheels are not in the folder linked to"


def test_cache_ls_of_an_untrusted_folder_says_so_and_lists_no_private_cache_in_its_place(tmp_path):
    """`cache ls` of a cache the trust rule refuses: exit 2 naming it and why (it listed the run's private, empty
    cache in its place: "0 entries" of a folder in /tmp), and one of the user's own lists what it holds."""
    cache = tmp_path / "cache"
    (cache / "wheels").mkdir(parents=True)
    (cache / "notes.txt").write_text("mine\n")
    cli = Cli(tmp_path, isolated_env(tmp_path / "home"))
    r = cli("cache", "ls", "--cache-dir", cache, "--json")
    assert r.returncode == 2, str(r)
    assert r.json()["error"] == f"cache folder {cache} is not trusted (notes.txt is not a folder): nothing was listed"
    (cache / "notes.txt").unlink()
    r = cli("cache", "ls", "--cache-dir", cache, "--json")
    assert r.returncode == 0 and r.json()["where"] == str(cache) and r.json()["entries"] == [], str(r)
