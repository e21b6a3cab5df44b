"""The base image: its manifest, config and blobs as an OCI layout kept in the cache by digest (`podman save
--uncompressed --format oci-dir`: the manifest the engine holds, whose sha256 IS the pinned digest, checked),
and its interpreter's facts, read in a container of it (toolchain/scripts/image_python.py)."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

from toolchain.console import UI
from toolchain.core.fs import publish_dir, sha256_file
from toolchain.core.proc import run
from toolchain.core.record import record
from toolchain.errors import BuildError, UsageError

PINNED = re.compile(r"^(?P<name>[^@\s]+)@(?P<digest>sha256:[0-9a-f]{64})$")


@record
class Replaced:
    """A distribution the base holds inside the install scheme that the layer installs again: what pip's
    uninstall would remove (files, and the folders it leaves empty), absolute paths in the image."""
    name: str
    version: str
    files: tuple[str, ...] = ()
    dirs: tuple[str, ...] = ()


@record
class Interpreter:
    """The base image's interpreter as read inside it."""
    executable: str
    python_version: str
    python_tag: str          # cp311
    soabi: str               # cpython-311-x86_64-linux-gnu
    platform: str            # linux_x86_64
    glibc: str               # 2.36 ("" for another C library)
    scheme: dict[str, str]   # purelib, platlib, scripts, data, include: folders with links resolved
    replaced: tuple[Replaced, ...] = ()


@record
class BaseImage:
    """A base image pinned by digest, kept as an OCI layout (`layout`): its manifest and config."""
    name: str                # as given, NAME@sha256:...
    digest: str
    layout: Path
    manifest: dict[str, Any]
    config: dict[str, Any]

    def blob(self, digest: str) -> Path:
        """Where the layout keeps the blob `digest`."""
        return self.layout / "blobs" / "sha256" / digest.split(":", 1)[1]


def pinned(image: str, origin: str) -> tuple[str, str]:
    """(name, digest) of `NAME@sha256:<64 hex>`; UsageError (exit 2) for an image not pinned by digest."""
    m = PINNED.match(image.strip())
    if not m:
        raise UsageError(f"{origin}: {image!r} is not pinned by digest",
                         hint="name the base as NAME@sha256:<64 hex> (`podman image inspect --format "
                              "'{{.Digest}}' NAME` shows it)")
    return m["name"], m["digest"]


def engine_env() -> dict[str, str]:
    """The environment the engine commands run with (this one: CONTAINERS_CONF, DOCKER_HOST pass through)."""
    return dict(os.environ)


def keep_base(image: str, cache_dir: Path, engine: str, ui: UI) -> BaseImage:
    """The base as an OCI layout under `<cache>/images/base/<digest>` (saved once from the local `engine`,
    pulled first when it does not hold it); BuildError when what the engine holds is not that digest."""
    name, digest = pinned(image, "the base image")
    final = cache_dir / "images" / "base" / digest.split(":", 1)[1]
    if not (final / "index.json").is_file():
        tmp = final.parent / f".{final.name}.{os.getpid()}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.parent.mkdir(parents=True, exist_ok=True)
        log = cache_dir / "images" / "logs" / f"{final.name[:16]}.log"
        have = run([engine, "image", "inspect", image], env=engine_env(), capture=True, check=False, timeout=120)
        if have.returncode != 0:
            with ui.status(f"pulling the base image {image}"):
                run([engine, "pull", image], env=engine_env(), log=log, timeout=3600,
                    hint=f"the base image must be pullable by {engine}, or loaded into it")
        with ui.status(f"reading the base image {image}"):
            run([engine, "save", "--uncompressed", "--format", "oci-dir", "-o", str(tmp), image], env=engine_env(),
                log=log, timeout=3600)
        _check_saved(tmp, image, digest)
        publish_dir(tmp, final)
    index = json.loads((final / "index.json").read_text())
    mdigest = index["manifests"][0]["digest"]
    layout = final
    manifest = json.loads((layout / "blobs" / "sha256" / mdigest.split(":", 1)[1]).read_bytes())
    config = json.loads((layout / "blobs" / "sha256" / manifest["config"]["digest"].split(":", 1)[1]).read_bytes())
    return BaseImage(name=name, digest=digest, layout=layout, manifest=manifest, config=config)


def _check_saved(layout: Path, image: str, digest: str) -> None:
    index = json.loads((layout / "index.json").read_text())
    saved = index["manifests"][0]["digest"]
    got = "sha256:" + sha256_file(layout / "blobs" / "sha256" / saved.split(":", 1)[1])
    if saved != digest or got != digest:
        shutil.rmtree(layout, ignore_errors=True)
        raise BuildError(f"the engine's copy of {image} has manifest {got}, not the pinned {digest}",
                         hint="pull the image by that digest again (`podman pull NAME@DIGEST`), or pin the digest "
                              "the engine holds")


def read_interpreter(image: str, engine: str, python: str, names: list[str], ui: UI) -> Interpreter:
    """The base's interpreter (`python` in a one-off container of `image`) and what it holds of `names`."""
    from toolchain.recipe.model import TargetSpec
    from toolchain.target import make_runtime

    spec = TargetSpec(runtime=engine, image=image, python=python)
    with make_runtime(spec, ui) as runtime, ui.status(f"reading the interpreter of {image}"):
        done = runtime.run([python, runtime.script("image_python.py"), *names], capture=True, check=False,
                           timeout=300)
    try:
        data = json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise BuildError(f"cannot read the interpreter {python} of the base image {image} "
                         f"(exit {done.returncode}): {(done.stderr or done.stdout).strip()[-300:]}",
                         hint="the base needs the lock's Python; pass --python PATH when it is not on PATH") from None
    replaced = tuple(Replaced(r["name"], r["version"], tuple(r["files"]), tuple(r["dirs"])) for r in data["replaced"])
    return Interpreter(executable=data["executable"], python_version=data["python-version"],
                       python_tag=data["python-tag"], soabi=data["soabi"], platform=data["platform"],
                       glibc=data["glibc"], scheme=dict(data["scheme"]), replaced=replaced)
