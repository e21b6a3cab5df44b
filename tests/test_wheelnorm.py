"""wheelnorm: real wheels from `pip wheel`, scrambled the ways backends vary, normalized to the same bytes."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import os
import random
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.support.tinywheels import PURE, make_repo, pip_wheel, require_wheel_backend
from toolchain.build.wheelnorm import ZIP_MIN_EPOCH, normalize_wheel, zip_date_time
from toolchain.core.proc.runner import merge_env
from toolchain.errors import BuildError

EPOCH = 1700000000


@pytest.fixture(scope="module")
def built_wheel(tmp_path_factory) -> Path:
    """A wheel of PURE as setuptools wrote it (its own timestamps and modes)."""
    require_wheel_backend()
    root = tmp_path_factory.mktemp("pure")
    project = make_repo(root, "pure", PURE)
    env = merge_env(os.environ, {"SOURCE_DATE_EPOCH": None})
    return pip_wheel(project.repo, root / "wheels", env, root / "build.log")


@pytest.fixture
def wheel(built_wheel, tmp_path) -> Path:
    copy = tmp_path / built_wheel.name
    copy.write_bytes(built_wheel.read_bytes())
    return copy


def scramble(src: Path, dest: Path, *, seed: int) -> None:
    """Rewrite `src` the way another backend or machine might: shuffled order, other dates and modes,
    stored instead of deflated, a stale RECORD."""
    rng = random.Random(seed)
    with zipfile.ZipFile(src) as zin:
        entries = [(i, zin.read(i)) for i in zin.infolist()]
    rng.shuffle(entries)
    with zipfile.ZipFile(dest, "w") as zout:
        for info, data in entries:
            new = zipfile.ZipInfo(info.filename, date_time=(1999 + seed, 1 + seed, 2, 3, 4, 6))
            mode = (info.external_attr >> 16) & 0o777
            new.external_attr = (stat.S_IFREG | (0o775 if mode & 0o111 else rng.choice([0o600, 0o664, 0o640]))) << 16
            new.compress_type = zipfile.ZIP_STORED if seed % 2 else zipfile.ZIP_DEFLATED
            if info.filename.endswith(".dist-info/RECORD"):
                data = b"stale,sha256=xyz,1\n"
            zout.writestr(new, data)


def entries(path: Path) -> list[zipfile.ZipInfo]:
    with zipfile.ZipFile(path) as zf:
        return zf.infolist()


def test_scrambled_wheels_normalize_to_identical_bytes(wheel, tmp_path):
    a, b = tmp_path / "a" / wheel.name, tmp_path / "b" / wheel.name
    a.parent.mkdir()
    b.parent.mkdir()
    scramble(wheel, a, seed=1)
    scramble(wheel, b, seed=2)
    assert a.read_bytes() != b.read_bytes()

    applied = normalize_wheel(a, EPOCH)
    assert applied == ["entry-order", "timestamps", "permissions", "record"]
    normalize_wheel(b, EPOCH)
    normalize_wheel(wheel, EPOCH)
    assert a.read_bytes() == b.read_bytes() == wheel.read_bytes()


def test_layout_order_dates_modes_and_record(wheel):
    normalize_wheel(wheel, EPOCH)
    infos = entries(wheel)
    names = [i.filename for i in infos]
    dist_info = [n for n in names if ".dist-info/" in n]
    assert names[-1].endswith(".dist-info/RECORD")
    assert names == sorted(n for n in names if n not in dist_info) + sorted(dist_info[:-1]) + [names[-1]]
    assert {tuple(i.date_time) for i in infos} == {zip_date_time(EPOCH)} == {(2023, 11, 14, 22, 13, 20)}
    modes = {i.filename: i.external_attr >> 16 for i in infos}
    assert modes["pure/run.sh"] == stat.S_IFREG | 0o755
    assert modes["pure/__init__.py"] == stat.S_IFREG | 0o644
    assert {i.create_system for i in infos} == {3}

    with zipfile.ZipFile(wheel) as zf:
        rows = list(csv.reader(io.StringIO(zf.read(names[-1]).decode())))
        assert [r[0] for r in rows] == names
        assert rows[-1] == [names[-1], "", ""]
        for name, digest, size in rows[:-1]:
            data = zf.read(name)
            expected = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert (digest, int(size)) == (f"sha256={expected}", len(data))


def test_normalizing_twice_changes_nothing(wheel):
    assert normalize_wheel(wheel, EPOCH)  # setuptools' wheel needs at least its dates fixed
    first = wheel.read_bytes()
    inode = wheel.stat().st_ino
    assert normalize_wheel(wheel, EPOCH) == []
    assert wheel.read_bytes() == first
    assert wheel.stat().st_ino == inode  # not even rewritten
    assert sorted(p.name for p in wheel.parent.iterdir()) == [wheel.name]


def test_only_the_zip_layout_differs(wheel):
    normalize_wheel(wheel, EPOCH)
    normal = wheel.read_bytes()
    with zipfile.ZipFile(wheel, "a") as zf:
        zf.comment = b"built on host 42"
    assert normalize_wheel(wheel, EPOCH) == ["zip-layout"]
    assert wheel.read_bytes() == normal


def test_dates_come_from_source_date_epoch_and_stop_at_1980(wheel, monkeypatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", str(EPOCH + 3600))
    normalize_wheel(wheel)
    assert {tuple(i.date_time) for i in entries(wheel)} == {(2023, 11, 14, 23, 13, 20)}
    normalize_wheel(wheel, 0)
    assert {tuple(i.date_time) for i in entries(wheel)} == {(1980, 1, 1, 0, 0, 0)} == {zip_date_time(ZIP_MIN_EPOCH)}


def test_normalized_wheel_installs_with_its_executable_bit(wheel, tmp_path):
    normalize_wheel(wheel, EPOCH)
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--target", str(target),
                    str(wheel)], check=True, capture_output=True, timeout=120)
    assert (target / "pure" / "run.sh").stat().st_mode & 0o111
    assert not (target / "pure" / "__init__.py").stat().st_mode & 0o111
    out = subprocess.run([sys.executable, "-c", "import pure; print(pure.VALUE)"], env={**os.environ,
                         "PYTHONPATH": str(target)}, check=True, capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "42"


@pytest.mark.parametrize(("content", "message"), [
    (None, "not a wheel: expected one <name>-<version>.dist-info/RECORD, found none"),
    (b"PK\x03\x04 truncated", "not a valid wheel (zip) file"),
])
def test_bad_wheels_are_refused_and_left_untouched(tmp_path, content, message):
    path = tmp_path / "broken-1.0-py3-none-any.whl"
    if content is None:
        with zipfile.ZipFile(path, "w") as zf:
            zf.writestr("broken/__init__.py", "")
    else:
        path.write_bytes(content)
    before = path.read_bytes()
    with pytest.raises(BuildError, match=message.replace("(", r"\(").replace(")", r"\)")):
        normalize_wheel(path, EPOCH)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temporary file left behind


def test_a_kept_compression_gives_the_bytes_compressing_gives(wheel, tmp_path):
    """A file that did not change since the last wheel normalized in this process is written from the deflate
    bytes kept for its content (a bisect's next step compresses only what changed): the wheel is byte for
    byte the one a process that kept nothing writes, a changed file included; a large wheel written through
    a file (not in memory) is the same too."""
    from toolchain.build import wheelnorm

    scramble(wheel, tmp_path / "cold.whl", seed=2)
    wheelnorm.DEFLATED_MEMO.clear()
    normalize_wheel(tmp_path / "cold.whl", EPOCH)
    cold = (tmp_path / "cold.whl").read_bytes()

    # the next commit's wheel: one file changed, the rest as they were
    changed = tmp_path / "next.whl"
    with zipfile.ZipFile(wheel) as zin, zipfile.ZipFile(changed, "w", zipfile.ZIP_DEFLATED) as zout:
        for info in zin.infolist():
            data = zin.read(info)
            zout.writestr(info, data + b"# changed\n" if info.filename == "pure/__init__.py" else data)
    fresh = tmp_path / "fresh.whl"
    fresh.write_bytes(changed.read_bytes())
    wheelnorm.DEFLATED_MEMO.clear()
    normalize_wheel(fresh, EPOCH)  # nothing kept: every file compressed

    scramble(wheel, tmp_path / "warm.whl", seed=1)
    before = wheelnorm.DEFLATED_MEMO.replayed
    normalize_wheel(tmp_path / "warm.whl", EPOCH)
    assert wheelnorm.DEFLATED_MEMO.replayed > before  # written from what the normalization above kept
    assert (tmp_path / "warm.whl").read_bytes() == cold
    normalize_wheel(changed, EPOCH)
    assert changed.read_bytes() == fresh.read_bytes()

    large = tmp_path / "large.whl"
    scramble(wheel, large, seed=3)
    wheelnorm.IN_MEMORY_LIMIT, limit = 0, wheelnorm.IN_MEMORY_LIMIT
    try:
        assert normalize_wheel(large, EPOCH)
    finally:
        wheelnorm.IN_MEMORY_LIMIT = limit
    assert large.read_bytes() == cold
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(  # no temporary file left
        ["cold.whl", "fresh.whl", "large.whl", "next.whl", "warm.whl", wheel.name])
