"""The cache's one trust rule (core/trust.py, issue 39) on real files: a file another uid wrote (a real one,
`setpriv --reuid 65534`), one others can write, a FIFO (a real `mkfifo`: read without blocking), a link; the
shared group (`$TOOLCHAIN_CACHE_SHARED_GROUP`) and the one warning a build prints of such a folder."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from toolchain.build.cache import shared_folder_warnings
from toolchain.core import group, trust
from toolchain.core.fs import read_regular

NOBODY = 65534  # nobody:nogroup
AS_NOBODY = ["setpriv", "--reuid", str(NOBODY), "--regid", str(NOBODY), "--clear-groups"]

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another uid")


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A folder of this user's (0755), searchable on the way to it; `written_by_nobody` opens it to others for
    the time it writes (the files' own rule is tested here; a folder others can write: test_folder_trust.py)."""
    d = tmp_path / "cache"
    d.mkdir()
    os.chmod(d, 0o755)
    for p in d.parents:
        os.chmod(p, p.stat().st_mode | 0o001)
    return d


@pytest.fixture(autouse=True)
def no_shared_group(monkeypatch):
    monkeypatch.delenv(group.SHARED_GROUP_ENV, raising=False)
    group.declare_shared_group("")
    trust.forget_folders()
    yield
    group.declare_shared_group("")


def written_by_nobody(path: Path, data: bytes) -> None:
    """uid 65534 writes `path` in a folder opened to it for that time (then this user's 0755 again)."""
    mode = path.parent.stat().st_mode
    os.chmod(path.parent, 0o777)
    try:
        subprocess.run([*AS_NOBODY, "tee", str(path)], input=data, stdout=subprocess.DEVNULL, check=True, timeout=60)
    finally:
        os.chmod(path.parent, mode)
    trust.forget_folders()
    assert path.stat().st_uid == NOBODY


def test_only_a_file_of_ours_or_roots_that_no_one_else_can_write_is_trusted(folder: Path):
    mine = folder / "mine.json"
    mine.write_bytes(b"{}")
    os.chmod(mine, 0o644)
    assert trust.read_trusted(mine) == b"{}" and trust.read_json(mine) == {}
    for bits in (0o664, 0o646):  # writable by the group, by others
        os.chmod(mine, bits)
        with pytest.raises(trust.Untrusted, match="writable by other users"):
            trust.read_trusted(mine)
        assert trust.read_json(mine) is None
    theirs = folder / "theirs.json"
    written_by_nobody(theirs, b'{"planted": true}')
    os.chmod(theirs, 0o644)  # (root may: nobody's file, writable by nobody else)
    with pytest.raises(trust.Untrusted, match=f"owned by uid {NOBODY}"):
        trust.read_trusted(theirs)
    link = folder / "link.json"
    link.symlink_to(mine)
    os.chmod(mine, 0o644)
    with pytest.raises(OSError, match="Too many levels of symbolic links"):  # ELOOP: the final link is not followed
        trust.read_trusted(link)
    with pytest.raises(FileNotFoundError):
        trust.read_trusted(folder / "absent.json")


def test_a_fifo_is_a_miss_at_once_not_a_hang(folder: Path):
    fifo = folder / "record.json"
    os.mkfifo(fifo)
    started = time.monotonic()
    with pytest.raises(trust.Untrusted, match="not a regular file"):
        trust.read_trusted(fifo)
    with pytest.raises(OSError, match="not a regular file"):
        read_regular(fifo)
    assert trust.read_json(fifo) is None
    assert time.monotonic() - started < 5


def test_a_shared_group_trusts_its_members_files_writable_by_that_group_and_nobody_else(folder: Path, monkeypatch):
    teammate = folder / "entry.json"
    written_by_nobody(teammate, b"{}")
    os.chmod(teammate, 0o664)  # nobody:nogroup, group-writable
    with pytest.raises(trust.Untrusted):
        trust.read_trusted(teammate)
    monkeypatch.setenv(group.SHARED_GROUP_ENV, "nogroup")
    assert trust.read_trusted(teammate) == b"{}"  # a member of the shared group (its primary group)
    os.chmod(teammate, 0o666)
    with pytest.raises(trust.Untrusted, match="writable by other users"):
        trust.read_trusted(teammate)
    os.chmod(teammate, 0o664)
    os.chown(teammate, NOBODY, 0)  # nobody's file of group root: not the shared group's
    with pytest.raises(trust.Untrusted, match=f"owned by uid {NOBODY}"):
        trust.read_trusted(teammate)
    monkeypatch.delenv(group.SHARED_GROUP_ENV)
    group.declare_shared_group(str(NOBODY))  # a recipe's [cache] shared-group, as a gid
    os.chown(teammate, NOBODY, NOBODY)
    assert trust.read_trusted(teammate) == b"{}"


