"""verify-repro: real projects built twice in different directories, at different times, under another umask.

A project that embeds its build time and build path becomes reproducible with the tool's build env and
wheel normalization (and is not without them); a project whose content truly varies fails, naming the file.
"""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path

import pytest

from tests.support.tinywheels import (
    NOISY,
    PURE,
    STAMPED,
    build_stack,
    make_repo,
    require_wheel_backend,
)
from toolchain import cli
from toolchain.build.wheelnorm import normalize_wheel
from toolchain.commands import verify_repro as repro_command
from toolchain.commands.verify_repro import compare_locks, verify_builds, verify_lock
from toolchain.console import UI
from toolchain.lock import read_lock
from toolchain.release.wheeldiff import (
    binary_diff,
    compare_wheels,
    content_diff,
    format_report,
)

QUIET = UI(quiet=True)


@pytest.fixture(scope="module")
def projects(tmp_path_factory):
    require_wheel_backend()
    root = tmp_path_factory.mktemp("repos")
    return {name: make_repo(root, name, files) for name, files in
            (("stamped", STAMPED), ("noisy", NOISY), ("pure", PURE))}


@pytest.fixture(scope="module")
def deterministic_pair(projects, tmp_path_factory):
    """stamped + noisy built twice by verify_builds, with the tool's env and normalization."""
    work = tmp_path_factory.mktemp("repro")
    locks = []

    def build(out: Path, cache: Path):
        locks.append(build_stack([projects["stamped"], projects["noisy"]], out))
        return locks[-1]

    report = verify_builds(build, work, QUIET, use_diffoscope=False)
    return report, locks


def test_embedded_build_time_and_path_are_made_reproducible(deterministic_pair):
    report, (first, second) = deterministic_pair
    assert first.path.parent != second.path.parent
    assert report.identical == (first.component("stamped").wheel.file,)
    assert first.component("stamped").wheel.sha256 == second.component("stamped").wheel.sha256
    with zipfile.ZipFile(second.wheel_path(second.component("stamped"))) as zf:
        assert zf.read("stamped/_stamp.py") == b"BUILD_TIME = 1700000000\n"
        so = next(n for n in zf.namelist() if n.endswith(".so"))
        binary = zf.read(so)
    assert b"/usr/src/stamped/where.c" in binary
    assert str(second.path.parent.parent).encode() not in binary
    assert "permissions" in second.normalizations  # the second build ran under umask 002


def test_truly_varying_content_fails_naming_the_file(deterministic_pair):
    report, _ = deterministic_pair
    assert not report.ok
    (diff,) = report.differing
    assert diff.key == "noisy"
    assert diff.file_a == diff.file_b == "noisy-1.0-py3-none-any.whl"
    changed = {f.path: f for f in diff.files}
    assert set(changed) == {"noisy/noise.bin", "noisy-1.0.dist-info/RECORD"}
    assert changed["noisy/noise.bin"].change == "changed"
    assert changed["noisy/noise.bin"].detail.startswith("binary: 70 bytes vs 70 bytes\n  offset 0x00000006:")
    assert "-noisy/noise.bin,sha256=" in changed["noisy-1.0.dist-info/RECORD"].detail
    text = format_report(report)
    assert "DIFFERS: noisy-1.0-py3-none-any.whl" in text
    assert "changed: noisy/noise.bin" in text
    assert report.to_dict()["differing"][0]["files"][0]["path"] in changed


def test_without_the_tool_the_same_project_does_not_reproduce(projects, tmp_path):
    report = verify_builds(lambda out, cache: build_stack([projects["stamped"]], out, deterministic=False),
                           tmp_path, QUIET, use_diffoscope=False)
    assert not report.ok
    files = {f.path: f.detail for f in report.differing[0].files}
    assert "stamped/_stamp.py" in files
    assert "-BUILD_TIME = " in files["stamped/_stamp.py"]
    so = next(p for p in files if p.endswith(".so"))
    assert str(tmp_path / "build-1" / "src" / "stamped") in files[so]  # the build path, shown as a string
    assert "strings only in b" in files[so]


def test_verify_lock_against_published_hashes(deterministic_pair, tmp_path):
    _, (published, rebuilt) = deterministic_pair
    report = verify_lock(published, lambda out, cache: rebuilt, tmp_path, QUIET, use_diffoscope=False)
    assert report.identical == (published.component("stamped").wheel.file,)
    assert [f.path for f in report.differing[0].files] == ["noisy-1.0.dist-info/RECORD", "noisy/noise.bin"]

    # A published lock whose wheels are not at hand: only the hashes can be compared, and it says so.
    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copy(published.path, bare / "stack.lock.toml")
    report = verify_lock(read_lock(bare / "stack.lock.toml"), lambda out, cache: rebuilt, tmp_path, QUIET,
                         use_diffoscope=False)
    assert [d.file_a for d in report.differing] == ["noisy-1.0-py3-none-any.whl"]
    assert report.differing[0].files == ()
    assert report.notes == ("noisy-1.0-py3-none-any.whl: the recorded wheel is not at hand, so only its hash "
                            "was compared",)


def test_missing_wheels_and_normalization_notes(deterministic_pair):
    import dataclasses

    _, (first, second) = deterministic_pair
    fewer = dataclasses.replace(second, components=second.components[:1], normalizations=())
    report = compare_locks(first, fewer, use_diffoscope=False)
    assert report.only_a == ("noisy-1.0-py3-none-any.whl",)
    assert not report.ok
    assert any("different normalizations" in n for n in report.notes)


