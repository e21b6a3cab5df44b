"""The image around the layer: its config (the base's, with the layer's diff_id, labels, `created` at the
epoch and one history entry), its manifest (the base's layers by digest, then the layer; annotations) and an
OCI image layout on disk holding them. JSON is written with sorted keys and no spaces: the digests are a pure
function of the base, the layer and the labels."""

from __future__ import annotations

import functools
import json
import os
import shutil
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, BinaryIO

from toolchain.core.fs import atomic_write_bytes, sha256_bytes
from toolchain.core.owned import check_ours, mark, replace_ours
from toolchain.core.record import record
from toolchain.image.base import BaseImage
from toolchain.image.gzipped import HISTORY_COMMENT
from toolchain.image.layer import Layer

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER_GZ = "application/vnd.oci.image.layer.v1.tar+gzip"
# Docker's media types name the same bytes as OCI's: the manifest is written with OCI's
TO_OCI = {"application/vnd.docker.image.rootfs.diff.tar.gzip": OCI_LAYER_GZ,
          "application/vnd.docker.image.rootfs.diff.tar": "application/vnd.oci.image.layer.v1.tar",
          "application/vnd.docker.container.image.v1+json": OCI_CONFIG}
A = "vnd.xpu-toolchain."   # our labels: A + "lock.sha256", "recipe", "commit.<component>", ...
REF_NAME = "org.opencontainers.image.ref.name"
LAYOUT_VERSION = b'{"imageLayoutVersion":"1.0.0"}'


def canonical_json(doc: Any) -> bytes:
    """`doc` as the bytes whose sha256 is its digest: sorted keys, no spaces."""
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def rfc3339(epoch: int) -> str:
    """The epoch as OCI's `created` (UTC, seconds)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


@record
class Image:
    """An assembled image: its config and manifest bytes and digests, the layer, and the base."""
    base: BaseImage
    layer: Layer
    config: bytes
    manifest: bytes
    labels: dict[str, str]

    @property
    def digest(self) -> str:
        """The image's digest: its manifest's sha256."""
        return "sha256:" + sha256_bytes(self.manifest)

    @property
    def config_digest(self) -> str:
        """The config's sha256 (the image id docker and podman show)."""
        return "sha256:" + sha256_bytes(self.config)

    def blobs(self) -> list[tuple[str, int, Callable[[], Path | bytes]]]:
        """Every blob the image is made of, (digest, size, its bytes or file when asked: a base read from a
        registry downloads a layer then), the base's layers first, the config last."""
        out: list[tuple[str, int, Callable[[], Path | bytes]]] = [
            (str(d["digest"]), int(d["size"]), functools.partial(self.base.blob, str(d["digest"])))
            for d in self.base.manifest["layers"]]
        out.append((self.layer.digest, self.layer.size, lambda: self.layer.blob))
        out.append((self.config_digest, len(self.config), lambda: self.config))
        return out


def assemble(base: BaseImage, layer: Layer, labels: Mapping[str, str], epoch: int, created_by: str) -> Image:
    """Config and manifest of the base plus `layer`, labelled."""
    config = json.loads(canonical_json(base.config))  # (a copy: the base's JSON, changed here)
    created = rfc3339(epoch)
    config["created"] = created
    inner = config.setdefault("config", {}) or {}
    config["config"] = inner
    inner["Labels"] = {**(inner.get("Labels") or {}), **labels}
    config.setdefault("rootfs", {"type": "layers", "diff_ids": []})
    config["rootfs"]["diff_ids"] = [*config["rootfs"].get("diff_ids", []), layer.diff_id]
    config["history"] = [*(config.get("history") or []),
                         {"created": created, "created_by": created_by, "comment": HISTORY_COMMENT}]
    config_bytes = canonical_json(config)
    layers = [{"mediaType": TO_OCI.get(d["mediaType"], d["mediaType"]), "digest": d["digest"], "size": d["size"]}
              for d in base.manifest["layers"]]
    layers.append({"mediaType": OCI_LAYER_GZ, "digest": layer.digest, "size": layer.size})
    manifest = {"schemaVersion": 2, "mediaType": OCI_MANIFEST,
                "config": {"mediaType": OCI_CONFIG, "digest": "sha256:" + sha256_bytes(config_bytes),
                           "size": len(config_bytes)},
                "layers": layers, "annotations": dict(labels)}
    return Image(base=base, layer=layer, config=config_bytes, manifest=canonical_json(manifest), labels=dict(labels))


