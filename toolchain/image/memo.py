"""The layer remembered: an image's one layer is a pure function of the lock (its bytes: the wheels by sha256,
and so the epoch, their newest entry date), the base (by digest), the base's interpreter, bytecode on or off, the
gzip level and the tool's version. Its blob is kept in the cache by digest (`<cache>/images/layers/`); with this
memo (core/probe_memo.py: sealed, written atomically) a warm `toolchain image` serves it without staging a wheel
or starting a container, after checking the blob against its sha256: a blob that differs (damaged, tampered
with, half-written by a run killed before the rename) is a miss, and the layer is made again."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from toolchain import __version__
from toolchain.core.fs import sha256_file
from toolchain.image.base import Interpreter
from toolchain.image.gzipped import GZIP_LEVEL
from toolchain.image.layer import Layer

KIND = "image-layer"


def layer_identity(lock_sha256: str, base_digest: str, interp: Interpreter, python: str, bytecode: bool) -> dict[str, Any]:
    """What the layer is made from, as the memo's key."""
    return {"lock": lock_sha256, "base": base_digest, "python": python, "bytecode": bytecode, "gzip": GZIP_LEVEL,
            "tool": __version__, "layer": 1,
            "interpreter": [interp.executable, interp.python_version, interp.python_tag, interp.soabi,
                            interp.platform, interp.glibc, sorted(interp.scheme.items()),
                            [[r.name, r.version, list(r.files), list(r.dirs)] for r in interp.replaced]]}


def _intact(layer: Layer) -> bool:
    """Whether the kept blob is the layer: its size, then its sha256."""
    try:
        return layer.blob.stat().st_size == layer.size and "sha256:" + sha256_file(layer.blob) == layer.digest
    except OSError:
        return False


def _layer(value: dict[str, Any], layers: Path) -> Layer:
    digest = str(value["digest"])
    return Layer(blob=layers / digest.split(":", 1)[1], digest=digest, size=int(value["size"]),
                 diff_id=str(value["diff-id"]), entries=int(value["entries"]),
                 whiteouts=tuple(str(w) for w in value["whiteouts"]))


def remembered_layer(memo_dir: Path | None, identity: dict[str, Any], layers: Path,
                     make: Callable[[], tuple[Layer, str, int]]) -> tuple[Layer, str, int]:
    """(the layer, its bytecode label, the epoch): remembered under `memo_dir` for `identity` when its blob
    under `layers` is intact, else `make()` (which keeps the blob there) and remembered, unless its bytecode
    failed to compile (maybe a passing cause: tried again next time)."""
    from toolchain.core.probe_memo import forget, remembered

    made: list[bool] = []

    def compute() -> tuple[dict[str, Any], list[str] | None]:
        layer, bytecode, epoch = make()
        made.append(True)
        value = {"digest": layer.digest, "size": layer.size, "diff-id": layer.diff_id, "entries": layer.entries,
                 "whiteouts": list(layer.whiteouts), "bytecode": bytecode, "epoch": epoch}
        return value, (None if bytecode.startswith("none: compileall") else [])

    value = remembered(memo_dir, KIND, identity, compute)
    if not made and not _intact(_layer(value, layers)):  # (a remembered one is served only as its sha256 says)
        assert memo_dir is not None
        forget(memo_dir, KIND, identity)
        value = remembered(memo_dir, KIND, identity, compute)
    return _layer(value, layers), str(value["bytecode"]), int(value["epoch"])
