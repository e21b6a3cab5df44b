"""The output folder against files others can write (issue 47): its marker names wheels, never paths; its logs
are never written through a link nor waited on as a FIFO; its lock lives in it, and a wait for it ends; a wheel
another uid replaced is not kept. Real builds, a real other uid (`setpriv --reuid 65534`), real FIFOs and real
processes holding the lock. And the small ones: `--help` into a full device, `cache prune` of an entry in the
wrong fan-out folder, a warning's bracketed text, a disk-full naming uv's folder, the demo's dead `.tmp-*`."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

from tests.spine_helpers import STANDIN_SETVARS, component, recipe_data
from toolchain.pipeline.outdir import LOCK_WAIT_ENV, OUT_LOCK, OUT_MARKER

NOBODY = 65534
AS_NOBODY = ["setpriv", "--reuid", str(NOBODY), "--regid", str(NOBODY), "--clear-groups"]
ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another uid")


def open_to_all(folder: Path) -> None:
    """`folder` writable by every user, and searchable on the way to it (as a shared machine's folder can be)."""
    os.chmod(folder, 0o777)
    for p in folder.parents:
        os.chmod(p, p.stat().st_mode | 0o001)


def as_nobody(*argv: str) -> None:
    subprocess.run([*AS_NOBODY, *argv], check=True, timeout=60)


@pytest.fixture
def built(ws, tiny_repo):
    """A workspace whose `out` holds one finished build of the tiny recipe (stand-in setvars: a setvars.log)."""
    ws.recipe("r", recipe_data({"tiny": component(tiny_repo)}, setvars=str(STANDIN_SETVARS)))
    r = ws.build("r")
    assert r.returncode == 0, str(r)
    return ws


# ---- names, not paths ---------------------------------------------------------------------------------------

def test_a_marker_naming_a_path_is_a_corrupt_record_and_nothing_is_unlinked(built):
    victim = built.root / "victim.txt"
    victim.write_text("keep me\n")
    marker = built.root / "out" / OUT_MARKER
    doc = json.loads(marker.read_text())
    doc["wheels"] = [*doc["wheels"], "../../victim.txt", str(victim)]
    marker.write_text(json.dumps(doc))
    r = built.build("r")
    assert r.returncode == 2, str(r)
    assert "not a file name" in r.json()["error"] and "../../victim.txt" in r.json()["error"], r.json()
    assert victim.read_text() == "keep me\n"


@ROOT_ONLY
def test_a_marker_another_uid_put_in_an_out_folder_others_can_write_is_refused(built):
    """The reported attack: another uid replaces the marker (a folder others can write) with one naming
    `../../victim.txt`; root's next build unlinked that file. Now its marker is not the tool's: exit 2."""
    out = built.root / "out"
    victim = built.root / "victim.txt"
    victim.write_text("keep me\n")
    doc = json.loads((out / OUT_MARKER).read_text())
    doc["wheels"] = ["../../victim.txt"]
    open_to_all(out)
    planted = built.root / "planted.json"
    planted.write_text(json.dumps(doc))
    os.chmod(planted, 0o644)
    as_nobody("sh", "-c", f'cp "{planted}" "{out}/.m" && mv -f "{out}/.m" "{out / OUT_MARKER}"')
    assert (out / OUT_MARKER).stat().st_uid == NOBODY
    r = built.build("r")
    assert r.returncode == 2, str(r)
    assert str(out) in r.json()["error"] and "not a file of yours" in r.json()["error"], r.json()
    assert victim.read_text() == "keep me\n"


# ---- logs: never through a link, never waiting on a FIFO --------------------------------------------------

@ROOT_ONLY
def test_logs_another_uid_turned_into_links_are_replaced_not_written_through(built):
    out = built.root / "out"
    logs = sorted((out / "logs").glob("*.log"))
    assert logs, "the build wrote no logs"
    targets = built.root / "targets"
    targets.mkdir()
    open_to_all(targets)
    open_to_all(out / "logs")
    for log in logs:
        (targets / log.name).write_text("not yours\n")
        as_nobody("ln", "-sfn", str(targets / log.name), str(log))
    assert all(log.is_symlink() for log in logs)
    r = built.build("r", cache=built.root / "cache-2")  # a fresh cache: setvars, git and the build run again
    assert r.returncode == 0, str(r)
    assert all((targets / log.name).read_text() == "not yours\n" for log in logs)
    written = [log for log in logs if not log.is_symlink()]
    assert any(log.name == "setvars.log" for log in written), [str(x) for x in written]
    for log in written:
        st = log.lstat()
        assert stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid() and log.read_text()
    assert not (out / "logs").stat().st_mode & 0o002  # the tool's folder: no longer writable by every user


def test_a_fifo_at_the_setvars_log_does_not_hang_the_build(built):
    fifo = built.root / "out" / "logs" / "setvars.log"
    fifo.unlink()
    os.mkfifo(fifo)
    r = built.cli("build", "--recipe", "r", "--out", built.root / "out", "--cache-dir", built.root / "cache-2",
                  "--json", timeout=240)
    assert r.returncode == 0, str(r)
    assert stat.S_ISREG(fifo.lstat().st_mode) and "setvars" in fifo.read_text()


WARN_TO_LOG = """
import sys
from pathlib import Path
from toolchain.bisect.builder import LoggedWarnings
LoggedWarnings(Path(sys.argv[1]), quiet=True).warn("libfoo.so.1: no closure to check it against")
"""


@pytest.mark.parametrize("planted", [pytest.param("link", marks=ROOT_ONLY), "fifo"])
def test_a_bisect_steps_warnings_log_is_never_written_through_a_link_nor_waited_on(tmp_path, planted):
    """A deferred bisect step writes its warnings to `<bisect out>/<key>/logs/warnings.log`: a link another uid
    put there (a folder others can write) or a FIFO is replaced by a file of the user's, never written through
    nor waited on (a process of its own, bounded)."""
    logs = tmp_path / "bisect" / "0123456789ab" / "logs"
    logs.mkdir(parents=True)
    log, victim = logs / "warnings.log", tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    if planted == "link":
        open_to_all(logs)
        os.chmod(victim, 0o666)
        as_nobody("ln", "-s", str(victim), str(log))
        assert log.is_symlink() and log.lstat().st_uid == NOBODY
    else:
        os.mkfifo(log)
    r = subprocess.run([sys.executable, "-c", WARN_TO_LOG, str(log)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    st = log.lstat()
    assert stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid(), planted
    assert log.read_text() == "warning: libfoo.so.1: no closure to check it against\n"
    assert victim.read_text() == "keep me\n"


@ROOT_ONLY
def test_an_out_wheel_another_uid_replaced_with_a_0666_copy_is_replaced(built):
    out = built.root / "out"
    wheel = next((out / "wheels").glob("*.whl"))
    open_to_all(out / "wheels")
    as_nobody("sh", "-c", f'cp "{wheel}" "{wheel}.x" && chmod 666 "{wheel}.x" && mv -f "{wheel}.x" "{wheel}"')
    assert wheel.stat().st_uid == NOBODY
    r = built.build("r")
    assert r.returncode == 0, str(r)
    assert "is not a file of yours that only you may write" in r.stderr and wheel.name in r.stderr, r.stderr
    st = wheel.stat()
    assert st.st_uid == os.geteuid() and stat.S_IMODE(st.st_mode) == 0o644


# ---- the build record: read back only when it is the user's own ---------------------------------------------

READ_BACK = """
import json, sys
from pathlib import Path
from toolchain.lock import read_lock
from toolchain.lock.buildrecord import record_warnings
lock = read_lock(Path(sys.argv[1]))
print(json.dumps({"recipe-path": lock.recipe_path, "warnings": record_warnings()}))
"""


def read_back(ws, lock: Path) -> dict:
    """What `read_lock` makes of `lock` and its record, in a process of its own (a FIFO must not hang it)."""
    r = subprocess.run([sys.executable, "-c", READ_BACK, str(lock)], env=ws.env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.mark.parametrize("how", [pytest.param("replaced by another uid", marks=ROOT_ONLY),
                                 pytest.param("written by another uid", marks=ROOT_ONLY),
                                 "a fifo", "a symbolic link"])
def test_a_build_record_that_is_not_yours_alone_is_ignored_with_one_warning(built, how):
    """The build record names this machine's paths a rebuild uses (the recipe file among them). One another uid
    replaced or wrote (an out folder, or a record, others can write), a FIFO (a plain open would hang) or a
    symbolic link (to a record of the user's own, even) is not read: one warning names it and the fix, and the
    build writes the user's own again (through no link)."""
    out = built.root / "out"
    record, lock = out / "build-record.toml", out / "stack.lock.toml"
    text = record.read_text()
    assert read_back(built, lock) == {"recipe-path": str(built.recipes / "r.toml"), "warnings": []}
    planted = built.root / "planted.toml"
    planted.write_text(text.replace(str(built.recipes / "r.toml"), "/planted/recipes/r.toml"))
    assert planted.read_text() != text
    os.chmod(planted, 0o644)
    if how == "replaced by another uid":
        open_to_all(out)
        as_nobody("sh", "-c", f'cp "{planted}" "{out}/.r" && mv -f "{out}/.r" "{record}"')
        assert record.stat().st_uid == NOBODY
    elif how == "written by another uid":
        os.chmod(record, 0o666)
        for p in out.parents:
            os.chmod(p, p.stat().st_mode | 0o001)
        as_nobody("sh", "-c", f'cat "{planted}" > "{record}"')
        assert record.read_text() == planted.read_text() and record.stat().st_uid == os.geteuid()
    elif how == "a fifo":
        record.unlink()
        os.mkfifo(record)
    else:
        record.unlink()
        record.symlink_to(planted)
    found = read_back(built, lock)
    assert found["recipe-path"] == "recipes/r.toml", found  # (the lock's own: nothing of the record)
    (warning,) = found["warnings"]
    assert f"{record} is not read" in warning and f"rm {record}" in warning, warning
    r = built.build("r")
    assert r.returncode == 0, str(r)
    flat = " ".join(r.stderr.split())
    assert flat.count(f"{record} is not read") == 1 and "build again" in flat, r.stderr
    st = record.lstat()
    assert stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o022
    assert planted.read_text() != text and "/planted/" in planted.read_text()  # (no link written through)
    assert read_back(built, lock) == {"recipe-path": str(built.recipes / "r.toml"), "warnings": []}


RULE = """
import json, os, sys
from pathlib import Path
from toolchain.core.trust import problem
from toolchain.lock import read_lock
from toolchain.lock.buildrecord import record_warnings
lock = Path(sys.argv[1])
why = problem(os.stat(lock.with_name("build-record.toml")), shared=False, invoker=True)
read = os.path.isabs(read_lock(lock).recipe_path)  # (the record's absolute path, else the lock's own)
print(json.dumps({"problem": why, "read": read, "warnings": record_warnings()}))
"""


@ROOT_ONLY
@pytest.mark.parametrize("sudo", ["", str(NOBODY)])
@pytest.mark.parametrize("case", ["yours", "group-writable", "uid 65534's"])
def test_the_build_record_is_read_by_the_trust_rule_of_the_out_folders_files(built, case, sudo):
    """`lock.buildrecord.read_record` asks core/trust's `problem` (with `invoker`: a file of sudo's caller is theirs), no
    rule of its own: on a real file of the user's, one group-writable, and one uid 65534 wrote (setpriv), with and
    without sudo's caller being uid 65534, the record is read back exactly when `problem` finds nothing in it."""
    out = built.root / "out"
    record, lock = out / "build-record.toml", out / "stack.lock.toml"
    if case == "group-writable":
        os.chmod(record, 0o664)
    elif case == "uid 65534's":
        open_to_all(out)
        as_nobody("sh", "-c", f'cat "{record}" > "{out}/.r" && mv -f "{out}/.r" "{record}"')
        assert record.stat().st_uid == NOBODY
    env = {**built.env, "SUDO_UID": sudo, "SUDO_GID": sudo}
    r = subprocess.run([sys.executable, "-c", RULE, str(lock)], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    found = json.loads(r.stdout)
    assert found["read"] == (found["problem"] == "") == (not found["warnings"]), found  # one rule: never two
    assert found["read"] == (case == "yours" or (case == "uid 65534's" and sudo != "")), found


# ---- the out lock: in the out folder, and a wait that ends ------------------------------------------------

HOLD = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDONLY)
fcntl.flock(fd, fcntl.LOCK_EX if sys.argv[3] == "ex" else fcntl.LOCK_SH)
print("held", flush=True)
time.sleep(float(sys.argv[2]))
"""


def hold_lock(path: Path, seconds: float, *prefix: str, exclusive: bool = False) -> subprocess.Popen[str]:
    """A real process (as `prefix` says: another uid) holding a flock on `path`, opened read-only (shared, as a
    reader can; `exclusive`: as a build holds it)."""
    proc = subprocess.Popen([*prefix, sys.executable, "-c", HOLD, str(path), str(seconds),
                             "ex" if exclusive else "sh"], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_builds_with_different_caches_into_one_out_take_turns(built):
    """The lock is the out folder's own: a build with another --cache-dir waits for the one holding it."""
    holder = hold_lock(built.root / "out" / OUT_LOCK, 3)
    try:
        started = time.monotonic()
        r = built.cli("build", "--recipe", "r", "--out", built.root / "out", "--cache-dir", built.root / "cache-2")
        waited = time.monotonic() - started
    finally:
        holder.kill()
        holder.wait()
    assert r.returncode == 0, str(r)
    assert f"waiting for another build into {built.root / 'out'}" in r.stderr, r.stderr
    assert waited >= 2.0


@ROOT_ONLY
def test_another_user_holding_a_lock_of_the_cache_ends_the_wait_at_once(built):
    """Every wait ends: a user who can read the cache's lock files (the folders are 755, the files 644) holds
    each one (a real process of uid 65534, read-only opens); the next build that needs them (its wheel rebuilt:
    the wheel cache's key lock, the source tree's lock) exits 2 at once naming the pid and uid, and waits for
    none of them. A holder of the user's own is waited for as before (the out lock's tests)."""
    cache = built.root / "cache"
    locks = sorted(cache.rglob("*.lock"))
    assert any(p.parent.name == "locks" for p in locks) and any(p.parent.name == "trees" for p in locks), locks
    for p in built.root.parents:
        os.chmod(p, p.stat().st_mode | 0o001)
    holders = [hold_lock(p, 600, *AS_NOBODY) for p in locks]
    try:
        for entry in (cache / "wheels").glob("??"):
            subprocess.run(["rm", "-rf", str(entry)], check=True)
        r = built.build("r")  # (a hang here is the CLI's timeout: a failure)
    finally:
        for holder in holders:
            holder.kill()
            holder.wait()
    assert r.returncode == 2, str(r)
    error = r.json()["error"]
    assert "held by" in error and f"(uid {NOBODY})" in error and "does not wait" in error, error
    assert any(f"pid {h.pid} (uid {NOBODY})" in error for h in holders), error


def test_a_wait_for_the_out_lock_ends_after_its_bound_naming_the_holder(built):
    holder = hold_lock(built.root / "out" / OUT_LOCK, 60)
    try:
        r = built.build("r", env={LOCK_WAIT_ENV: "1"})
    finally:
        holder.kill()
        holder.wait()
    assert r.returncode == 1, str(r)
    error = r.json()["error"]
    assert f"pid {holder.pid} (uid {os.geteuid()})" in error and "more than 1s" in error, error


@ROOT_ONLY
def test_another_user_holding_the_out_lock_ends_the_wait_at_once(built):
    """A user who can only read the lock file can flock it: the build does not wait for them."""
    lock = built.root / "out" / OUT_LOCK
    os.chmod(built.root / "out", 0o755)
    for p in lock.parents:
        os.chmod(p, p.stat().st_mode | 0o001)
    holder = hold_lock(lock, 60, *AS_NOBODY)
    try:
        started = time.monotonic()
        r = built.build("r")
        took = time.monotonic() - started
    finally:
        holder.kill()
        holder.wait()
    assert r.returncode == 2, str(r)
    assert f"(uid {NOBODY})" in r.json()["error"] and "another user" in r.json()["error"], r.json()
    assert took < 30


# ---- the small ones -------------------------------------------------------------------------------------------

def test_help_into_a_full_device_is_an_output_that_could_not_be_written():
    for args in (["--help"], ["--version"], ["build", "--help"]):
        with open("/dev/full", "w") as full:
            r = subprocess.run([sys.executable, "-m", "toolchain", *args], stdout=full, stderr=subprocess.PIPE,
                               text=True, timeout=60)
        assert r.returncode == 1, (args, r.stderr)
        assert "could not be written to stdout" in r.stderr, r.stderr
    ok = subprocess.run([sys.executable, "-m", "toolchain", "--help"], capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0 and "usage:" in ok.stdout


def test_cache_prune_removes_an_entry_found_in_the_wrong_fan_out_folder(ws, tiny_repo):
    ws.recipe("r", recipe_data({"tiny": component(tiny_repo)}))
    assert ws.build("r").returncode == 0
    wheels = ws.cache / "wheels"
    entry = next(p for fan in wheels.iterdir() if len(fan.name) == 2 for p in fan.iterdir())
    wrong = wheels / ("zz" if entry.parent.name != "zz" else "yy")
    wrong.mkdir()
    entry.rename(wrong / entry.name)
    time.sleep(1.2)
    r = ws.cli("cache", "prune", "--older-than", "1s", "--cache-dir", ws.cache, "--json")
    assert r.returncode == 0, str(r)
    assert [e["key"] for e in r.json()["removed"]] == [entry.name], r.json()
    assert not (wrong / entry.name).exists()  # reported removed: removed


def test_a_warning_prints_bracketed_text_as_it_is():
    code = ("from toolchain.console import UI; "
            "UI().warn('declare it shared with one group ([cache] shared-group = or $X) [bold]x[/bold]')")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "([cache] shared-group = or $X) [bold]x[/bold]" in r.stderr, r.stderr


def test_a_disk_full_during_resolution_names_uvs_folder_not_the_interpreter():
    from toolchain.errors import TransientError
    from toolchain.resolve.failure import raise_classified

    uv_said = ("Using CPython 3.11.7 interpreter at: `/usr/bin/python3.11`\n"
               "error: Failed to download `tiny==1.0`\n"
               "  Caused by: failed to write to file `/home/u/.cache/uv/.tmpAbC/tiny-1.0.whl`\n"
               "  Caused by: No space left on device (os error 28)\n")
    with pytest.raises(TransientError) as err:
        raise_classified(uv_said, what="resolving", log="resolve.log", disk_fallback="/home/u/.cache/uv")
    assert "/home/u/.cache/uv/.tmpAbC" in str(err.value) and "/usr/bin/python3.11" not in str(err.value)
    only_python = ("error: Failed to query Python interpreter at `/usr/bin/python3.11`\n"
                   "  Caused by: No space left on device (os error 28)\n")
    with pytest.raises(TransientError) as err:
        raise_classified(only_python, what="resolving", log="resolve.log", disk_fallback="/home/u/.cache/uv")
    assert "/home/u/.cache/uv" in str(err.value) and "/usr/bin/python3.11" not in str(err.value)


KILLED_WHILE_MAKING = """
import os, signal, sys
from pathlib import Path
from toolchain.sources import demo
real = demo.make_repo
def make_then_die(bare, commits, **kw):
    real(bare, commits, **kw)
    os.kill(os.getpid(), signal.SIGKILL)   # killed while the demo makes its repositories
demo.make_repo = make_then_die
demo.materialize(Path(sys.argv[1]))
"""


def test_a_kill_while_the_demo_makes_its_repositories_leaves_nothing_the_next_run_keeps(tmp_path):
    from toolchain.sources import demo

    cache = tmp_path / "cache"
    killed = subprocess.run([sys.executable, "-c", KILLED_WHILE_MAKING, str(cache)], timeout=120)
    assert killed.returncode == -9
    parent = cache / "demo-repos"
    stale = [p for p in parent.iterdir() if p.name.startswith(".tmp-")]
    assert stale, "the killed run left no .tmp- folder to clean"
    other = parent / ".tmp-0123456789abcdef-live"  # another version's run, alive: holding its lock
    other.mkdir()
    (parent / "0123456789abcdef.lock").touch()
    holder = hold_lock(parent / "0123456789abcdef.lock", 60, exclusive=True)
    try:
        final = demo.materialize(cache)
    finally:
        holder.kill()
        holder.wait()
    assert (final / ".complete").is_file()
    assert not any(p.exists() for p in stale)
    assert other.is_dir()  # a live run's folder is not removed


# ---- bisect: its state file and its end folders -----------------------------------------------------------------

@ROOT_ONLY
def test_a_bisect_state_file_another_uid_wrote_is_not_read(tmp_path):
    """The state names the folders a resumed bisect writes and removes in: one of another uid's is refused."""
    from toolchain.bisect.state import StateFile
    from toolchain.errors import UsageError

    out = tmp_path / "bisect-out"
    out.mkdir()
    open_to_all(out)
    state = out / "bisect-state.json"
    doc = json.dumps({"state-version": 1, "context": {"out": "/etc"}})
    as_nobody("sh", "-c", f"printf '%s' '{doc}' > '{state}'")
    assert state.stat().st_uid == NOBODY
    with pytest.raises(UsageError, match="uid 65534"):
        StateFile(state).read()


def test_a_bisect_end_folder_the_tool_did_not_make_is_not_replaced(built, tmp_path):
    from toolchain.bisect.report import copy_lock_dir
    from toolchain.errors import UsageError

    mine = tmp_path / "ends" / "good"
    mine.mkdir(parents=True)
    (mine / "notes.txt").write_text("mine\n")
    with pytest.raises(UsageError, match="was not written by toolchain"):
        copy_lock_dir(built.root / "out" / "stack.lock.toml", mine)
    assert (mine / "notes.txt").read_text() == "mine\n"
    made = copy_lock_dir(built.root / "out" / "stack.lock.toml", tmp_path / "ends" / "bad")
    again = copy_lock_dir(built.root / "out" / "stack.lock.toml", made)  # its own: replaced as a whole
    assert (again / "stack.lock.toml").is_file() and list((again / "wheels").glob("*.whl"))


def test_a_full_build_and_a_component_build_with_different_caches_into_one_out_end_whole(ws, make_repo):
    """The reported race: a full build and a `--component` build into one --out with two --cache-dir ran at
    once and left a lock naming 1 wheel while wheels/ held 3. Each pair of real builds racing here now ends with
    the lock naming exactly the wheels in wheels/ (the folder's own lock serializes them)."""
    comps = {}
    for name in ("a", "b", "c"):
        repo = make_repo(name, "tiny")
        repo.commit(f"{name}: its own distribution", {"pyproject.toml": (repo.path / "pyproject.toml").read_text()
                                                       .replace('name = "tiny"', f'name = "tiny-{name}"')})
        comps[name] = component(repo, dist=f"tiny-{name}")
    ws.recipe("r", recipe_data(comps))
    out, one, two = ws.root / "out", ws.root / "cache-1", ws.root / "cache-2"
    assert ws.build("r", cache=one).returncode == 0  # both caches warm: the builds race over the folder, not compiles
    assert ws.cli("build", "--recipe", "r", "--component", "a", "--out", ws.root / "out-2", "--cache-dir", two,
                  "--no-resolve").returncode == 0
    for _ in range(4):
        full = ws.cli.start("build", "--recipe", "r", "--out", out, "--cache-dir", one, "--no-resolve")
        part = ws.cli.start("build", "--recipe", "r", "--component", "a", "--out", out, "--cache-dir", two,
                            "--no-resolve")
        assert ws.cli.finish(full).returncode == 0 and ws.cli.finish(part).returncode == 0
        named = {c["wheel"]["file"] for c in tomllib.loads((out / "stack.lock.toml").read_text())["components"]}
        assert named == {p.name for p in (out / "wheels").glob("*.whl")}
