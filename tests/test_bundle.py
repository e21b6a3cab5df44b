"""Bundles: two builds of the same sources (different directories and times) give the same bundle, byte for
byte; the bundle checks with `sha256sum -c`, installs with its documented command, and its SBOM is valid
CycloneDX naming commits, patches and wheel hashes."""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from tests.support.tinywheels import (
    COMMIT_EPOCH,
    PURE,
    STAMPED,
    build_stack,
    make_repo,
    require_wheel_backend,
)
from toolchain.core import toml as tomlio
from toolchain.core.fs import sha256_file
from toolchain.errors import TestFailed
from toolchain.lock import RECORD_NAME, read_lock, verify_wheels
from toolchain.release.bundle import (
    INSTALL_NAME,
    REQUIREMENTS_NAME,
    SUMS_NAME,
    stack_epoch,
    tarball_path,
    write_bundle,
)
from toolchain.release.sbom import SBOM_NAME

ROOT = Path(__file__).resolve().parents[1]
PATCH = """\
--- a/pure/__init__.py
+++ b/pure/__init__.py
@@ -1 +1,2 @@
 VALUE = 42
+PATCHED = True
"""


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    """The same two-component stack (stamped, then patched pure) built twice in different directories."""
    require_wheel_backend()
    root = tmp_path_factory.mktemp("stack")
    patches = root / "patches"
    (patches / "pure").mkdir(parents=True)
    (patches / "pure" / "0001-mark.patch").write_text(PATCH)
    stamped = make_repo(root, "stamped", STAMPED)
    pure = dataclasses.replace(make_repo(root, "pure", PURE), patches=("pure/0001-mark.patch",))
    first = build_stack([stamped, pure], root / "one" / "out", patches_dir=patches)
    time.sleep(2)
    second = build_stack([stamped, pure], root / "two" / "deeper" / "out", patches_dir=patches)
    return first, second, patches


@pytest.fixture(scope="module")
def bundles(stack, tmp_path_factory):
    first, second, patches = stack
    root = tmp_path_factory.mktemp("bundles")
    return (write_bundle(first, root / "a", patches_dir=patches),
            write_bundle(second, root / "b", patches_dir=patches))


