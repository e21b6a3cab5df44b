"""Where an image goes: an OCI image layout on disk (--oci-dir), the local engine (--load podman|docker: an
OCI archive it loads, then tagged), or a registry (--push, with the remote wheel cache's client and
credentials: blobs the registry holds are not sent again, a base in another repository of it is mounted)."""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path

from toolchain.core.owned import check_ours
from toolchain.core.proc.runner import run
from toolchain.core.record import record
from toolchain.core.regex import Regex
from toolchain.errors import UsageError
from toolchain.image.assemble import Image, canonical_json, write_layout, write_thin_archive
from toolchain.image.base import engine_env, registry_for

ENGINES = ("podman", "docker")
NAME = Regex(r"^[a-z0-9]+(?:[._-]+[a-z0-9]+)*(?::[0-9]+)?(?:/[a-z0-9]+(?:[._-]+[a-z0-9]+)*)*$")
TAG = Regex(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")


@record
class Ref:
    """An image reference NAME[:TAG]: the registry host (when its first part names one), repository, tag."""
    host: str
    repository: str
    tag: str

    @property
    def name(self) -> str:
        """HOST/REPOSITORY:TAG (without a host: the repository as given)."""
        return f"{self.host}/{self.repository}:{self.tag}" if self.host else f"{self.repository}:{self.tag}"


def parse_ref(ref: str) -> Ref:
    """`[HOST[:PORT]/]NAME[:TAG]` (no digest: a tag is what is written); UsageError otherwise."""
    text = ref.strip()
    name, tag = text.rsplit(":", 1) if ":" in text.rsplit("/", 1)[-1] else (text, "latest")
    if not NAME.match(name) or not TAG.match(tag):
        raise UsageError(f"{ref!r} is not an image name [HOST[:PORT]/]NAME[:TAG] (lower-case name, no digest)",
                         hint="e.g. --tag localhost/my-stack:b70 or --tag registry.lan:5000/team/stack:1")
    first, _, rest = name.partition("/")
    host = first if rest and ("." in first or ":" in first or first == "localhost") else ""
    return Ref(host, rest if host else name, tag)


def name_of_ours(engine: str, tag: str) -> str:
    """`tag` when `engine` holds no image under it, or one the tool made (its labels carry the lock it was made
    from: an earlier image of the tool's may be replaced); else the first of TAG-2, TAG-3, ... that is so. A name
    an image the tool did not make holds is never moved (`bisect --keep-images`)."""
    from toolchain.image.assemble import A

    for n in range(1, 100):
        name = tag if n == 1 else f"{tag}-{n}"
        r = run([engine, "image", "inspect", "--format", "{{json .Config.Labels}}", name], env=engine_env(),
                capture=True, check=False, timeout=120)
        if r.returncode != 0:
            return name  # (no image holds it)
        try:
            labels = json.loads(r.stdout.strip() or "null")
        except ValueError:
            labels = None
        if isinstance(labels, dict) and A + "lock.sha256" in labels:
            return name
    raise UsageError(f"{tag} and {tag}-2 ... {tag}-99 all name images toolchain did not make in {engine}",
                     hint=f"remove or rename some of them ({engine} image ls {tag.rsplit(':', 1)[0]})")


def oci_dir(dest: Path) -> Path:
    """--oci-dir as given, made absolute without following it (a link there is refused, not followed), checked
    before the image is made: new, empty, or an OCI layout the tool wrote (core/owned.py; else UsageError)."""
    path = Path(os.path.abspath(dest))
    check_ours(path, "--oci-dir")
    return path


def to_oci_dir(image: Image, dest: Path, ref: Ref) -> Path:
    """The image as an OCI image layout at `dest` (replaced when the tool made it: `oci_dir`)."""
    return write_layout(image, oci_dir(dest), ref.name, ref.tag)


def load(image: Image, engine: str, ref: Ref, work: Path) -> str:
    """Load the image into `engine` and tag it `ref`; the name it has there. podman is first given an OCI archive
    of what the image adds (one process: it names the image from the archive and reuses the base's layers it
    holds); without the base, it loads the whole OCI layout folder. docker loads an archive of the layout."""
    if engine not in ENGINES:
        raise UsageError(f"--load {engine!r}: the engine is podman or docker")
    work.mkdir(parents=True, exist_ok=True)
    if engine == "podman" and _podman_thin(image, ref, work):
        return ref.name
    layout = write_layout(image, work / f"layout-{os.getpid()}", ref.name, ref.tag)
    if engine == "podman":
        try:
            # three podman processes: load the layout folder (the base's layers it holds are not read again),
            # tag it, and drop the name podman gave it after the folder (it says which)
            loaded = run([engine, "load", "-q", "-i", str(layout)], env=engine_env(), capture=True,
                         timeout=3600).stdout
            ident = image.config_digest[7:]
            run([engine, "tag", ident, ref.name], env=engine_env(), capture=True, timeout=120)
            for name in re.findall(r"^Loaded image\(?s?\)?: (.+)$", loaded, re.M):
                for one in name.split(","):
                    if str(layout).lower() in one and one.strip() != ref.name:
                        run([engine, "untag", ident, one.strip()], env=engine_env(), capture=True, timeout=120)
        finally:
            shutil.rmtree(layout, ignore_errors=True)
        return ref.name
    if engine == "docker":  # docker's image store loads an archive by its manifest.json (docker save writes both)
        layers = [f"blobs/sha256/{d.split(':', 1)[1]}" for d, _, _ in image.blobs()[:-1]]
        (layout / "manifest.json").write_bytes(canonical_json([{
            "Config": f"blobs/sha256/{image.config_digest.split(':', 1)[1]}", "RepoTags": [ref.name],
            "Layers": layers}]))
    archive = work / f"image-{os.getpid()}.tar"
    import tarfile

    try:
        with tarfile.open(archive, "w") as tar:
            for path in sorted(layout.rglob("*")):
                tar.add(path, arcname=path.relative_to(layout).as_posix(), recursive=False)
        log = work / "load.log"
        try:
            run([engine, "load", "-i", str(archive)], env=engine_env(), log=log, timeout=3600)
            run([engine, "tag", image.config_digest if engine == "docker" else image.config_digest[7:], ref.name],
                env=engine_env(), log=log, timeout=120)
        except KeyboardInterrupt:  # (a stop signal: the daemon may finish the load it was handed; undone)
            _unload(engine, image.config_digest, ref.name, log)
            raise
    finally:
        archive.unlink(missing_ok=True)
        shutil.rmtree(layout, ignore_errors=True)
    return ref.name


UNLOAD_WAIT = 15.0  # seconds a daemon is given to finish (or drop) a load whose client was stopped


def _unload(engine: str, ident: str, name: str, log: Path) -> None:
    """After a stop during `ENGINE load`: the daemon may still finish loading what it was sent (its client is
    gone, its work is not); the image it makes, by id, is removed as soon as it is there, so a stopped load
    leaves nothing. Ctrl-C again meanwhile is ignored (`NoSigint`): the clean-up finishes."""
    import time

    from toolchain.target.container.engine import NoSigint

    with NoSigint():
        deadline = time.monotonic() + UNLOAD_WAIT
        while time.monotonic() < deadline:
            held = run([engine, "image", "inspect", "--format", "{{.Id}}", ident], env=engine_env(), capture=True,
                       check=False, timeout=60)
            if held.returncode == 0:
                run([engine, "image", "rm", "-f", ident], env=engine_env(), log=log, check=False, timeout=300)
                return
            time.sleep(0.5)  # (none yet: the daemon is still loading, or dropped the cut stream)


def _podman_thin(image: Image, ref: Ref, work: Path) -> bool:
    """Load an OCI archive of the image without its base's layers into podman, named `ref` by the archive's
    index; whether podman took it (it refuses when it lacks a base layer: nothing is stored then)."""
    archive = write_thin_archive(image, work / f"thin-{os.getpid()}.tar", ref.name)
    try:
        done = run(["podman", "load", "-q", "-i", str(archive)], env=engine_env(), capture=True, check=False,
                   timeout=3600)
    finally:
        archive.unlink(missing_ok=True)
    return done.returncode == 0 and ref.name in done.stdout


def push(image: Image, ref: Ref, work: Path, *, insecure: bool = False, timeout: float = 60.0) -> tuple[str, int]:
    """Push the image to its registry as `ref` (a blob there already, or mounted from the base's repository on
    the same registry, is not sent); (the image's name by digest, the bytes uploaded)."""
    if not ref.host:
        raise UsageError(f"--push: {ref.name} names no registry", hint="tag it HOST[:PORT]/NAME[:TAG] to push it")
    base = parse_ref(image.base.name.split("@", 1)[0])
    registry = registry_for(ref.host, ref.repository, insecure, timeout)
    work.mkdir(parents=True, exist_ok=True)
    config = work / f"config-{os.getpid()}.json"
    config.write_bytes(image.config)

    def as_file(source: Callable[[], Path | bytes]) -> Callable[[], Path]:
        def where() -> Path:
            got = source()
            return got if isinstance(got, Path) else config
        return where

    try:
        blobs = [(as_file(source), {"mediaType": "application/octet-stream", "digest": digest, "size": size})
                 for digest, size, source in image.blobs()]
        sent = registry.push_image(ref.tag, blobs, image.manifest,
                                   mount_from=base.repository if base.host == ref.host else "")
    finally:
        config.unlink(missing_ok=True)
    return f"{ref.host}/{ref.repository}@{image.digest}", sent
