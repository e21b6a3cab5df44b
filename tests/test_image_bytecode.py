"""The image's bytecode: the layer's modules compiled by the base's own interpreter (in a one-off container of the
base), unchecked-hash .pyc named by their image paths, the same bytes from another cache; a container start reads
them and compiles nothing. `--no-bytecode` leaves them out, and the label says which."""

from __future__ import annotations

import gzip
import tarfile
from pathlib import Path

import pytest

from tests.support.container_fixtures import podman_image  # noqa: F401  (pytest fixture)
from tests.test_image import (
    _engine,
    _image,
    test_base,  # noqa: F401  (the pinned Debian base: a fixture)
)

pytestmark = [pytest.mark.slow, pytest.mark.container]
SITE = "usr/local/lib/python3.11/dist-packages/"


def _layer(oci: Path, digest: str) -> dict[str, bytes]:
    with gzip.open(oci / "blobs" / "sha256" / digest.split(":", 1)[1]) as gz, tarfile.open(fileobj=gz) as tar:
        return {m.name: (tar.extractfile(m).read() if m.isfile() else b"")  # type: ignore[union-attr]
                for m in tar.getmembers()}


def test_the_layer_holds_unchecked_hash_bytecode_of_the_bases_python_and_a_start_compiles_nothing(
        demo_build, test_base, tmp_path):  # noqa: F811
    lock = demo_build.out / "stack.lock.toml"
    tag = "localhost/i49-bytecode:1"
    first = _image(tmp_path, "a", lock, "--tag", tag, "--base", test_base, "--oci-dir", tmp_path / "oci-a",
                   "--load", "podman")
    second = _image(tmp_path, "b", lock, "--tag", tag, "--base", test_base, "--oci-dir", tmp_path / "oci-b")
    assert first["digest"] == second["digest"], (first, second)  # compiled twice, from two caches: the same bytes
    assert first["bytecode"] == first["labels"]["vnd.xpu-toolchain.bytecode"]
    assert first["bytecode"].startswith("unchecked-hash, compiled by the base's Python 3.11"), first["bytecode"]
    files = _layer(tmp_path / "oci-a", first["layer"]["digest"])
    sources = [n for n in files if n.startswith(SITE) and n.endswith(".py")]
    assert sources
    for src in sources:
        folder, _, name = src.rpartition("/")
        pyc = f"{folder}/__pycache__/{name[:-3]}.cpython-311.pyc"
        assert pyc in files, (src, sorted(files))
        header = files[pyc][:16]
        assert int.from_bytes(header[4:8], "little") == 0b01, src  # PEP 552: hash-based, not checked at import
    try:
        # the base's interpreter imports the stack from the .pyc; it writes none (a read-only root: it could not)
        done = _engine("podman", "run", "--rm", "--network=none", "--read-only", tag, "python3", "-v", "-c",
                       "import demo_engine, demo_kernels, demo_ark")
        loaded = [line for line in done.stderr.splitlines() if "code object from" in line and SITE in line]
        assert any("demo_engine/__pycache__/" in line for line in loaded), done.stderr[-3000:]
        assert "matches /" + SITE in done.stderr, done.stderr[-3000:]  # the .pyc names the image's path
    finally:
        _engine("podman", "rmi", tag, check=False)


def test_no_bytecode_leaves_the_layer_uncompiled_and_says_so(demo_build, test_base, tmp_path):  # noqa: F811  # noqa: F811
    lock = demo_build.out / "stack.lock.toml"
    made = _image(tmp_path, "a", lock, "--tag", "localhost/i49-nobytecode:1", "--base", test_base,
                  "--oci-dir", tmp_path / "oci", "--no-bytecode")
    assert made["bytecode"] == "none: --no-bytecode"
    assert not [n for n in _layer(tmp_path / "oci", made["layer"]["digest"]) if n.endswith(".pyc")]
