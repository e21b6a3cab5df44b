"""The `registry` / `auth_registry` fixtures (tests/support/registry.py) give a real OCI registry: blobs and
manifests pushed through the distribution HTTP API come back byte for byte, auth is enforced, and no
registry process outlives its block."""

from __future__ import annotations

import hashlib
import json
import os
from urllib.parse import urljoin

import pytest
import requests

from tests.support.registry import registry_available, run_registry

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
LAYER = "application/vnd.toolchain.wheel.v1"
TIMEOUT = 30


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def push_blob(reg, name: str, data: bytes, auth=None) -> str:
    """Monolithic upload: POST /v2/<name>/blobs/uploads/, then PUT <Location>?digest=<digest> with the bytes."""
    digest = digest_of(data)
    r = requests.post(f"{reg.url}/v2/{name}/blobs/uploads/", auth=auth, timeout=TIMEOUT)
    assert r.status_code == 202, (r.status_code, r.text)
    location = urljoin(reg.url + "/", r.headers["Location"])  # distribution answers with an absolute URL
    sep = "&" if "?" in location else "?"
    r = requests.put(f"{location}{sep}digest={digest}", data=data, auth=auth, timeout=TIMEOUT,
                     headers={"Content-Type": "application/octet-stream"})
    assert r.status_code == 201, (r.status_code, r.text)
    assert r.headers["Docker-Content-Digest"] == digest
    return digest


def push_artifact(reg, name: str, tag: str, payload: bytes, auth=None) -> tuple[bytes, str, str]:
    """One layer + an empty config + an OCI manifest; returns (manifest bytes, manifest digest, layer digest)."""
    config = b"{}"
    config_digest = push_blob(reg, name, config, auth)
    layer_digest = push_blob(reg, name, payload, auth)
    manifest = json.dumps({
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {"mediaType": OCI_CONFIG, "digest": config_digest, "size": len(config)},
        "layers": [{"mediaType": LAYER, "digest": layer_digest, "size": len(payload),
                    "annotations": {"org.opencontainers.image.title": "demo-1.0-py3-none-any.whl"}}],
    }, sort_keys=True).encode()
    r = requests.put(f"{reg.url}/v2/{name}/manifests/{tag}", data=manifest, auth=auth, timeout=TIMEOUT,
                     headers={"Content-Type": OCI_MANIFEST})
    assert r.status_code == 201, (r.status_code, r.text)
    assert r.headers["Docker-Content-Digest"] == digest_of(manifest)
    return manifest, digest_of(manifest), layer_digest


def test_push_and_read_back_a_blob_and_manifest(registry):
    assert registry.username is None
    assert registry.auth is None
    assert registry.address == f"127.0.0.1:{registry.port}"
    assert registry.url == f"http://{registry.address}"
    payload = os.urandom(4096)
    manifest, manifest_digest, layer_digest = push_artifact(registry, "toolchain/wheels", "demo-1", payload)

    r = requests.get(f"{registry.url}/v2/toolchain/wheels/manifests/demo-1", headers={"Accept": OCI_MANIFEST},
                     timeout=TIMEOUT)
    assert r.status_code == 200
    assert r.content == manifest
    assert r.headers["Docker-Content-Digest"] == manifest_digest
    r = requests.get(f"{registry.url}/v2/toolchain/wheels/manifests/{manifest_digest}",
                     headers={"Accept": OCI_MANIFEST}, timeout=TIMEOUT)
    assert r.status_code == 200
    assert r.content == manifest
    r = requests.get(f"{registry.url}/v2/toolchain/wheels/blobs/{layer_digest}", timeout=TIMEOUT)
    assert r.status_code == 200
    assert r.content == payload
    assert requests.head(f"{registry.url}/v2/toolchain/wheels/blobs/{digest_of(b'nope')}",
                         timeout=TIMEOUT).status_code == 404
    assert requests.get(f"{registry.url}/v2/toolchain/wheels/tags/list", timeout=TIMEOUT).json() == \
           {"name": "toolchain/wheels", "tags": ["demo-1"]}
    # the blob is in this test's own storage directory
    data = registry.storage / "docker/registry/v2/blobs/sha256" / layer_digest[7:9] / layer_digest[7:] / "data"
    assert data.read_bytes() == payload


def test_auth_registry_refuses_without_credentials_and_accepts_with_them(auth_registry):
    reg = auth_registry
    assert reg.username
    assert reg.password
    assert reg.auth == (reg.username, reg.password)
    r = requests.get(f"{reg.url}/v2/", timeout=TIMEOUT)
    assert r.status_code == 401
    assert r.headers["WWW-Authenticate"].startswith("Basic")
    assert requests.get(f"{reg.url}/v2/", auth=(reg.username, "wrong"), timeout=TIMEOUT).status_code == 401
    assert requests.post(f"{reg.url}/v2/toolchain/wheels/blobs/uploads/", timeout=TIMEOUT).status_code == 401
    assert requests.get(f"{reg.url}/v2/", auth=reg.auth, timeout=TIMEOUT).status_code == 200

    payload = b"wheel bytes"
    manifest, _, layer_digest = push_artifact(reg, "toolchain/wheels", "t1", payload, auth=reg.auth)
    url = f"{reg.url}/v2/toolchain/wheels/manifests/t1"
    assert requests.get(url, headers={"Accept": OCI_MANIFEST}, timeout=TIMEOUT).status_code == 401
    r = requests.get(url, headers={"Accept": OCI_MANIFEST}, auth=reg.auth, timeout=TIMEOUT)
    assert r.status_code == 200
    assert r.content == manifest
    blob = f"{reg.url}/v2/toolchain/wheels/blobs/{layer_digest}"
    assert requests.get(blob, timeout=TIMEOUT).status_code == 401
    assert requests.get(blob, auth=reg.auth, timeout=TIMEOUT).content == payload


def test_kill_stops_it_at_once(registry):
    assert registry.alive()
    registry.kill()
    assert not registry.alive()
    with pytest.raises(requests.ConnectionError):
        requests.get(f"{registry.url}/v2/", timeout=5)
    registry.kill()  # twice is fine; so is the fixture's stop afterwards


def test_no_process_is_left_behind(tmp_path):
    ok, reason = registry_available()
    if not ok:
        pytest.skip(reason)
    with run_registry(tmp_path / "a") as reg:
        proc = reg.process
        assert proc is not None
        pid = proc.pid
        assert requests.get(f"{reg.url}/v2/", timeout=TIMEOUT).status_code == 200
    assert proc.returncode is not None
    assert not os.path.exists(f"/proc/{pid}")
    with pytest.raises(KeyError, match="boom"), run_registry() as reg:  # noqa: PT012 (an error in the block stops it too)
        proc = reg.process
        assert proc is not None
        pid, workdir = proc.pid, reg.storage.parent  # in a temporary directory, removed afterwards
        raise KeyError("boom")
    assert proc is not None and proc.returncode is not None
    assert not os.path.exists(f"/proc/{pid}")
    assert not workdir.exists()

