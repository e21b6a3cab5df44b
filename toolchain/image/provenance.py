"""A deployed image's provenance read back (`toolchain lock --image REF`): its labels and the lock it carries
at LOCK_PATH, from the local engine (a container created, never started, the file copied out) or from a
registry (the manifest, the config, and the top layer, which holds the lock); the lock's sha256 is checked
against the label."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import tarfile
from pathlib import Path
from typing import Any

from toolchain.core.fs import sha256_bytes
from toolchain.core.proc.runner import run
from toolchain.core.record import record
from toolchain.errors import TestFailed, UsageError
from toolchain.image.assemble import A
from toolchain.image.base import engine_env, inspected, registry_for
from toolchain.image.deliver import ENGINES, parse_ref
from toolchain.image.layer import LOCK_PATH

MAX_LOCK = 64 << 20


@record
class Provenance:
    """What an image says it was built from: where it was read, its digest, labels and lock."""
    where: str
    digest: str
    labels: dict[str, str]
    lock_text: str
    image_id: str = ""  # the config's digest, as the engine names the image

    @property
    def named(self) -> str:
        """How the image is named by digest: its manifest's, else (an image docker loaded, whose manifest it does
        not keep) its id, saying so."""
        if self.digest:
            return self.digest
        return f"id {self.image_id}: the engine keeps no manifest digest" if self.image_id else "no digest"

    @property
    def components(self) -> dict[str, str]:
        """{component: commit} from the labels."""
        return {k[len(A + "commit."):]: v for k, v in sorted(self.labels.items()) if k.startswith(A + "commit.")}


def _checked(where: str, digest: str, labels: dict[str, str], lock: bytes, image_id: str = "") -> Provenance:
    said = labels.get(A + "lock.sha256", "")
    if not said:
        raise UsageError(f"{where}: the image carries no {A}lock.sha256 label: it was not made by `toolchain image`")
    if sha256_bytes(lock) != said:
        raise TestFailed(f"{where}: /{LOCK_PATH} has sha256 {sha256_bytes(lock)}, the image's label says {said}")
    return Provenance(where, digest, dict(labels), lock.decode(), image_id)


def from_engine(ref: str, engine: str, work: Path) -> Provenance | None:
    """The provenance of `ref` held by the local `engine`; None when it does not hold it."""
    env = engine_env()
    got = inspected(engine, ref)
    if got is None:
        return None
    doc = json.loads(got)[0]
    labels = (doc.get("Config") or {}).get("Labels") or doc.get("Labels") or {}
    digest = str(doc.get("Digest") or next(iter(doc.get("RepoDigests") or []), "").partition("@")[2])
    created = run([engine, "create", ref], env=env, capture=True, timeout=300).stdout.strip().splitlines()[-1]
    work.mkdir(parents=True, exist_ok=True)
    dest = work / f"lock-{os.getpid()}.toml"
    try:
        run([engine, "cp", f"{created}:/{LOCK_PATH}", str(dest)], env=env, capture=True, timeout=300)
        data = dest.read_bytes()
    finally:
        run([engine, "rm", "-f", created], env=env, capture=True, check=False, timeout=120)
        dest.unlink(missing_ok=True)
    return _checked(f"{ref} ({engine})", digest, {str(k): str(v) for k, v in labels.items()}, data,
                    str(doc.get("Id") or ""))


def from_registry(ref: str, work: Path, *, insecure: bool = False, timeout: float = 60.0) -> Provenance:
    """The provenance of `ref` in its registry (credentials as the remote cache finds them)."""
    r = parse_ref(ref)
    if not r.host:
        raise UsageError(f"{ref}: not held by a local engine, and it names no registry",
                         hint="name it HOST[:PORT]/NAME[:TAG], or load it into podman or docker")
    registry = registry_for(r.host, r.repository, insecure, timeout)
    got = registry.manifest(r.tag)
    if got is None:
        raise UsageError(f"{r.name}: the registry holds no such image")
    manifest, digest = got
    work.mkdir(parents=True, exist_ok=True)
    config_file, layer_file = work / f"config-{os.getpid()}.json", work / f"layer-{os.getpid()}.tar.gz"
    try:
        registry.blob_to(manifest["config"], config_file, MAX_LOCK)
        config: dict[str, Any] = json.loads(config_file.read_bytes())
        labels = (config.get("config") or {}).get("Labels") or {}
        registry.blob_to(manifest["layers"][-1], layer_file, 1 << 40)
        with gzip.open(layer_file) as gz, tarfile.open(fileobj=gz, mode="r|") as tar:
            data = None
            for member in tar:
                if member.name.lstrip("./") == LOCK_PATH and member.isfile() and member.size <= MAX_LOCK:
                    f = tar.extractfile(member)
                    data = f.read() if f else None
                    break
    finally:
        config_file.unlink(missing_ok=True)
        layer_file.unlink(missing_ok=True)
    if data is None:
        raise UsageError(f"{r.name}: its top layer holds no /{LOCK_PATH}: it was not made by `toolchain image`")
    return _checked(r.name, digest, {str(k): str(v) for k, v in labels.items()}, data)


def read_provenance(ref: str, work: Path, *, insecure: bool = False) -> Provenance:
    """From the first local engine that holds `ref` (podman, then docker), else from its registry."""
    for engine in ENGINES:
        if shutil.which(engine) is None:
            continue
        found = from_engine(ref, engine, work)
        if found is not None:
            return found
    return from_registry(ref, work, insecure=insecure)
