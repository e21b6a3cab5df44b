"""Issue 39: one trust rule for what is read from the cache and the out folder (core/trust.py), concurrent builds
into one --out, and output errors. Each case compares a build after the change with a cold build (a new cache
and a new --out, same recipe, same box): the same exit code and the same wheels in the same lock. The other
user is a real one (`setpriv --reuid 65534`: the suite runs as root), the FIFOs real `mkfifo`s, the concurrent
builds real processes."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.journeys.test_warm_checks import NOBODY, build, built_then_warm, my_recipe, sources

pytestmark = [pytest.mark.slow, pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another uid")]

AS_NOBODY = ["setpriv", "--reuid", str(NOBODY), "--regid", str(NOBODY), "--clear-groups"]


def wheels_of(out: Path) -> dict[str, str]:
    """The lock's components → their wheel's sha256 (what a cold build must give too)."""
    lock = tomllib.loads((out / "stack.lock.toml").read_text())
    return {c["name"]: c["wheel"]["sha256"] for c in lock["components"]}


def cold(user, tmp_path: Path) -> dict[str, str]:
    """A cold build (a new cache, a new --out) of the same recipe: its components' wheels."""
    fresh = user.at(user.cwd)
    fresh.env = {**user.env, "TOOLCHAIN_CACHE_DIR": str(tmp_path / "cold-cache")}
    out = tmp_path / "cold-out"
    r = build(fresh, out)
    assert set(sources(r).values()) == {"built"}, str(r)
    return wheels_of(out)


@contextlib.contextmanager
def reachable_by_others(path: Path) -> Iterator[None]:
    """Every folder above `path` searchable by other users (pytest's tmp folders are root's 0700) while the block
    runs; then as they were."""
    saved = []
    for p in reversed(path.parents):
        mode = p.stat().st_mode
        if not mode & 0o001:
            saved.append((p, mode))
            os.chmod(p, mode | 0o001)
    try:
        yield
    finally:
        for p, mode in saved:
            os.chmod(p, mode)


def as_nobody_write(dest: Path, data: bytes) -> None:
    """uid 65534 writes `data` to `dest` as a new file renamed over the old one (what another user of a folder
    everyone can write can do): the new file is that user's."""
    tmp = dest.with_name(f".{dest.name}.planted")
    subprocess.run([*AS_NOBODY, "tee", str(tmp)], input=data, stdout=subprocess.DEVNULL, check=True, timeout=60)
    subprocess.run([*AS_NOBODY, "mv", "-f", str(tmp), str(dest)], check=True, timeout=60)
    assert dest.stat().st_uid == NOBODY


def warmed(user, tmp_path: Path) -> tuple[Path, Path, dict[str, str], dict]:
    """A cold build and a warm one of the user's demo recipe: the cache, the out folder, its wheels and its lock."""
    home = tmp_path / "home"
    cache, out = home / "cache", home / "out"
    my_recipe(user)
    built_then_warm(user, out)
    return cache, out, wheels_of(out), tomllib.loads((out / "stack.lock.toml").read_text())


def open_to_all(cache: Path) -> None:
    subprocess.run(["chmod", "-R", "o+w", str(cache)], check=True, timeout=60)


def test_another_uid_swapping_a_wheel_and_its_entry_in_a_cache_others_can_write_changes_nothing(user, tmp_path):
    cache, out, real, _ = warmed(user, tmp_path)
    open_to_all(cache)
    meta_file = next(e for e in cache.glob("wheels/*/*/entry.json") if "demo_engine" in e.read_text())
    meta = json.loads(meta_file.read_text())
    wheel = meta_file.parent / meta["wheel"]
    planted = wheel.read_bytes() + b"planted by uid 65534"
    import hashlib

    meta.update(sha256=hashlib.sha256(planted).hexdigest(), size=len(planted), describe="PLANTED-DESCRIBE")
    with reachable_by_others(cache):
        as_nobody_write(wheel, planted)
        as_nobody_write(meta_file, json.dumps(meta).encode())
    for fresh_out in (out, tmp_path / "new-out"):  # the same out folder, and a new one
        r = build(user, fresh_out)
        assert r.returncode == 0, str(r)
        assert f"cache folder {cache}: it is writable by other users" in r.stderr, r.stderr
        assert "PLANTED-DESCRIBE" not in r.stdout + r.stderr + (fresh_out / "stack.lock.toml").read_text()
        assert wheels_of(fresh_out) == real
        assert sorted(p.name for p in (fresh_out / "wheels").glob("*.whl")) == sorted(
            c["wheel"]["file"] for c in tomllib.loads((fresh_out / "stack.lock.toml").read_text())["components"])
        assert meta["sha256"] not in {hashlib.sha256(p.read_bytes()).hexdigest()
                                      for p in (fresh_out / "wheels").glob("*.whl")}
    assert real == cold(user, tmp_path)
    assert meta_file.stat().st_uid == NOBODY  # nothing written in the untrusted cache: built in a private one


