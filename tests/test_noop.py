"""The warm no-op's record (toolchain/core/noop.py), in process: what a run looked at is watched, what it did
that a replay could not do keeps it from being recorded. (The journey with the installed tool is
tests/journeys/test_noop_record.py.)"""

from __future__ import annotations

import importlib
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from toolchain.core import noop


@pytest.fixture
def argv(tmp_path, monkeypatch) -> list[str]:
    monkeypatch.delenv(noop.FULL_RUN, raising=False)
    return ["build", "--recipe", "x", "--cache-dir", str(tmp_path / "cache")]


def _settled(*paths: Path) -> None:
    """Files older than the racy window (as any file a run reads some time after it was written)."""
    old = time.time_ns() - 10 * noop.RACY_NS
    for p in paths:
        os.utime(p, ns=(old, old))


def _record(argv: list[str], work) -> noop.Recorder:
    with noop.recording(argv) as rec:
        work()
    rec.keep(0)
    return rec


def test_a_recorded_run_is_answered_until_what_it_read_or_looked_for_changes(argv, tmp_path, capfd):
    data, missing, folder = tmp_path / "data.txt", tmp_path / "shadow.toml", tmp_path / "listed"
    data.write_text("one")
    folder.mkdir()
    (folder / "a").write_text("")
    _settled(data, folder / "a", folder)

    def work() -> None:
        print("read", data.read_text())
        sys.stderr.write("to stderr\n")
        assert not missing.exists()
        print(sorted(os.listdir(folder)))

    rec = _record(argv, work)
    assert rec.spoiled is None
    (record,) = (tmp_path / "cache" / "noop").iterdir()
    assert record.stat().st_mode & 0o777 == 0o600
    capfd.readouterr()
    assert noop.answer(argv) == 0
    said = capfd.readouterr()
    assert said.out == "read one\n['a']\n" and said.err == "to stderr\n"
    assert noop.answer([*argv, "--verbose"]) is None  # other arguments: no record

    missing.write_text("")  # a file looked for and not found appears
    assert noop.answer(argv) is None
    missing.unlink()
    assert noop.answer(argv) == 0  # as recorded again
    (folder / "b").write_text("")  # the listed folder gains an entry
    assert noop.answer(argv) is None
    (folder / "b").unlink()
    data.write_text("two")  # same size, another mtime
    assert noop.answer(argv) is None
    os.environ["NOOP_TEST_SETTING"] = "1"
    try:
        assert noop.answer(argv) is None  # another environment: another key
    finally:
        del os.environ["NOOP_TEST_SETTING"]


@pytest.mark.parametrize("doing", ["write", "process", "socket", "mkdir", "remove", "exit 1"])
def test_a_run_that_changes_anything_or_fails_is_not_recorded(argv, tmp_path, doing):
    target = tmp_path / "victim"
    target.write_text("")

    def work() -> None:
        if doing == "write":
            (tmp_path / "new").write_text("x")
        elif doing == "process":
            subprocess.run(["true"], check=True)
        elif doing == "socket":
            with socket.socket() as s, pytest.raises(ConnectionRefusedError):
                s.connect(("127.0.0.1", 9))
        elif doing == "mkdir":
            (tmp_path / "d").mkdir()
        elif doing == "remove":
            target.unlink()

    with noop.recording(argv) as rec:
        work()
    assert not rec.keep(1 if doing == "exit 1" else 0)
    assert rec.spoiled
    assert noop.answer(argv) is None


def test_byte_code_written_while_importing_does_not_keep_a_run_from_being_recorded(argv, tmp_path, monkeypatch):
    package = tmp_path / "fresh_pkg_for_noop"
    package.mkdir()
    (package / "__init__.py").write_text("VALUE = 1\n")
    _settled(package / "__init__.py", package, tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    monkeypatch.delenv("PYTHONPYCACHEPREFIX", raising=False)
    monkeypatch.setattr(sys, "pycache_prefix", None)

    def work() -> None:
        importlib.import_module("fresh_pkg_for_noop")  # (compiled now: __pycache__/ and its .pyc written)

    rec = _record(argv, work)
    assert (package / "__pycache__").is_dir()
    assert rec.spoiled is None
    sys.modules.pop("fresh_pkg_for_noop", None)


def test_reads_in_other_threads_are_watched(argv, tmp_path):
    data = tmp_path / "by-thread.txt"
    data.write_text("x")
    _settled(data)

    def work() -> None:
        t = threading.Thread(target=data.read_text)
        t.start()
        t.join()

    rec = _record(argv, work)
    assert (str(data), "read") in rec.seen
    data.write_text("yy")
    assert noop.answer(argv) is None


def test_a_file_changed_as_the_run_started_is_not_trusted(argv, tmp_path):
    data = tmp_path / "fresh.txt"
    data.write_text("x")  # just now: a change in the same clock tick would keep its stat
    rec = _record(argv, data.read_text)
    assert rec.spoiled and "as the run started" in rec.spoiled
    assert noop.answer(argv) is None


def test_a_whole_second_mtime_is_trusted_only_seconds_later(argv, tmp_path):
    """A file system that keeps whole seconds (FAT, some network ones): a change within the same second keeps
    the stat, so a file written a second ago is not trusted yet; one with a finer mtime is."""
    coarse, fine = tmp_path / "coarse.txt", tmp_path / "fine.txt"
    coarse.write_text("x")
    fine.write_text("x")
    second_ago = (time.time_ns() // 1_000_000_000 - 1) * 1_000_000_000
    os.utime(coarse, ns=(second_ago, second_ago))
    os.utime(fine, ns=(second_ago + 123_456_789, second_ago + 123_456_789))
    rec = _record(argv, coarse.read_text)
    assert rec.spoiled and "as the run started" in rec.spoiled
    rec = _record(argv, fine.read_text)
    assert rec.spoiled is None
    assert noop.answer(argv) == 0


def test_live_readings_are_not_watched_but_writes_inside_still_count(argv, tmp_path):
    live = tmp_path / "meminfo"
    live.write_text("1")
    _settled(live)

    def work() -> None:
        with noop.live_readings():
            live.read_text()

    _record(argv, work)
    live.write_text("22")
    assert noop.answer(argv) == 0  # a figure that changes between runs does not stop the answer

    def writes() -> None:
        with noop.live_readings():
            (tmp_path / "w").write_text("x")

    with noop.recording(argv) as rec:
        writes()
    assert rec.spoiled


def test_full_run_and_other_commands_are_never_recorded(argv, monkeypatch):
    monkeypatch.setenv(noop.FULL_RUN, "1")
    with noop.recording(argv) as rec:
        pass
    assert not rec.keep(0)
    monkeypatch.delenv(noop.FULL_RUN)
    with noop.recording(["plan", *argv[1:]]) as rec:
        pass
    assert not rec.keep(0)


def test_at_most_keep_records_are_kept_the_newest(tmp_path):
    folder = tmp_path / "noop"
    folder.mkdir()
    for i in range(7):
        p = folder / f"{i}.json"
        p.write_text("{}")
        os.utime(p, ns=(i * 10**9, i * 10**9))
    noop._prune(str(folder), keep=4)
    assert sorted(p.name for p in folder.iterdir()) == ["3.json", "4.json", "5.json", "6.json"]