def files_under(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def member_bytes(tar: tarfile.TarFile, member: tarfile.TarInfo) -> bytes:
    f = tar.extractfile(member)
    assert f is not None, f"{member.name} is not a file"
    return f.read()


def test_two_builds_give_byte_identical_bundles(stack, bundles):
    first, second, _ = stack
    # The raw locks differ in what a bundle drops (timings, paths, container name); the wheels do not.
    assert first.recipe_path != second.recipe_path
    assert first.target.container != second.target.container
    assert [c.wheel.sha256 for c in first.components] == [c.wheel.sha256 for c in second.components]
    a, b = bundles
    assert a.name == b.name
    assert a.name.startswith("tiny-")
    assert len(a.name) == len("tiny-") + 12
    assert files_under(a) == files_under(b)
    assert tarball_path(a).read_bytes() == tarball_path(b).read_bytes()


def test_bundle_contents_and_checksums(stack, bundles):
    first, _, _ = stack
    bundle, _ = bundles
    names = sorted(files_under(bundle))
    wheels = sorted(f"wheels/{c.wheel.file}" for c in first.components)
    assert names == sorted([INSTALL_NAME, SUMS_NAME, SBOM_NAME, "patches/pure/0001-mark.patch", "pylock.toml",
                            REQUIREMENTS_NAME, "stack.lock.toml", *wheels])
    subprocess.run(["sha256sum", "--check", "--strict", "--quiet", SUMS_NAME], cwd=bundle, check=True, timeout=60)
    lock = read_lock(bundle)
    verify_wheels(lock)
    assert (bundle / "stack.lock.toml").read_bytes() == first.path.read_bytes()  # the build's lock, byte for byte
    assert not (bundle / RECORD_NAME).exists()  # (its build record stays beside the build's lock)
    assert [c.build_seconds for c in lock.components] == [0.0, 0.0]
    assert lock.recipe_path == "tiny.toml"
    assert first.recipe_path.endswith("/one/tiny.toml")  # (the build record's: this machine's path)
    assert lock.normalizations == first.normalizations
    pylock = (bundle / "pylock.toml").read_text()
    assert all(f'path = "{w}"' in pylock for w in wheels)


def test_tarball_is_deterministic_by_construction(bundles):
    bundle, _ = bundles
    raw = tarball_path(bundle).read_bytes()
    assert raw[:3] == b"\x1f\x8b\x08"
    assert raw[3] & 0x08 == 0
    assert raw[4:8] == b"\0\0\0\0"  # gzip mtime 0
    with tarfile.open(tarball_path(bundle)) as tar:
        members = tar.getmembers()
        names = [m.name for m in members]
        assert names[0] == bundle.name
        assert names == sorted(names)
        assert {(m.uid, m.gid, m.uname, m.gname) for m in members} == {(0, 0, "root", "root")}
        assert {m.mtime for m in members} == {stack_epoch(read_lock(bundle))} == {COMMIT_EPOCH}
        assert {m.mode for m in members if m.isdir()} == {0o755}
        assert {m.mode for m in members if m.isfile()} == {0o644}
        contents = {m.name.split("/", 1)[1]: member_bytes(tar, m) for m in members if m.isfile()}
    assert contents == files_under(bundle)


def test_sbom_is_valid_cyclonedx_with_commits_patches_and_hashes(stack, bundles):
    from cyclonedx.schema import SchemaVersion
    from cyclonedx.validation.json import JsonStrictValidator

    first, _, patches = stack
    bundle, _ = bundles
    text = (bundle / SBOM_NAME).read_text()
    validator = JsonStrictValidator(SchemaVersion.V1_6)
    assert validator.validate_str(text) is None
    broken = json.loads(text)
    broken["components"][0]["hashes"][0]["alg"] = "SHA-999"
    assert validator.validate_str(json.dumps(broken)) is not None  # the validator does check

    doc = json.loads(text)
    assert doc["metadata"]["timestamp"].startswith("2023-11-14T22:13:20")
    assert doc["metadata"]["component"]["name"] == "tiny"
    comps = {c["name"]: c for c in doc["components"]}
    assert set(comps) == {"stamped", "pure"}
    for locked in first.components:
        comp = comps[locked.name]
        assert comp["hashes"] == [{"alg": "SHA-256", "content": locked.wheel.sha256}]
        assert comp["pedigree"]["commits"][0]["uid"] == locked.commit
        assert f"vcs_url=git%2B{locked.url}%40{locked.commit}" in comp["purl"]
    (patch,) = comps["pure"]["pedigree"]["patches"]
    assert patch["diff"]["url"] == "patches/pure/0001-mark.patch"
    assert patch["diff"]["text"]["content"] == (patches / "pure" / "0001-mark.patch").read_text()
    assert "patches" not in comps["stamped"]["pedigree"]
    deps = {d["ref"]: d.get("dependsOn", []) for d in doc["dependencies"]}
    assert deps["component:pure"] == ["component:stamped"]


def test_documented_install_command_works(bundles, tmp_path):
    """A lock with no resolved closure: the documented command installs its wheels alone, every sha256
    required and no index (what they would need beyond them is for `pip check` to name, never a download)."""
    bundle, _ = bundles
    text = (bundle / INSTALL_NAME).read_text()
    assert "NO resolved closure" in text
    assert "toolchain lock --lock stack.lock.toml" in text
    lines = text.splitlines()
    start = lines.index("Install exactly the lock (in this directory, into a fresh venv; every wheel's sha256 is checked):")
    commands = [shlex.split(line) for line in lines[start + 1:start + 3]]
    assert commands == [["pip", "install", "--no-index", "--no-deps", "--require-hashes", "-r", REQUIREMENTS_NAME],
                        ["pip", "check"]]
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    pip = [str(venv / "bin" / "python"), "-m", "pip"]
    for argv in commands:
        subprocess.run(pip + argv[1:], cwd=bundle, check=True, capture_output=True, timeout=300)
    out = subprocess.run([str(venv / "bin" / "python"), "-c",
                          "import pure, stamped._where as w, stamped._stamp as s; "
                          "print(pure.PATCHED, w.where(), s.BUILD_TIME)"],
                         check=True, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert out.stdout.split() == ["True", "/usr/src/stamped/where.c", str(COMMIT_EPOCH)]


def test_pylock_installs_with_a_current_pip(bundles, tmp_path):
    """`pip install -r pylock.toml` (PEP 751) needs pip >= 26.1: fetched into a fresh venv when reachable."""
    bundle, _ = bundles
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = str(venv / "bin" / "python")
    got = subprocess.run([python, "-m", "pip", "install", "--quiet", "pip>=26.1"], capture_output=True,
                         text=True, timeout=300)
    if got.returncode != 0:
        pytest.skip(f"pip >= 26.1 could not be installed: {got.stderr.strip()[-300:]}")
    subprocess.run([python, "-m", "pip", "install", "--no-index", "-r", "pylock.toml"], cwd=bundle, check=True,
                   capture_output=True, timeout=300)
    out = subprocess.run([python, "-c", "import pure, stamped._where as w; print(pure.PATCHED, w.where())"],
                         check=True, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert out.stdout.split() == ["True", "/usr/src/stamped/where.c"]


def test_writing_the_same_bundle_again_is_a_no_op(stack, bundles):
    first, _, patches = stack
    bundle, _ = bundles
    before = tarball_path(bundle).read_bytes()
    again = write_bundle(first, bundle.parent, patches_dir=patches)
    assert again == bundle
    assert tarball_path(again).read_bytes() == before
    assert sorted(p.name for p in bundle.parent.iterdir()) == [bundle.name, tarball_path(bundle).name]


def test_tampered_wheel_or_patch_writes_nothing(stack, tmp_path):
    first, _, patches = stack
    wheels = tmp_path / "copy" / "wheels"
    wheels.mkdir(parents=True)
    for c in first.components:
        (wheels / c.wheel.file).write_bytes(first.wheel_path(c).read_bytes())
    (tmp_path / "copy" / "stack.lock.toml").write_bytes(first.path.read_bytes())
    copy = read_lock(tmp_path / "copy")

    bad_patches = tmp_path / "patches"
    (bad_patches / "pure").mkdir(parents=True)
    (bad_patches / "pure" / "0001-mark.patch").write_text(PATCH + "+# edited after the build\n")
    with pytest.raises(TestFailed, match="pure: patch .*0001-mark.patch has sha256"):
        write_bundle(copy, tmp_path / "out1", patches_dir=bad_patches)
    assert list((tmp_path / "out1").iterdir()) == []

    victim = wheels / first.components[1].wheel.file
    victim.write_bytes(victim.read_bytes() + b"\0")
    with pytest.raises(TestFailed, match="has sha256 .*, the lock records"):
        write_bundle(copy, tmp_path / "out2", patches_dir=patches)
    assert not (tmp_path / "out2").exists()


@pytest.mark.slow
def test_demo_recipe_built_twice_gives_identical_bundles(tmp_path):
    """Once the build spine has landed: `toolchain build --recipe demo --bundle` in two directories."""
    require_wheel_backend()
    results = []

    def toolchain(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "toolchain", *argv, "--json"], capture_output=True, text=True,
                              timeout=600, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})

    for i, where in enumerate(("first", "second/nested")):
        if i:
            time.sleep(2)
        out = tmp_path / where
        done = toolchain("build", "--recipe", "demo", "--out", str(out / "demo"), "--cache-dir", str(out / "cache"),
                         "--bundle")
        assert done.returncode == 0, done.stderr[-3000:]
        results.append(Path(json.loads(done.stdout)["bundle"]))
    a, b = results
    assert a.name == b.name
    assert a.parent != b.parent
    assert files_under(a) == files_under(b)
    assert tarball_path(a).read_bytes() == tarball_path(b).read_bytes()
    assert read_lock(a).recipe_path == "{shipped}/recipes/demo.toml"  # found again wherever the tool is installed
    # the two cold builds' own locks are byte for byte one; what each run measured is in its build record
    locks = [tmp_path / w / "demo" / "stack.lock.toml" for w in ("first", "second/nested")]
    assert locks[0].read_bytes() == locks[1].read_bytes()
    records = [tomlio.load_file(p.with_name(RECORD_NAME)) for p in locks]
    assert all(r["components"][0]["metrics"]["wall-seconds"] > 0 for r in records), records
    assert all(r["lock-sha256"] == sha256_file(locks[0]) for r in records)
    assert read_lock(locks[0]).components[0].metrics.wall_seconds == records[0]["components"][0]["metrics"]["wall-seconds"]

    # Anyone can rebuild the published bundle from its lock and get the same wheels.
    done = toolchain("verify-repro", "--lock", str(a / "stack.lock.toml"),
                     "--cache-dir", str(tmp_path / "first" / "cache"), "--work-dir", str(tmp_path / "rebuild"))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert report["ok"] is True
    assert sorted(report["identical"]) == sorted(files_under(a / "wheels"))
