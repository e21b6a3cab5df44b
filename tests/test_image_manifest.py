"""A base image's manifest through the one registry client (sharing/registry.py `image_manifest`, read by
target/container/presence.py `registry_size`): a real registry on 127.0.0.1 holds an image and an index; the
size a pull would download is the sum of the layers of this machine's linux image; what cannot be asked says why."""

from __future__ import annotations

import hashlib
import json
import platform
from urllib.parse import urljoin

import requests

from toolchain.sharing.registry import image_manifest, split_image
from toolchain.target.container.presence import ARCH, registry_size

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
TIMEOUT = 30


def _put(reg, repo: str, ref: str, doc: dict, media_type: str) -> str:
    body = json.dumps(doc, sort_keys=True).encode()
    r = requests.put(f"{reg.url}/v2/{repo}/manifests/{ref}", data=body, headers={"Content-Type": media_type},
                     timeout=TIMEOUT)
    assert r.status_code == 201, (r.status_code, r.text)
    return "sha256:" + hashlib.sha256(body).hexdigest()


def _blob(reg, repo: str, data: bytes) -> dict:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    r = requests.post(f"{reg.url}/v2/{repo}/blobs/uploads/", timeout=TIMEOUT)
    assert r.status_code == 202, (r.status_code, r.text)
    location = urljoin(reg.url + "/", r.headers["Location"])
    r = requests.put(f"{location}{'&' if '?' in location else '?'}digest={digest}", data=data, timeout=TIMEOUT,
                     headers={"Content-Type": "application/octet-stream"})
    assert r.status_code == 201, (r.status_code, r.text)
    return {"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": digest, "size": len(data)}


def _image(reg, repo: str, ref: str, sizes: list[int]) -> str:
    config = _blob(reg, repo, b"{}")
    layers = [_blob(reg, repo, bytes([i]) * size) for i, size in enumerate(sizes, 1)]
    return _put(reg, repo, ref, {"schemaVersion": 2, "mediaType": OCI_MANIFEST,
                                 "config": {**config, "mediaType": "application/vnd.oci.image.config.v1+json"},
                                 "layers": layers}, OCI_MANIFEST)


def test_an_image_reference_is_split_as_docker_reads_it():
    assert split_image("ubuntu") == ("registry-1.docker.io", "library/ubuntu", "latest")
    assert split_image("127.0.0.1:5000/team/base:1") == ("127.0.0.1:5000", "team/base", "1")
    assert split_image("quay.io/x/y@sha256:" + "a" * 64) == ("quay.io", "x/y", "sha256:" + "a" * 64)


def test_the_size_of_an_absent_image_comes_from_its_registry(registry):
    _image(registry, "team/base", "1", [1000, 2345])
    image = f"{registry.address}/team/base:1"
    assert image_manifest(image)["mediaType"] == OCI_MANIFEST
    assert registry_size(image) == (3345, "")


def test_an_index_is_read_for_this_machines_platform(registry):
    arch = ARCH.get(platform.machine(), platform.machine())
    mine = _image(registry, "team/multi", "mine", [700, 300])
    other = _image(registry, "team/multi", "other", [99])
    _put(registry, "team/multi", "2", {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [
        {"mediaType": OCI_MANIFEST, "digest": other, "size": 1, "platform": {"architecture": "s390x", "os": "linux"}},
        {"mediaType": OCI_MANIFEST, "digest": mine, "size": 1, "platform": {"architecture": arch, "os": "linux"}},
    ]}, OCI_INDEX)
    assert registry_size(f"{registry.address}/team/multi:2") == (1000, "")


def test_what_the_registry_does_not_give_is_said(registry, auth_registry):
    size, why = registry_size(f"{registry.address}/team/absent:1")
    assert size == 0 and f"{registry.address} answered HTTP 404 for team/absent" in why
    size, why = registry_size(f"{auth_registry.address}/team/base:1")  # anonymous: a Basic challenge is not answered
    assert size == 0 and "answered HTTP 401" in why
    registry.kill()
    size, why = registry_size(f"{registry.address}/team/base:1")
    assert size == 0 and "cannot be reached (offline?)" in why