def test_one_warning_names_the_cache_folder_what_is_wrong_and_the_fix(folder: Path, monkeypatch):
    os.chmod(folder, 0o777)  # (as after `chmod -R o+w`)
    (folder / "memo").mkdir()
    os.chmod(folder / "memo", 0o755)
    os.chown(folder / "memo", NOBODY, NOBODY)
    (folder / "wheels").symlink_to(folder.parent)
    (warning,) = shared_folder_warnings(folder)
    assert warning.startswith(f"cache folder {folder}: it is writable by other users (mode 777); memo is owned by "
                              f"uid {NOBODY}; wheels is a symbolic link"), warning
    assert "chmod -R go-w" in warning and "shared-group" in warning and "OCI registry" in warning
    assert "nothing in it is read this run" in warning and "rebuilt" in warning
    (folder / "wheels").unlink()
    os.chmod(folder, 0o775)
    os.chown(folder, 0, NOBODY)
    os.chown(folder / "memo", 0, NOBODY)
    os.chmod(folder / "memo", 0o775)
    assert shared_folder_warnings(folder)  # group-writable, and no group declared
    monkeypatch.setenv(group.SHARED_GROUP_ENV, str(NOBODY))
    assert shared_folder_warnings(folder) == []  # writable by the declared group and nobody else


def test_a_bisect_unbuildable_record_another_uid_wrote_is_not_remembered(folder: Path):
    from toolchain.bisect.builder import Unbuildable

    memo = folder / "bisect" / "unbuildable" / "abc.json"
    Unbuildable("the patch does not apply").write(memo)
    remembered = Unbuildable.read(memo)
    assert remembered is not None and remembered.reason == "the patch does not apply"
    os.chown(memo, NOBODY, NOBODY)  # (a record planted in a cache others can write: this commit is built again)
    assert Unbuildable.read(memo) is None
    memo.unlink()
    os.mkfifo(memo)
    assert Unbuildable.read(memo) is None


def test_a_kept_file_copy_another_uid_owns_is_no_copy_and_is_kept_again(folder: Path, tmp_path: Path):
    import hashlib

    from toolchain.core import blobs

    src = tmp_path / "0001-fix.patch"
    src.write_bytes(b"--- a\n+++ b\n")
    sha = hashlib.sha256(src.read_bytes()).hexdigest()
    blobs.keep(folder, src, sha)
    kept = blobs.blob_path(folder, sha)
    assert blobs.find(folder, sha) == kept
    os.chown(kept, NOBODY, NOBODY)
    assert blobs.find(folder, sha) is None
    blobs.keep(folder, src, sha)  # replaced by this user's copy
    assert kept.stat().st_uid == os.geteuid() and blobs.find(folder, sha) == kept
    kept.unlink()
    os.mkfifo(kept)
    assert blobs.find(folder, sha) is None


@pytest.mark.parametrize("indent", [None, 1, 2])
def test_a_sealed_record_is_its_own_json_and_any_change_to_its_text_is_a_miss(indent):
    """`sealed` text is one JSON document (the data, its key, the checksum last); `unseal` checks the checksum
    on the bytes as read: any one character of the text changed, or the record asked for under another key,
    is a miss; whitespace after it is not part of it."""
    import json

    data = {"value": {"info": {"oneapi_version": "2025.2.0"}, "n": [1, 2.5, None]}, "inputs": {"/a": [1, 2]}}
    text = trust.sealed("setvars-1", data, indent=indent)
    assert json.loads(text) == {**data, trust.RECORD_KEY: "setvars-1", trust.RECORD_SHA: json.loads(text)[trust.RECORD_SHA]}
    assert trust.unseal(text, "setvars-1") == data == trust.unseal((text + "\n").encode(), "setvars-1")
    assert trust.unseal(text, "setvars-2") is None
    for i, ch in enumerate(text):
        changed = text[:i] + ("0" if ch != "0" else "1") + text[i + 1:]
        assert trust.unseal(changed, "setvars-1") is None, (i, changed)


def test_what_is_read_is_kept_for_the_run_only_while_the_file_is_the_same_one_unchanged(folder: Path):
    """`read_kept` checks the file as the rule says every time, and parses it again when it was changed in
    place (same size, its mtime put back: its ctime tells), replaced (another inode), or written less than
    RACY_NS before it was first read (not kept then: a change within the clock's lag would not show)."""
    seen: list[bytes] = []

    def parse(path: Path, raw: bytes) -> bytes:
        seen.append(raw)
        return raw

    f = folder / "record.json"
    f.write_bytes(b"one")
    assert trust.read_kept(f, parse) == trust.read_kept(f, parse) == b"one" and len(seen) == 2  # (just written)
    old = time.time_ns() - 2 * trust.RACY_NS
    os.utime(f, ns=(old, old))
    time.sleep(2 * trust.RACY_NS / 1e9)
    st = f.stat()
    assert trust.read_kept(f, parse) == b"one" and len(seen) == 3
    assert trust.read_kept(f, parse) == b"one" and len(seen) == 3  # kept: the same file, unchanged
    f.write_bytes(b"two")
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert f.stat().st_size == st.st_size and f.stat().st_mtime_ns == st.st_mtime_ns
    assert trust.read_kept(f, parse) == b"two" and len(seen) == 4
    f.chmod(0o666)  # (and the rule is asked every time: a file others may write is refused, kept or not)
    with pytest.raises(trust.Untrusted):
        trust.read_kept(f, parse)
