"""An image names its base by digest only (issue 49): the same base under two names, a podman tag alias or one
image in two repositories of a registry, gives one image digest; the name given goes to the output, never into
the image. `verify-repro --image` finds the base by that digest under any name podman holds it, or takes
`--base NAME@DIGEST`; with neither it exits 2 saying what to pass. Real podman, a real registry."""

from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path

import pytest
import requests

from tests.spine_helpers import Cli, isolated_env
from tests.support.container_fixtures import podman_image  # noqa: F401  (pytest fixture)
from tests.support.debian_image import containers_env
from tests.support.registry_fixtures import registry  # noqa: F401  (pytest fixture)
from tests.test_image import _engine, _image, test_base  # noqa: F401  (the pinned Debian base: a fixture)

BASE_NAME_LABEL = "org.opencontainers.image.base.name"


def _own_lock(demo_out: Path, where: Path) -> Path:
    """The demo's lock and wheels with one comment of this test's own: an image digest no other test makes (tests
    beside it in podman hold the demo's images; removing this one by id touches none of theirs)."""
    shutil.copytree(demo_out, where)
    lock = where / "stack.lock.toml"
    lock.write_text(lock.read_text() + f"# {uuid.uuid4().hex}\n")
    return lock


def _small_blobs(oci: Path) -> bytes:
    """Every blob of the layout but the layers (the config, the manifest) and index.json, concatenated."""
    files = [oci / "index.json", *sorted((oci / "blobs" / "sha256").iterdir())]
    return b"".join(f.read_bytes() for f in files if f.stat().st_size < 1 << 20 and f.read_bytes()[:1] == b"{")


@pytest.mark.slow
@pytest.mark.container
def test_one_base_under_two_podman_names_gives_one_image_and_verify_repro_finds_it_by_digest(
        demo_build, test_base, tmp_path):  # noqa: F811
    (tmp_path / "ctx").mkdir()  # a base of this test's own: the test image with a label (podman keeps its manifest)
    (tmp_path / "ctx" / "Containerfile").write_text(f"FROM {test_base}\nLABEL i49.test={uuid.uuid4().hex}\n")
    _engine("podman", "build", "--pull=never", "-q", "-t", "localhost/i49-own:1", str(tmp_path / "ctx"))
    digest, ident = _engine("podman", "image", "inspect", "--format", "{{.Digest}} {{.Id}}",
                            "localhost/i49-own:1").stdout.split()
    _engine("podman", "tag", "localhost/i49-own:1", "localhost/i49-alias:1")
    demo = demo_build.out / "stack.lock.toml"
    cli = Cli(tmp_path, {**isolated_env(tmp_path), **containers_env()})
    try:
        a = _image(tmp_path, "a", demo, "--tag", "localhost/i49-top:1", "--base", f"localhost/i49-own@{digest}",
                   "--oci-dir", tmp_path / "oci-a")
        b = _image(tmp_path, "b", demo, "--tag", "localhost/i49-top:1", "--base", f"localhost/i49-alias@{digest}",
                   "--oci-dir", tmp_path / "oci-b", "--load", "podman")
        assert a["digest"] == b["digest"] and a["layer"] == b["layer"], (a, b)
        assert (a["base"], b["base"]) == ("localhost/i49-own", "localhost/i49-alias")  # (the output: as given)
        assert BASE_NAME_LABEL not in a["labels"] and a["labels"]["org.opencontainers.image.base.digest"] == digest
        for oci in (tmp_path / "oci-a", tmp_path / "oci-b"):
            text = _small_blobs(oci)
            assert b"org.opencontainers.image.base.digest" in text  # (the config and manifest were read)
            assert b"i49-own" not in text and b"i49-alias" not in text
        # podman holds the base under the alias only: verify-repro finds it there by its digest
        _engine("podman", "untag", "localhost/i49-own:1", "localhost/i49-own:1")
        same = cli("verify-repro", "--lock", demo, "--image", "localhost/i49-top:1", "--json", timeout=900)
        assert same.returncode == 0, str(same)
        assert same.json()["base"] == f"localhost/i49-alias@{digest}" and same.json()["rebuilt"] == a["digest"]
        # the lock comes back out of the image byte for byte
        cli.ok("lock", "--image", "localhost/i49-top:1", "--out", tmp_path / "back", "--json")
        assert (tmp_path / "back" / "stack.lock.toml").read_bytes() == demo.read_bytes()
        # a --base of another digest: bad input, nothing made
        other = cli("verify-repro", "--lock", demo, "--image", "localhost/i49-top:1", "--base", test_base, "--json",
                    timeout=900)
        assert other.returncode == 2, str(other)
        assert f"is not the base of localhost/i49-top:1, which was made over {digest}" in other.json()["error"]
        # no name holds that digest: exit 2, one line saying what to pass
        _engine("podman", "untag", ident, "localhost/i49-alias:1")  # (kept, nameless)
        assert not [n for i in json.loads(_engine("podman", "images", "--format", "json").stdout)
                    for n in i.get("RepoDigests") or [] if n.endswith("@" + digest)]
        gone = cli("verify-repro", "--lock", demo, "--image", "localhost/i49-top:1", "--json", timeout=900)
        assert gone.returncode == 2, str(gone)
        error = gone.json()["error"]
        assert error == (f"podman holds no image {digest} (the base of localhost/i49-top:1, which names it by digest "
                         f"only): pass --base NAME@{digest} (a registry's or a local name that holds it)"), error
        assert not gone.json().get("hint")
    finally:
        _engine("podman", "rmi", "localhost/i49-top:1", check=False)
        _engine("podman", "rmi", "-f", ident, check=False)


