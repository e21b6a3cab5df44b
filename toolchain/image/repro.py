"""`verify-repro --lock LOCK --image REF`: the image made again from the lock, in a fresh cache, compared with
REF by digest; on a difference, the first entry of the layer that differs (path, then what: mode, owner,
mtime, size, content), and diffoscope's report of the two layers where it is installed."""

from __future__ import annotations

import hashlib
import shutil
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from toolchain.console import UI
from toolchain.core.proc.runner import run
from toolchain.errors import UsageError
from toolchain.image.base import engine_env, registry_for
from toolchain.image.make import BASE_DIGEST, make_image
from toolchain.image.provenance import Provenance, read_provenance


def _members(layer: Path) -> Iterator[tuple[str, tuple[Any, ...]]]:
    """(path, (kind, mode, uid, gid, mtime, size, sha256)) of each entry, in the tar's order."""
    with tarfile.open(layer, "r:*") as tar:
        for m in tar:
            data = tar.extractfile(m) if m.isfile() else None
            digest = hashlib.sha256(data.read()).hexdigest() if data is not None else ""
            yield m.name.lstrip("./"), (m.type, m.mode, m.uid, m.gid, m.mtime, m.size, digest, m.linkname)


FIELDS = ("kind", "mode", "uid", "gid", "mtime", "size", "content", "link target")


def first_difference(a: Path, b: Path) -> str:
    """The first entry where the layers `a` and `b` differ, said in words ("" when they hold the same)."""
    left, right = _members(a), _members(b)
    while True:
        x, y = next(left, None), next(right, None)
        if x is None and y is None:
            return ""
        if x is None or y is None:
            extra = (y or x)
            assert extra is not None
            return f"{extra[0]}: only in the {'rebuilt' if y is not None else 'given'} image's layer"
        if x[0] != y[0]:
            return f"{min(x[0], y[0])}: only in one layer (the other has {max(x[0], y[0])} there)"
        for name, p, q in zip(FIELDS, x[1], y[1], strict=True):
            if p != q:
                return f"{x[0]}: {name} differs ({p!r} in the given image, {q!r} rebuilt)"


def _given_layer(ref: str, found: Provenance, dest: Path, engine: str, insecure: bool) -> Path:
    """The top layer of the given image, as a file under `dest`."""
    import json

    dest.mkdir(parents=True, exist_ok=True)
    if found.where.endswith(")"):  # read from a local engine
        saved = dest / "saved"
        shutil.rmtree(saved, ignore_errors=True)
        run([engine, "save", "--format", "oci-dir", "-o", str(saved), ref], env=engine_env(), capture=True,
            timeout=3600)
        index = json.loads((saved / "index.json").read_text())
        blobs = saved / "blobs" / "sha256"
        manifest = json.loads((blobs / index["manifests"][0]["digest"].split(":", 1)[1]).read_bytes())
        return blobs / str(manifest["layers"][-1]["digest"]).split(":", 1)[1]
    from toolchain.image.deliver import parse_ref

    r = parse_ref(ref)
    registry = registry_for(r.host, r.repository, insecure)
    got = registry.manifest(r.tag)
    assert got is not None
    layer = dest / "given-layer.tar.gz"
    registry.blob_to(got[0]["layers"][-1], layer, 1 << 40)
    return layer


def verify_image(lock: Path, ref: str, work: Path, ui: UI, *, engine: str = "podman", insecure: bool = False,
                 use_diffoscope: bool | None = None, base: str | None = None) -> dict[str, Any]:
    """Rebuild the image of `lock` in a fresh cache under `work` and compare it with `ref`; its base is found by
    the digest the image names (`base_for`)."""
    from toolchain.core.fs import sha256_file
    from toolchain.image.assemble import A
    from toolchain.lock import LOCK_NAME

    found = read_provenance(ref, work / "read", insecure=insecure)
    labels = found.labels
    lock_file = lock / LOCK_NAME if lock.is_dir() else lock
    said, have = labels.get(A + "lock.sha256", ""), sha256_file(lock_file)
    if said and said != have:  # another lock's image: told by its label, before anything is made
        return {"ok": False, "image": ref, "given": found.named, "rebuilt": "nothing (not made)",
                "first-difference": f"the image carries another lock: its {A}lock.sha256 label says {said}, "
                                    f"{lock_file} hashes to {have}"}
    over = base_for(lock_file, ref, labels.get(BASE_DIGEST, ""), base, engine)
    cache = work / "cache"
    shutil.rmtree(cache, ignore_errors=True)
    rebuilt = make_image(lock, cache, ui, base=over, engine=engine, insecure=insecure)
    out: dict[str, Any] = {"ok": rebuilt.digest == found.digest, "image": ref, "given": found.digest,
                           "rebuilt": rebuilt.digest, "layer": rebuilt.layer.digest,
                           "base": f"{rebuilt.base.name}@{rebuilt.base.digest}"}
    if out["ok"]:
        return out
    held_by = found.where.rsplit("(", 1)[-1].rstrip(")") if found.where.endswith(")") else engine
    given = _given_layer(ref, found, work / "given", held_by, insecure)
    out["first-difference"] = first_difference(given, rebuilt.layer.blob) or \
        "the layers hold the same entries: the config or the base differs"
    if use_diffoscope is not False and shutil.which("diffoscope"):
        report = work / "diffoscope.txt"
        run(["diffoscope", "--text", str(report), str(given), str(rebuilt.layer.blob)], env=engine_env(),
            check=False, capture=True, timeout=3600)
        out["diffoscope"] = str(report)
    return out


def base_for(lock: Path, ref: str, digest: str, given: str | None, engine: str) -> str | None:
    """The base to make `ref` again over: the image names its base by digest only (image/make.py `labels`), so
    the one the lock itself records (an overlay lock's: None), else `given` (--base NAME@DIGEST, checked
    against that digest), else the lock's recipe's `[image] base` when it is that digest, else that digest under
    any name `engine` holds it. UsageError (exit 2), saying what to pass, when none is."""
    from toolchain.image.base import names_of, pinned
    from toolchain.image.make import base_of
    from toolchain.lock import read_lock

    read = read_lock(lock)
    if read.base is not None:
        return None
    if given:
        if pinned(given, "--base")[1] != digest and digest:
            raise UsageError(f"--base {given} is not the base of {ref}, which was made over {digest}",
                             hint=f"pass --base NAME@{digest}")
        return given
    if not digest:
        raise UsageError(f"{ref} names no base digest (no {BASE_DIGEST} label): it was not made by `toolchain image`")
    try:
        recipe = base_of(read, None)
    except UsageError:
        recipe = ""
    if recipe.endswith("@" + digest):
        return recipe
    held = names_of(digest, engine)
    if held:
        return held[0]
    raise UsageError(f"{engine} holds no image {digest} (the base of {ref}, which names it by digest only): pass "
                     f"--base NAME@{digest} (a registry's or a local name that holds it)")
