"""A warm no-op answered from its record (toolchain/core/noop.py), as a user meets it with the tool installed
from its wheel: the answer is the full run's to the byte, and every change a user makes between two builds
(a wheel deleted from the out folder, the lock edited, another environment or option, an evicted cache
entry, a recipe of their own that now shadows the shipped one, an upgraded tool) gets a full run again.

Whether a run was answered from the record is told by a wrapper around the entry point
(tests/support/noop_runs.py)."""

from __future__ import annotations

import json
import os
import shutil
import stat

import pytest

from tests.spine_helpers import Result
from tests.support.noop_runs import Runs, same

pytestmark = pytest.mark.slow

def test_a_warm_noop_is_answered_from_its_record_until_anything_it_read_changes(user, tmp_path):
    home = tmp_path / "home"
    runs = Runs(user.installed.python, user.cwd, user.env, home)
    out = home / "out"
    args = ("build", "--recipe", "demo", "--out", out, "--json")
    records = home / "cache" / "noop"

    cold, which = runs(*args)
    assert cold.returncode == 0, cold
    assert which == "full" and not records.exists()  # it wrote: no record
    first, which = runs(*args)  # the logs now say "cache hit": written once more
    assert which == "full" and not records.exists(), first.stderr[-2000:]
    warm, which = runs(*args)
    assert which == "full" and records.is_dir() and len(list(records.iterdir())) == 1, warm.stderr[-2000:]
    (record,) = records.iterdir()
    assert stat.S_IMODE(record.stat().st_mode) == 0o600
    answered, which = runs(*args)
    assert which == "record"
    same(answered, warm)
    same(answered, runs.truth(*args))
    assert {c["source"] for c in answered.json()["components"]} == {"local-cache"}

    def full_then_record(*extra: object, env: dict[str, str] | None = None) -> Result:
        """After a change: a full run, its answer the truth; the next run is answered from a new record."""
        first, which = runs(*args, *extra, env=env)
        assert which == "full", first
        runs.until_recorded(*args, *extra, env=env, tries=3)
        return first

    # a wheel deleted from the out folder: restored from the cache
    wheel = next((out / "wheels").iterdir())
    wheel.unlink()
    r = full_then_record()
    assert r.returncode == 0 and wheel.is_file()

    # the lock edited by hand (the same size: the inode and mtime tell it apart)
    lock = out / "stack.lock.toml"
    text = lock.read_text()
    lock.write_text(text.replace("# ", "#-", 1) if "# " in text else text + "#\n")
    full_then_record()

    # another environment, another option: other records
    full_then_record(env={"SOME_SETTING": "on"})
    full_then_record("--verbose")

    # a cache entry evicted: rebuilt (it writes), then recorded again
    for entry in (home / "cache" / "wheels").glob("*/*/entry.json"):
        if "demo_engine" in entry.read_text():
            shutil.rmtree(entry.parent)
    r = full_then_record()
    engine = next(c for c in r.json()["components"] if c["name"] == "engine")
    assert engine["source"] == "built"

    # a recipe of the user's own, ./recipes/demo.toml, now shadows the shipped demo
    mine = user.cwd / "recipes" / "demo.toml"
    mine.parent.mkdir()
    source = (user.installed.package / "shipped" / "recipes" / "demo.toml").read_text()
    mine.write_text(source.replace('description = "', 'description = "mine: ', 1))
    r, which = runs(*args)
    assert which == "full"
    same(r, runs.truth(*args))
    assert (r.returncode, r.stdout) != (answered.returncode, answered.stdout), r

    shutil.rmtree(mine.parent)  # gone again: all it read is as recorded before, and the answer is that one's
    r, which = runs(*args)
    assert which == "record"
    same(r, runs.truth(*args))

    # the tool upgraded in place (one of its modules changed)
    module = user.installed.package / "console.py"
    os.utime(module, ns=(module.stat().st_atime_ns, module.stat().st_mtime_ns + 1_000_000_000))
    r, which = runs(*args)
    assert which == "full" and r.returncode == 0


def test_only_a_read_only_successful_build_is_recorded_and_secrets_stay_out(user, tmp_path):
    home = tmp_path / "home"
    runs = Runs(user.installed.python, user.cwd, user.env, home)
    records = home / "cache" / "noop"
    secret = "s3cr3t-value-7f1c"
    env = {"MY_API_TOKEN": secret}

    bad = ("build", "--recipe", "no-such-recipe", "--json")
    for _ in range(2):  # exit 2 each time, never recorded
        r, which = runs(*bad, env=env)
        assert r.returncode == 2 and which == "full"
    assert not records.exists()

    args = ("build", "--recipe", "demo", "--out", home / "out", "--json")
    for _ in range(3):  # cold (writes), warm (rewrites the logs as cache hits), warm (read only: recorded)
        runs(*args, env=env)
    r, which = runs(*args, env=env)
    assert which == "record" and r.returncode == 0
    for record in records.iterdir():
        assert secret not in record.read_text()
        json.loads(record.read_text())  # one JSON document

    # other commands are never answered from a record
    for _ in range(2):
        r, which = runs("plan", "--recipe", "demo", "--json", env=env)
        assert which == "full" and r.returncode == 0
    # TOOLCHAIN_FULL_RUN: a full run, and it keeps no record
    before = sorted(records.iterdir())
    r, which = runs(*args, "--verbose", env={**env, "TOOLCHAIN_FULL_RUN": "1"})
    assert which == "full" and sorted(records.iterdir()) == before