def test_same_contents_different_archive_metadata(deterministic_pair, tmp_path):
    _, (first, _) = deterministic_pair
    src = first.wheel_path(first.component("stamped"))
    a, b = tmp_path / "a" / src.name, tmp_path / "b" / src.name
    for p in (a, b):
        p.parent.mkdir()
        shutil.copy(src, p)
    normalize_wheel(b, 1800000000)
    diff = compare_wheels(a, b, use_diffoscope=False)
    assert diff is not None
    assert {f.change for f in diff.files} == {"metadata"}
    assert "timestamp 2023-11-14T22:13:20 vs 2027-01-15T08:00:00" in diff.files[0].detail


def test_content_diff_text_and_binary():
    text = content_diff("pkg/mod.py", b"a = 1\nb = 2\n", b"a = 1\nb = 3\n")
    assert text.splitlines() == ["--- a/pkg/mod.py", "+++ b/pkg/mod.py", "@@ -1,2 +1,2 @@", " a = 1",
                                 "-b = 2", "+b = 3"]
    binary = binary_diff(b"\x00" * 40 + b"/home/alice/src\x00", b"\x00" * 40 + b"/home/bob/src\x00\x01")
    lines = binary.splitlines()
    assert lines[0] == "binary: 56 bytes vs 55 bytes"
    assert lines[1] == "  offset 0x0000002e:"
    assert "strings only in a: '/home/alice/src'" in binary
    assert "strings only in b: '/home/bob/src'" in binary
    assert content_diff("x.so", b"\x7fELF\x00", b"\x7fELF\x01").startswith("binary: 5 bytes vs 5 bytes")


@pytest.mark.skipif(shutil.which("diffoscope") is None, reason="diffoscope is not installed")
def test_diffoscope_report_when_installed(deterministic_pair):
    _, (first, second) = deterministic_pair
    diff = compare_wheels(first.wheel_path(first.component("noisy")),
                          second.wheel_path(second.component("noisy")), use_diffoscope=True)
    assert diff is not None
    assert "noise.bin" in diff.diffoscope
    assert "noisy/noise.bin" in diff.paths  # our own per-file list is there as well


def run_cli(argv, capsys) -> tuple[int, dict]:
    code = cli.main(argv)
    out = capsys.readouterr().out
    return code, json.loads(out) if out.strip() else {}


def test_cli_lock_mode_reports_the_differing_file(deterministic_pair, tmp_path, monkeypatch, capsys):
    _, (published, rebuilt) = deterministic_pair
    monkeypatch.setattr(repro_command, "_rebuild_lock", lambda lock, out, cache, args, ui: rebuilt)
    code, data = run_cli(["verify-repro", "--lock", str(published.path), "--work-dir", str(tmp_path / "w"),
                          "--cache-dir", str(tmp_path / "cache"), "--no-diffoscope", "--json"], capsys)
    assert code == 1
    assert data["ok"] is False
    assert data["mode"] == "lock"
    assert data["work-dir"] == str(tmp_path / "w")  # kept for inspection
    assert "noisy/noise.bin" in [f["path"] for f in data["differing"][0]["files"]]


def test_cli_recipe_mode_builds_twice(projects, tmp_path, monkeypatch, capsys):
    built = []

    def fake_spine(recipe, out, cache, args, ui):
        assert recipe == "pure-recipe"
        built.append(out)
        return build_stack([projects["pure"]], out)

    monkeypatch.setattr(repro_command, "_build_recipe", fake_spine)
    monkeypatch.setattr(repro_command, "MIN_GAP_SECONDS", 0.1)
    work = tmp_path / "w"
    code, data = run_cli(["verify-repro", "--recipe", "pure-recipe", "--work-dir", str(work),
                          "--cache-dir", str(tmp_path / "cache"), "--json"], capsys)
    assert code == 0
    assert data["ok"] is True
    assert data["identical"] == ["pure-2.0-py3-none-any.whl"]
    assert built == [work.resolve() / "build-1" / "out", work.resolve() / "build-2" / "out"]
    assert data["work-dir"] is None
    assert not work.exists()


@pytest.mark.parametrize(("argv", "message"), [
    (["verify-repro"], "one of the arguments --recipe --lock is required"),
    (["verify-repro", "--recipe", "x", "--lock", "y"], "not allowed with argument"),
    (["verify-repro", "--lock", "/nonexistent/stack.lock.toml"], "no such lock file"),
])
def test_cli_usage_errors_exit_2(argv, message, capsys):
    code, data = run_cli([*argv, "--json"], capsys)
    assert code == 2
    assert message in data["error"]


@pytest.mark.slow
def test_demo_recipe_end_to_end(tmp_path, capsys):
    """Once the build spine has landed: the demo recipe built twice gives identical wheels."""
    require_wheel_backend()
    shared = tmp_path / "cache"
    code, data = run_cli(["verify-repro", "--recipe", "demo", "--work-dir", str(tmp_path / "w"),
                          "--cache-dir", str(shared), "--keep", "--json"], capsys)
    assert code == 0, data
    assert data["ok"] is True
    assert len(data["identical"]) >= 3
    # the second build's wheels and its closure, installed together: sha256 required, no index, pip check
    inst = data["install"]
    assert inst["ok"] is True
    assert inst["dependencies"] == 3
    assert inst["files"] == len(data["identical"]) + 3
    assert all(r["installed-sha256"] for r in inst["installed"])
    trees = [sorted((tmp_path / "w" / b / "cache" / "trees").glob("*/")) for b in ("build-1", "build-2")]
    assert trees[0]
    assert trees[1]
    assert set(trees[0]).isdisjoint(trees[1])
    assert any((shared / "git").iterdir())  # one mirror, shared by both builds