def layout_index(image: Image, ref: str, tag: str) -> bytes:
    """index.json of an OCI image layout holding `image`, naming it `ref` (containerd's annotation, which podman
    also reads from an OCI archive) and `tag`."""
    return canonical_json({"schemaVersion": 2, "mediaType": OCI_INDEX,
                           "manifests": [{"mediaType": OCI_MANIFEST, "digest": image.digest,
                                          "size": len(image.manifest),
                                          "annotations": {REF_NAME: tag, "io.containerd.image.name": ref}}]})


def write_layout(image: Image, dest: Path, ref: str, tag: str, *, what: str = "--oci-dir") -> Path:
    """An OCI image layout at `dest` (made afresh): every blob (the base's linked from the cache where the
    file system allows), the manifest, and index.json naming it `ref` (containerd) and `tag`. An existing
    `dest` is replaced only when the tool made it, or it is empty (core/owned.py; else UsageError naming
    `what`, and `dest` is as it was)."""
    check_ours(dest, what)
    tmp = dest.parent / f".{dest.name}.{os.getpid()}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    blobs = tmp / "blobs" / "sha256"
    blobs.mkdir(parents=True)
    for digest, _, source in [*image.blobs(), (image.digest, len(image.manifest), lambda: image.manifest)]:
        target = blobs / digest.split(":", 1)[1]
        if target.exists():
            continue
        where = source()
        if isinstance(where, bytes):
            target.write_bytes(where)
            continue
        try:
            os.link(where, target)
        except OSError:
            shutil.copyfile(where, target)
    (tmp / "oci-layout").write_bytes(LAYOUT_VERSION)
    atomic_write_bytes(tmp / "index.json", layout_index(image, ref, tag))
    mark(tmp)
    try:
        return replace_ours(tmp, dest, what)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def write_thin_archive(image: Image, out: BinaryIO, ref: str) -> None:
    """An OCI archive (a tar of the layout) of what the image adds to its base, streamed to `out`: the layer,
    config and manifest, then oci-layout and index.json (last: an archive cut short names no image), without
    the base's layers. An engine that already holds the base reuses those by digest; one that does not fails
    to load it (the caller falls back to the whole layout)."""
    import io
    import tarfile

    with tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo(f"blobs/sha256/{image.layer.digest[7:]}")
        info.size, info.mode = image.layer.size, 0o644
        with image.layer.blob.open("rb") as layer:
            tar.addfile(info, layer)
        for name, data in ((f"blobs/sha256/{image.config_digest[7:]}", image.config),
                           (f"blobs/sha256/{image.digest[7:]}", image.manifest), ("oci-layout", LAYOUT_VERSION),
                           ("index.json", layout_index(image, ref, ref.rsplit(":", 1)[-1]))):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))


def write_docker_archive(image: Image, out: BinaryIO) -> None:
    """The whole image as `docker load` reads it, streamed to `out`: every blob (the base's layers too, each
    once), then manifest.json (last: an archive cut short names no image, and docker loads nothing from it). It
    names no tag: the image is tagged once it is loaded (a stopped load moves no name)."""
    import io
    import tarfile

    with tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        written: set[str] = set()
        for digest, size, source in image.blobs():
            name = f"blobs/sha256/{digest.split(':', 1)[1]}"
            if name in written:
                continue
            written.add(name)
            info = tarfile.TarInfo(name)
            info.size, info.mode = size, 0o644
            where = source()
            if isinstance(where, bytes):
                tar.addfile(info, io.BytesIO(where))
            else:
                with where.open("rb") as blob:
                    tar.addfile(info, blob)
        blobs = image.blobs()
        manifest = canonical_json([{"Config": f"blobs/sha256/{image.config_digest.split(':', 1)[1]}", "RepoTags": [],
                                    "Layers": [f"blobs/sha256/{d.split(':', 1)[1]}" for d, _, _ in blobs[:-1]]}])
        info = tarfile.TarInfo("manifest.json")
        info.size, info.mode = len(manifest), 0o644
        tar.addfile(info, io.BytesIO(manifest))
