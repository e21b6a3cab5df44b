"""The layer remembered (toolchain/image/memo.py): a warm `toolchain image --oci-dir` writes the same image as
the cold one from the kept blob, calling no engine at all; a kept blob that no longer has its sha256 is a miss,
made again to the same digest. Real podman (the cold run), a podman on PATH that logs every call."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.spine_helpers import Cli, isolated_env
from tests.support.container_fixtures import podman_image  # noqa: F401  (pytest fixture)
from tests.support.debian_image import containers_env
from tests.test_image import test_base  # noqa: F401  (the pinned Debian base: a fixture)


def _logging_podman(where: Path, log: Path) -> str:
    """A folder whose `podman` logs its arguments to `log`, then runs the real one: a PATH to put first."""
    import shutil

    real = shutil.which("podman")
    assert real
    where.mkdir()
    shim = where / "podman"
    shim.write_text(f'#!/bin/sh\necho "$*" >> {log}\nexec {real} "$@"\n')
    shim.chmod(0o755)
    return f"{where}{os.pathsep}{os.environ['PATH']}"


@pytest.mark.slow
@pytest.mark.container
def test_a_warm_oci_dir_serves_the_remembered_layer_and_a_tampered_one_is_made_again(
        demo_build, test_base, tmp_path):  # noqa: F811
    log = tmp_path / "podman.log"
    env = {**isolated_env(tmp_path), **containers_env()}
    env["PATH"] = _logging_podman(tmp_path / "bin", log)
    cli = Cli(tmp_path, env)
    cache = tmp_path / "cache"

    def image(oci: str) -> dict:
        r = cli("image", "--lock", demo_build.out / "stack.lock.toml", "--tag", "localhost/i49-memo:1", "--base",
                test_base, "--cache-dir", cache, "--oci-dir", tmp_path / oci, "--json", timeout=900)
        assert r.returncode == 0, str(r)
        return dict(r.json())

    cold = image("oci-cold")
    calls = log.read_text().splitlines()
    assert any(c.startswith("run ") for c in calls), calls  # (the cold one compiled in a container of the base)
    blob = cache / "images" / "layers" / cold["layer"]["digest"].split(":", 1)[1]
    kept = blob.stat()
    log.unlink()
    warm = image("oci-warm")
    assert not log.exists(), log.read_text()  # no engine called: no container started
    assert warm == {**cold, "oci-dir": warm["oci-dir"]}
    assert (tmp_path / "oci-warm" / "index.json").read_bytes() == (tmp_path / "oci-cold" / "index.json").read_bytes()
    assert (blob.stat().st_ino, blob.stat().st_mtime_ns) == (kept.st_ino, kept.st_mtime_ns)  # served, not rewritten
    served = tmp_path / "oci-warm" / "blobs" / "sha256" / blob.name
    assert served.stat().st_ino == kept.st_ino  # (linked from the cache, not copied)
    # the kept blob changed in place, its size the same: not served; made again, to the same digest
    served.unlink()  # (the layout's link to it: changed with it otherwise)
    data = bytearray(blob.read_bytes())
    data[len(data) // 2] ^= 0xFF
    with open(blob, "r+b") as f:
        f.write(data)
    again = image("oci-again")
    assert again == {**cold, "oci-dir": again["oci-dir"]}
    assert blob.read_bytes() != bytes(data) and blob.stat().st_ino != kept.st_ino
    assert (tmp_path / "oci-again" / "index.json").read_bytes() == (tmp_path / "oci-cold" / "index.json").read_bytes()
    assert not log.exists(), log.read_text()  # (the .pyc kept by source: made again without a container)