def _copy_repository(reg, source: str, dest: str, digest: str) -> None:
    """The manifest `digest` of `source` put into `dest` of the same registry, its blobs mounted (not sent):
    one image in two repositories, as a second `push` of it would leave it."""
    accept = {"Accept": "application/vnd.oci.image.manifest.v1+json"}
    got = requests.get(f"{reg.url}/v2/{source}/manifests/{digest}", headers=accept, timeout=60)
    got.raise_for_status()
    manifest = got.json()
    for d in [manifest["config"], *manifest["layers"]]:
        mounted = requests.post(f"{reg.url}/v2/{dest}/blobs/uploads/", params={"mount": d["digest"], "from": source},
                                timeout=60)
        assert mounted.status_code == 201, (mounted.status_code, mounted.text)
    put = requests.put(f"{reg.url}/v2/{dest}/manifests/1", data=got.content, timeout=60,
                       headers={"Content-Type": got.headers["Content-Type"]})
    assert put.status_code == 201 and put.headers["Docker-Content-Digest"] == digest, (put.status_code, put.text)


@pytest.mark.slow
@pytest.mark.container
def test_one_base_in_two_repositories_of_a_registry_gives_one_image(demo_build, test_base, registry, tmp_path):  # noqa: F811
    lock = _own_lock(demo_build.out, tmp_path / "own")
    reg = registry.address
    pushed = _image(tmp_path, "own", lock, "--tag", f"{reg}/i49/one:1", "--base", test_base, "--push",
                    "--remote-insecure")
    digest = pushed["digest"]
    _copy_repository(registry, "i49/one", "i49/two", digest)
    demo = demo_build.out / "stack.lock.toml"
    try:
        made = [_image(tmp_path, repo, demo, "--tag", "localhost/i49-reg:1", "--base", f"{reg}/i49/{repo}@{digest}",
                       "--remote-insecure", "--oci-dir", tmp_path / f"oci-{repo}") for repo in ("one", "two")]
        assert made[0]["digest"] == made[1]["digest"], made
        assert [m["base"] for m in made] == [f"{reg}/i49/one", f"{reg}/i49/two"]
        for repo in ("one", "two"):
            text = _small_blobs(tmp_path / f"oci-{repo}")
            assert b"org.opencontainers.image.base.digest" in text and b"i49/one" not in text and b"i49/two" not in text
    finally:  # (podman pulled it to read its interpreter: this test's own image, by id)
        _engine("podman", "rmi", "-f", pushed["config"][7:], check=False)


@pytest.mark.slow
@pytest.mark.container
def test_an_image_loaded_into_podman_serves_as_a_localhost_base_with_the_digest_it_has_on_a_registry(
        demo_build, test_base, registry, tmp_path):  # noqa: F811
    """`--load podman` hands podman the layer gzipped; podman keeps it uncompressed and `podman save` cannot give
    those bytes back. The tool's own layer is a pure function of its tar, so the base is read back by
    compressing the saved tar as the tool does and checking the sha256 the manifest names: the image over
    `localhost/NAME@DIGEST` is the one over the same digest on a registry, from any cache."""
    lock = _own_lock(demo_build.out, tmp_path / "own")
    reg = registry.address
    under = _image(tmp_path, "under", lock, "--tag", "localhost/i49-under:1", "--base", test_base, "--load", "podman",
                   "--oci-dir", tmp_path / "oci-under")
    digest = under["digest"]
    demo = demo_build.out / "stack.lock.toml"
    try:
        pushed = _image(tmp_path, "push", lock, "--tag", f"{reg}/i49/under:1", "--base", test_base, "--push",
                        "--remote-insecure")
        assert pushed["digest"] == digest
        local = _image(tmp_path, "over", demo, "--tag", "localhost/i49-over:1", "--base",
                       f"localhost/i49-under@{digest}", "--no-bytecode", "--oci-dir", tmp_path / "oci-over")
        again = _image(tmp_path, "again", demo, "--tag", "localhost/i49-over:1", "--base",
                       f"localhost/i49-under@{digest}", "--no-bytecode", "--oci-dir", tmp_path / "oci-again")
        remote = _image(tmp_path, "remote", demo, "--tag", "localhost/i49-over:1", "--base",
                        f"{reg}/i49/under@{digest}", "--no-bytecode", "--remote-insecure",
                        "--oci-dir", tmp_path / "oci-remote")
        assert local["digest"] == again["digest"] == remote["digest"], (local, again, remote)
        blobs = tmp_path / "oci-over" / "blobs" / "sha256"
        index = json.loads((tmp_path / "oci-over" / "index.json").read_text())
        manifest = json.loads((blobs / index["manifests"][0]["digest"][7:]).read_text())
        under_layers = json.loads((tmp_path / "oci-under" / "blobs" / "sha256" / digest[7:]).read_text())["layers"]
        assert [d["digest"] for d in manifest["layers"][:-1]] == [d["digest"] for d in under_layers]
        import hashlib

        layer = under["layer"]["digest"]  # (the base's own layer, as the layout holds it: those very bytes)
        assert hashlib.sha256((blobs / layer[7:]).read_bytes()).hexdigest() == layer[7:]
    finally:
        _engine("podman", "rmi", "-f", "localhost/i49-under:1", check=False)
        _engine("podman", "rmi", "-f", pushed["config"][7:] if "pushed" in locals() else "none", check=False)


