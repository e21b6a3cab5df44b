"""Atomic writes leave files as any other write would: readable by all (0644), never the private mode of
the temporary file they were written through; a failed write leaves nothing behind."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.spine_helpers import component, recipe_data
from toolchain.core.fs import atomic_copy, atomic_write_bytes, atomic_write_text


def mode(path: Path) -> str:
    return oct(path.stat().st_mode & 0o777)


def test_atomic_writes_and_copies_are_0644_and_leave_no_temporary(tmp_path: Path):
    src = tmp_path / "src.whl"
    src.write_bytes(b"wheel")
    os.chmod(src, 0o600)  # the source's own mode does not travel
    atomic_copy(src, tmp_path / "out" / "a.whl")
    atomic_write_text(tmp_path / "out" / "b.toml", "x = 1\n")
    atomic_write_bytes(tmp_path / "out" / "c.sh", b"#!/bin/sh\n", mode=0o755)
    assert [mode(tmp_path / "out" / n) for n in ("a.whl", "b.toml", "c.sh")] == ["0o644", "0o644", "0o755"]
    assert (tmp_path / "out" / "a.whl").read_bytes() == b"wheel"
    with pytest.raises(FileNotFoundError):
        atomic_copy(tmp_path / "missing", tmp_path / "out" / "d.whl")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["a.whl", "b.toml", "c.sh"]


def test_built_wheels_in_dist_are_0644_like_the_cache(ws, make_repo):
    """`toolchain build`: the wheels under <out>/wheels are copies of the cache's, with the cache's mode,
    on the first build and on a warm rebuild into a fresh directory."""
    tiny = make_repo("tiny", "tiny")
    ws.recipe("r", recipe_data({"tiny": component(tiny)}))
    for out in ("dist", "dist-again"):
        r = ws.build("r", out)
        assert r.returncode == 0, str(r)
        wheels = list((ws.root / out / "wheels").glob("*.whl"))
        assert wheels and {mode(w) for w in wheels} == {"0o644"}, out
        assert mode(ws.root / out / "stack.lock.toml") == "0o644"
    cached = list((ws.cache / "wheels").rglob("*.whl"))
    assert cached
    assert {mode(w) for w in cached} == {"0o644"}


def test_lock_held_says_whether_another_process_holds_the_lock_and_writes_nothing(tmp_path):
    import subprocess
    import sys

    from toolchain.core.fs import file_lock, lock_held

    path = tmp_path / "locks" / "out.lock"
    assert not lock_held(path) and not path.parent.exists()  # never taken: nothing made to ask
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from pathlib import Path; from toolchain.core.fs import file_lock\n"
        "with file_lock(Path(sys.argv[1])):\n    print('held', flush=True); sys.stdin.readline()"), str(path)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        assert lock_held(path)
    finally:
        holder.communicate("\n", timeout=30)
    assert not lock_held(path)
    with file_lock(path):  # (a hold through another open file of this process counts too: flock is per open file)
        assert lock_held(path)
