"""Where an image goes: an OCI image layout on disk (--oci-dir), the local engine (--load podman|docker: an
OCI archive it loads, then tagged; podman's `load` started before the image is made, `PodmanLoad`), or a
registry (--push, with the remote wheel cache's client and credentials: blobs the registry holds are not sent
again, a base in another repository of it is mounted)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from toolchain.core.owned import check_ours
from toolchain.core.proc.runner import Completed, run
from toolchain.core.record import record
from toolchain.core.regex import Regex
from toolchain.errors import UsageError
from toolchain.image.base import engine_env, inspected, registry_for

if TYPE_CHECKING:  # (imported where used: `PodmanLoad` starts podman before the image's modules are read)
    from toolchain.image.assemble import Image

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
        got = inspected(engine, name, "{{json .Config.Labels}}")
        if got is None:
            return name  # (no image holds it)
        try:
            labels = json.loads(got.strip() or "null")
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
    from toolchain.image.assemble import write_layout

    return write_layout(image, oci_dir(dest), ref.name, ref.tag)


def load(image: Image, engine: str, ref: Ref, work: Path, started: PodmanLoad | None = None) -> str:
    """Load the image into `engine` and tag it `ref`; the name it has there. podman is first given an OCI archive
    of what the image adds, through a pipe (one process, `started` before the image was made, else now: it
    names the image from the archive and reuses the base's layers it holds); without the base, it loads the
    whole OCI layout folder. docker loads an archive of the layout."""
    from toolchain.image.assemble import canonical_json, write_layout

    if engine not in ENGINES:
        raise UsageError(f"--load {engine!r}: the engine is podman or docker")
    if engine == "podman" and (started or PodmanLoad()).feed(image, ref):
        return ref.name
    work.mkdir(parents=True, exist_ok=True)
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


class PodmanLoad:
    """`podman load` of an OCI archive read from a pipe, started before the image is made: podman's own start
    (its runtime and storage read before it reads its input: a third of a small load's time) runs while the
    tool makes the image, and the archive is written into the pipe as podman reads it (the tool writes none on
    disk). `feed` writes it (the blobs first, index.json last: a stream cut short names no image) and says
    whether podman took it. Never fed (the image was not made: an error, Ctrl-C), `close` ends the stream empty:
    podman loads nothing and exits; a stop signal stops it as every child (core/proc). Not loaded for any
    reason (its hour ran out while the image was made, say), `load` loads the whole layout instead."""

    def __init__(self) -> None:
        import threading

        read, write = os.pipe()  # (not inherited: only podman is given the read end)
        self._out = os.fdopen(write, "wb")
        self._done: list[Completed] = []

        def wait() -> None:
            try:
                self._done.append(run(["podman", "load", "-q"], env=engine_env(), capture=True, check=False,
                                      timeout=3600, stdin=read))
            except Exception:  # (timed out, say: not loaded; the layout is loaded instead, with its errors)
                pass
            finally:
                os.close(read)  # (podman gone: a write into the pipe fails at once, not when it is full)

        self._thread = threading.Thread(target=wait, name="podman-load", daemon=True)
        self._thread.start()

    def feed(self, image: Image, ref: Ref) -> bool:
        """The archive of what `image` adds to its base, named `ref`, written to podman; whether podman loaded
        it under that name (it refuses it when it lacks a base layer: nothing is stored then)."""
        from toolchain.image.assemble import write_thin_archive

        with contextlib.suppress(BrokenPipeError):  # (podman ended before it read it all: not loaded)
            write_thin_archive(image, self._out, ref.name)
        self.close()
        done = self._done[0] if self._done else None
        return done is not None and done.returncode == 0 and ref.name in done.stdout

    def close(self) -> None:
        """The stream ended (empty when never fed) and podman waited for."""
        with contextlib.suppress(BrokenPipeError):
            self._out.close()
        self._thread.join()


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
