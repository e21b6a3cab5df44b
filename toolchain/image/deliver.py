"""Where an image goes: an OCI image layout on disk (--oci-dir), the local engine (--load podman|docker: an
archive it reads from a pipe, `PipedLoad`; podman's `load` started before the image is made), or a
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
from typing import TYPE_CHECKING, BinaryIO

from toolchain.core.owned import check_ours
from toolchain.core.proc.runner import Completed, run
from toolchain.core.record import record
from toolchain.core.regex import Regex
from toolchain.errors import BuildError, UsageError
from toolchain.image.base import engine_env, inspected, registry_for

if TYPE_CHECKING:  # (imported where used: `PipedLoad` starts podman before the image's modules are read)
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


def load(image: Image, engine: str, ref: Ref, work: Path, started: PipedLoad | None = None) -> str:
    """Load the image into `engine` and tag it `ref`; the name it has there. Each engine reads an archive from a
    pipe, written as it reads it (none on disk): podman (`started` before the image was made, else now) one of
    what the image adds, named, which it loads reusing the base's layers it holds; without the base, it loads
    the whole OCI layout folder. docker one of the whole image, unnamed, then tagged (`_docker_load`)."""
    if engine not in ENGINES:
        raise UsageError(f"--load {engine!r}: the engine is podman or docker")
    if engine == "docker":
        return _docker_load(image, ref, work)
    from toolchain.image.assemble import write_layout, write_thin_archive

    loader = started or PipedLoad("podman", work)
    done = loader.feed(lambda out: write_thin_archive(image, out, ref.name))
    if done is not None and done.returncode == 0 and ref.name in done.stdout:
        return ref.name  # (else podman lacks a base layer and stored nothing)
    work.mkdir(parents=True, exist_ok=True)
    layout = write_layout(image, work / f"layout-{os.getpid()}", ref.name, ref.tag)
    try:
        # three podman processes: load the layout folder (the base's layers it holds are not read again),
        # tag it, and drop the name podman gave it after the folder (it says which)
        loaded = run(["podman", "load", "-q", "-i", str(layout)], env=engine_env(), capture=True,
                     timeout=3600).stdout
        ident = image.config_digest[7:]
        run(["podman", "tag", ident, ref.name], env=engine_env(), capture=True, timeout=120)
        for name in re.findall(r"^Loaded image\(?s?\)?: (.+)$", loaded, re.M):
            for one in name.split(","):
                if str(layout).lower() in one and one.strip() != ref.name:
                    run(["podman", "untag", ident, one.strip()], env=engine_env(), capture=True, timeout=120)
    finally:
        shutil.rmtree(layout, ignore_errors=True)
    return ref.name


def _docker_load(image: Image, ref: Ref, work: Path) -> str:
    """docker's load of the whole image through a pipe (its manifest.json last, no name in it), then `docker tag`.
    Stopped (Ctrl-C) before the archive is whole: it is cut short, docker finds no manifest.json in it and loads
    nothing. Stopped after: docker loads it (its client is not stopped, and tells when it has); the image is then
    removed again unless docker held it before, so a stopped load leaves docker as it was."""
    from toolchain.image.assemble import write_docker_archive

    ident = image.config_digest
    held = inspected("docker", ident, "{{.Id}}") is not None  # (docker could not say: stops here, nothing removed)
    loader = PipedLoad("docker", work)
    log = work / "load.log"
    try:
        done = loader.feed(lambda out: write_docker_archive(image, out))
        if done is None or done.returncode != 0:
            raise BuildError(f"docker load of {ref.name} failed"
                             + (f": {(done.stderr or done.stdout).strip()}" if done is not None else ""),
                             hint="is the docker daemon running and reachable ($DOCKER_HOST)?")
        run(["docker", "tag", ident, ref.name], env=engine_env(), log=log, timeout=120)
    except KeyboardInterrupt:
        from toolchain.target.container.engine import NoSigint

        with NoSigint():  # (Ctrl-C again meanwhile: the clean-up finishes)
            done = loader.close()  # (cut short when not whole; docker's client ends by itself either way)
            if not held and done is not None and done.returncode == 0:
                run(["docker", "image", "rm", "-f", ident], env=engine_env(), log=log, check=False, timeout=300)
        raise
    return ref.name


class PipedLoad:
    """`ENGINE load` of an archive read from a pipe, started before the archive is written (podman: before the
    image is made, so that its own start, its runtime and storage read before it reads its input, a third of a
    small load's time, runs while the tool makes the image); the archive is written into the pipe as the engine
    reads it (the tool writes none on disk), its index last (podman's index.json, docker's manifest.json): a
    stream cut short names no image, and the engine loads nothing from it. A stop signal does not reach the
    engine's client (`run(stop_signal=0)`): its input is ended instead (`close`), cut short when not whole, and
    it ends by itself, having removed what it read (it keeps it in a temporary file; SIGTERM left that behind),
    before the tool exits. Its temporary files go in a folder of the tool's under `work`, removed when it ends
    (even when killed). Not loaded for any reason (podman's hour ran out while the image was made, say), `load`
    loads the whole layout instead."""

    def __init__(self, engine: str, work: Path) -> None:
        import tempfile
        import threading

        work.mkdir(parents=True, exist_ok=True)
        tmp = tempfile.mkdtemp(prefix=f"{engine}-load-", dir=work)
        read, write = os.pipe()  # (not inherited: only the engine is given the read end)
        self._out = os.fdopen(write, "wb")
        self._done: list[Completed] = []
        self._ended = threading.Event()

        def wait() -> None:
            try:
                self._done.append(run([engine, "load", "-q"], env={**engine_env(), "TMPDIR": tmp}, capture=True,
                                      check=False, timeout=3600, stdin=read, stop_signal=0))
            except Exception:  # (timed out, say: not loaded; podman is given the layout instead, docker fails)
                pass
            finally:
                os.close(read)  # (the engine gone: a write into the pipe fails at once, not when it is full)
                shutil.rmtree(tmp, ignore_errors=True)
                self._ended.set()

        self._thread = threading.Thread(target=wait, name=f"{engine}-load", daemon=True)
        self._thread.start()

    def feed(self, write: Callable[[BinaryIO], None]) -> Completed | None:
        """The archive written into the pipe by `write`, the stream ended, the engine waited for: how its `load`
        ended (None: it did not run). A stop meanwhile ends the stream where it was (the caller's `close`)."""
        with contextlib.suppress(BrokenPipeError):  # (the engine ended before it read it all: not loaded)
            write(self._out)
        return self.close()

    def close(self) -> Completed | None:
        """The stream ended (empty when never fed, cut short when a stop came while it was written) and the
        engine waited for: how its `load` ended (None: it did not run)."""
        with contextlib.suppress(BrokenPipeError):
            self._out.close()
        # (an Event, not Thread.join: a join a Ctrl-C interrupts marks the thread ended while it runs on, and
        # every later join returns at once, CPython's bpo-45274 fix)
        self._ended.wait()
        return self._done[0] if self._done else None


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