def test_native_and_closure_records_another_uid_planted_are_ignored(user, tmp_path):
    cache, _, real, real_lock = warmed(user, tmp_path)
    open_to_all(cache)
    natives = sorted(cache.glob("native/*.json"))
    closures = sorted(cache.glob("resolve/closures/*.json"))
    assert natives and closures, sorted(str(p) for p in cache.rglob("*.json"))
    with reachable_by_others(cache):
        for record in natives:
            data = json.loads(record.read_text())
            if "objects" in data:
                for obj in data["objects"]:
                    obj["needed"] = [*obj.get("needed", []), "libinvented-by-65534.so.7"]
                data["objects"] = data["objects"] or [{"path": "x/libplanted.so", "needed": ["libinvented-by-65534.so.7"]}]
            if "libraries" in data:
                data["libraries"] = ["planted/libinvented-by-65534.so.7"]
            as_nobody_write(record, json.dumps(data).encode())
        for record in closures:
            text = record.read_text()
            data = json.loads(text)
            for dep in data["dependencies"]:
                dep["url"] = f"https://evil.example/{dep.get('file', 'x.whl')}"
            as_nobody_write(record, json.dumps(data).encode())
    new_out = tmp_path / "new-out"  # a new out folder: its closure and audit are read from the cache's records
    r = build(user, new_out)
    assert r.returncode == 0, str(r)
    lock_text = (new_out / "stack.lock.toml").read_text()
    assert "evil.example" not in lock_text and "libinvented" not in lock_text + r.stdout + r.stderr, lock_text
    assert wheels_of(new_out) == real == cold(user, tmp_path)
    lock = tomllib.loads(lock_text)
    assert lock.get("dependencies") == real_lock.get("dependencies")
    assert lock.get("native") == real_lock.get("native")


def test_a_fifo_at_a_native_record_or_at_the_out_marker_is_no_hang(user, tmp_path):
    cache, out, real, real_lock = warmed(user, tmp_path)
    record = sorted(p for p in cache.glob("native/*.json") if not p.name.startswith("files-"))[0]
    record.unlink()
    os.mkfifo(record)
    memos = list(cache.glob("memo/native-audit-*.json"))
    assert memos  # the whole audit is remembered too: without it the build reads the per-wheel records
    for memo in memos:
        memo.unlink()
    new_out = tmp_path / "new-out"
    r = user("build", "--recipe", "mine", "--out", new_out, "--json", timeout=180)
    assert r.returncode == 0, str(r)
    assert wheels_of(new_out) == real
    assert tomllib.loads((new_out / "stack.lock.toml").read_text()).get("native") == real_lock.get("native")
    assert record.is_file() and not record.is_fifo()  # audited again and written in its place

    marker = out / ".toolchain-out"
    marker.unlink()
    os.mkfifo(marker)
    r = user("build", "--recipe", "mine", "--out", out, "--json", timeout=180)
    assert r.returncode == 0, str(r)
    assert wheels_of(out) == real == cold(user, tmp_path)
    assert marker.is_file() and json.loads(marker.read_text())["wheels"]


@pytest.mark.parametrize("round_", range(3))
def test_a_full_and_a_component_build_into_one_out_at_once_end_with_one_whole_lock(user, tmp_path, round_):
    home = tmp_path / "home"
    out = home / "out"
    my_recipe(user)
    if round_:  # a warm cache too: the builds are quick and overlap more
        build(user, home / "warm-up")
    procs = [user.start("build", "--recipe", "mine", "--out", out, "--json"),
             user.start("build", "--recipe", "mine", "--out", out, "--json", "--component", "engine")]
    results = [user.finish(p, timeout=600) for p in procs]
    assert all(r.returncode == 0 for r in results), "\n".join(map(str, results))
    lock = tomllib.loads((out / "stack.lock.toml").read_text())
    named = sorted(c["wheel"]["file"] for c in lock["components"])
    assert sorted(p.name for p in (out / "wheels").glob("*.whl")) == named
    assert len(named) in (1, 3)
    marker = json.loads((out / ".toolchain-out").read_text())
    assert sorted(marker["wheels"]) == named
    pylock = (out / "pylock.toml").read_text()
    assert all(name in pylock for name in named)


def test_toolchain_lock_takes_turns_with_a_build_into_the_locks_folder(user, tmp_path):
    """`toolchain lock` rewrites the lock in a build's output folder: while a build holds that folder (its lock in
    the folder), `toolchain lock` says it waits and writes nothing; once the build is done it relocks."""
    import time

    from toolchain.console import UI
    from toolchain.pipeline.outdir import holding_out_dir

    my_recipe(user)
    out = tmp_path / "home" / "out"
    assert build(user, out).returncode == 0
    before = (out / "stack.lock.toml").read_bytes()
    with holding_out_dir(out, UI(quiet=True)):  # as a build into `out` holds it
        proc = user.start("lock", "--lock", out / "stack.lock.toml")
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline and not _waits_on(proc.pid, out):
            time.sleep(0.1)
        time.sleep(3)  # (long enough for a warm relock to have finished, were it not waiting)
        assert proc.poll() is None, "toolchain lock did not wait for the build into its folder"
        assert (out / "stack.lock.toml").read_bytes() == before
    r = user.finish(proc, timeout=300)
    assert r.returncode == 0, str(r)
    assert f"waiting for another build into {out}" in r.stdout + r.stderr, str(r)
    assert tomllib.loads((out / "stack.lock.toml").read_text())["components"]