def _recompressed(oci: Path, name: str, archive: Path) -> tuple[str, str, str]:
    """The tool's layout `oci` as an OCI archive named `name` whose own (last) layer is the same tar gzipped at
    level 9 (as another zlib or version of the tool could have): its manifest's digest, the layer's digest in
    it and the one the tool gives the same tar."""
    import gzip
    import hashlib
    import tarfile

    work = archive.with_suffix(".d")
    shutil.copytree(oci, work)
    blobs = work / "blobs" / "sha256"
    index = json.loads((work / "index.json").read_text())
    manifest = json.loads((blobs / index["manifests"][0]["digest"][7:]).read_text())
    layer = manifest["layers"][-1]
    ours = layer["digest"]
    other = gzip.compress(gzip.decompress((blobs / ours[7:]).read_bytes()), compresslevel=9, mtime=0)
    layer.update(digest="sha256:" + hashlib.sha256(other).hexdigest(), size=len(other))
    assert layer["digest"] != ours, "level 9 gave the tool's own bytes: pick another compression"
    (blobs / layer["digest"][7:]).write_bytes(other)
    (blobs / ours[7:]).unlink()
    body = json.dumps(manifest).encode()
    digest = "sha256:" + hashlib.sha256(body).hexdigest()
    (blobs / digest[7:]).write_bytes(body)
    index["manifests"] = [{"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": digest,
                           "size": len(body), "annotations": {"org.opencontainers.image.ref.name": name}}]
    (work / "index.json").write_text(json.dumps(index))
    with tarfile.open(archive, "w") as tar:
        for item in sorted(work.rglob("*")):
            tar.add(item, arcname=str(item.relative_to(work)), recursive=False)
    return digest, layer["digest"], ours


@pytest.mark.slow
@pytest.mark.container
def test_a_loaded_base_whose_own_layer_was_compressed_otherwise_is_refused_naming_that_layer(
        demo_build, test_base, tmp_path):  # noqa: F811
    """A base podman holds whose layer of the tool's was gzipped otherwise than the tool gzips (another zlib or
    version): `podman save` gives the tar, the tool's gzip of it is another digest, so the image over it is
    refused (exit 1) naming that layer, the digest the tool's compression gives and what to do; nothing is
    delivered and no base is kept in the cache."""
    lock = _own_lock(demo_build.out, tmp_path / "own")
    _image(tmp_path, "under", lock, "--tag", "localhost/i49-regz:1", "--base", test_base,
           "--oci-dir", tmp_path / "oci-under")
    digest, theirs, ours = _recompressed(tmp_path / "oci-under", "localhost/i49-regz:1", tmp_path / "regz.tar")
    loaded = _engine("podman", "load", "-i", str(tmp_path / "regz.tar")).stdout
    try:
        assert "localhost/i49-regz:1" in loaded, loaded
        assert _engine("podman", "image", "inspect", "--format", "{{.Digest}}", "localhost/i49-regz:1"
                       ).stdout.strip() == digest
        cwd = tmp_path / "cwd-over"
        cwd.mkdir()
        r = Cli(cwd, {**isolated_env(cwd), **containers_env()})(
            "image", "--lock", demo_build.out / "stack.lock.toml", "--tag", "localhost/i49-regz-over:1",
            "--base", f"localhost/i49-regz@{digest}", "--oci-dir", tmp_path / "oci-over",
            "--cache-dir", tmp_path / "cache-over", timeout=1200)
        assert r.returncode == 1, str(r)
        assert "Traceback" not in r.stderr
        assert f"podman holds localhost/i49-regz@{digest}, but cannot give back" in r.stderr, r.stderr
        assert f"{theirs}: its tar compressed as this tool compresses a layer is {ours}" in r.stderr, r.stderr
        assert "TIP: name the base on a registry that holds that digest" in r.stderr, r.stderr
        assert not (tmp_path / "oci-over").exists()
        kept = tmp_path / "cache-over" / "images" / "base"
        assert not kept.exists() or not [p for p in kept.iterdir() if not p.name.startswith(".")], \
            sorted(kept.iterdir())
    finally:
        _engine("podman", "rmi", "-f", "localhost/i49-regz:1", check=False)