def _waits_on(pid: int, out: Path) -> bool:
    """Whether process `pid` has the output folder's lock file open (it waits on it)."""
    from toolchain.pipeline.outdir import OUT_LOCK

    try:
        return any(os.readlink(f"/proc/{pid}/fd/{fd}") == str(out / OUT_LOCK) for fd in os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return False


def run_with_stdout(user, out: Path, stdout: int | None, extra: tuple[str, ...]) -> subprocess.CompletedProcess:
    argv = [str(user.installed.toolchain), "build", "--recipe", "mine", "--out", str(out), *extra]
    return subprocess.run(argv, cwd=user.cwd, env=user.env, stdout=stdout, stderr=subprocess.PIPE, text=True,
                          timeout=300, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("extra", [(), ("--json",)])
def test_output_errors_are_output_errors(user, tmp_path, extra):
    my_recipe(user)
    out = tmp_path / "home" / "out"
    for fresh in (True, False):  # a cold build, then a warm one
        if fresh:
            shutil.rmtree(out, ignore_errors=True)
        with open("/dev/full", "w") as full:
            r = run_with_stdout(user, out, full.fileno(), extra)
        assert r.returncode == 1, (extra, r.stderr)
        assert "Traceback" not in r.stderr and "no space left on the device" not in r.stderr, r.stderr
        assert "--cache-dir" not in r.stderr and "output could not be written to stdout" in r.stderr, r.stderr
        assert (out / "stack.lock.toml").is_file()
    lock = (out / "stack.lock.toml").read_text()

    # a broken pipe: the reader is gone before the tool writes (a real pipe whose read end is closed)
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        r = run_with_stdout(user, out, write_end, extra)
    finally:
        os.close(write_end)
    assert r.returncode == 141 and "Traceback" not in r.stderr and "ERROR" not in r.stderr, (extra, r.stderr)

    # stdout closed (`>&-`)
    argv = [str(user.installed.toolchain), "build", "--recipe", "mine", "--out", str(out), *extra]
    r = subprocess.run(["bash", "-c", 'exec "$@" >&-', "bash", *argv], cwd=user.cwd, env=user.env,
                       stderr=subprocess.PIPE, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert r.returncode == 0 and "Traceback" not in r.stderr, (extra, r.stderr)

    # stderr a broken pipe: nothing can be said there, the exit code says it (a --json warm build writes
    # nothing to stderr: nothing is lost, its JSON is whole on stdout)
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        r2 = subprocess.run(argv, cwd=user.cwd, env=user.env, stdout=subprocess.PIPE, stderr=write_end, text=True,
                            timeout=300, stdin=subprocess.DEVNULL)
    finally:
        os.close(write_end)
    if extra:
        assert r2.returncode == 0 and json.loads(r2.stdout)["ok"] is True, r2.stdout
    else:
        assert r2.returncode == 141 and "Traceback" not in r2.stdout, r2.stdout
    assert (out / "stack.lock.toml").read_text() == lock


def test_a_cache_written_under_umask_002_is_served_warm(user, tmp_path):
    """What the tool writes into its cache is 0644 whatever the umask: a group-writable entry of its own would
    otherwise be refused by the rule and rebuilt at every build."""
    my_recipe(user)
    out = tmp_path / "home" / "out"
    argv = [str(user.installed.toolchain), "build", "--recipe", "mine", "--out", str(out), "--json"]
    for expected in ("built", "local-cache"):
        r = subprocess.run(["bash", "-c", 'umask 002 && exec "$@"', "bash", *argv], cwd=user.cwd, env=user.env,
                           capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
        assert r.returncode == 0, r.stderr
        assert {c["source"] for c in json.loads(r.stdout)["components"]} == {expected}, r.stderr


def test_a_cache_declared_shared_with_a_group_serves_what_that_group_can_write(user, tmp_path):
    cache, out, real, _ = warmed(user, tmp_path)
    my_recipe(user, '[cache]\nshared-group = "nogroup"\n')
    build(user, out)  # (the recipe changed: its lock is written again)
    subprocess.run(["chgrp", "-R", "nogroup", str(cache)], check=True, timeout=60)
    subprocess.run(["chmod", "-R", "g+w", str(cache)], check=True, timeout=60)
    r = build(user, out)
    assert set(sources(r).values()) == {"local-cache"}, str(r)
    assert "cache folder" not in r.stderr, r.stderr
    assert wheels_of(out) == real
    open_to_all(cache)  # writable by others too: nothing there is trusted, all rebuilt, the same wheels
    r = build(user, out)
    assert set(sources(r).values()) == {"built"}, str(r)
    assert f"cache folder {cache}: it is writable by other users" in r.stderr, r.stderr
    assert wheels_of(out) == real
