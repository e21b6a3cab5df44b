"""`toolchain image` in one call: a lock (and its base) in, an assembled image out, kept in the cache under its
digest; the base's interpreter is checked against the wheels before anything is written."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

from toolchain import __version__
from toolchain.console import UI
from toolchain.core.fs import sha256_bytes
from toolchain.errors import TestFailed, UsageError
from toolchain.image.assemble import A, Image, assemble, rfc3339
from toolchain.image.base import Interpreter, held, keep_base, pinned, read_interpreter
from toolchain.image.compat import check_wheels
from toolchain.image.layer import LOCK_PATH, Layer, compile_bytecode, entries, stage, write_layer
from toolchain.lock import Lock, read_lock, verify_wheels, wheel_name_version, wheel_problems

BASE_DIGEST = "org.opencontainers.image.base.digest"  # the base, by digest only (`labels`)


def base_of(lock: Lock, given: str | None) -> str:
    """The base image: the lock's own (an overlay lock), else --base, else its recipe's `[image] base`; pinned
    by digest either way."""
    if lock.base is not None:
        if given and given != lock.base.image:
            raise UsageError(f"--base {given} differs from the base the lock was built over ({lock.base.image})",
                             hint="an overlay lock's image is its base: leave --base out")
        return lock.base.image
    if not given:
        from toolchain.core import toml as tomlio

        table = tomlio.loads(lock.recipe_text).get("image", {}) if lock.recipe_text.strip() else {}
        given = str(table.get("base", "")) if isinstance(table, dict) else ""
        if given:
            pinned(given, f"{lock.path}: the recipe's [image] base")
            return given
    if not given:
        raise UsageError(f"{lock.path}: the lock records no base image, its recipe no [image] base, and no "
                         "--base was given", hint="pass --base IMAGE@sha256:... (an image with the lock's Python)")
    pinned(given, "--base")
    return given


def built_wheels(lock: Lock, cache_dir: Path) -> list[Path]:
    """The components' wheels, in lock order: beside the lock (each checked against its recorded size and
    sha256), else from the wheel cache, where every build keeps them (by the component's cache key, or a
    prebuilt one's sha256), copied out into `<cache>/images/wheels/<sha256>/` checked against the lock's sha256.
    TestFailed names what is in neither place, or differs."""
    from toolchain.build.cache import WheelCache
    from toolchain.build.prebuilt_wheels import prebuilt_key

    problems = wheel_problems(lock, missing_ok=True)
    if problems:
        verify_wheels(lock)  # (names each, as ever)
    out, missing = [], []
    cache = WheelCache(cache_dir)
    for c in lock.components:
        beside = lock.wheel_path(c)
        if beside.is_file():
            out.append(beside)
            continue
        dest = cache_dir / "images" / "wheels" / c.wheel.sha256
        dest.mkdir(parents=True, exist_ok=True)
        keys = [c.cache_key, prebuilt_key(c.wheel.sha256)]
        entry = next((e for k in keys if (e := cache.take(k, dest)) is not None and e.sha256 == c.wheel.sha256), None)
        if entry is None:
            missing.append(f"{c.name}: {c.wheel.file} (sha256 {c.wheel.sha256})")
            continue
        out.append(dest / entry.wheel.name)
    if missing:
        raise TestFailed(f"{lock.path}: the lock's wheels are neither beside it ({lock.wheels_dir}) nor in the wheel "
                         f"cache {cache_dir}:\n" + "\n".join(f"  - {m}" for m in missing),
                         hint="put its wheels/ beside the lock (a bundle holds them), or pass the --cache-dir of "
                              "the build that made them")
    return out


def lock_wheels(lock: Lock, cache_dir: Path) -> list[Path]:
    """The wheels to install, in install order: the closure's (fetched with their locked sha256; none for an
    overlay, whose base is its closure), then the components' in lock order (`built_wheels`)."""
    from toolchain.resolve.fetch import fetch_dists

    assert lock.path is not None
    dists = lock.closure.dists if lock.closure is not None else ()
    sdists = [d.file for d in dists if not d.is_wheel]
    if sdists:
        raise UsageError(f"{lock.path}: the closure locks source distributions ({', '.join(sdists)}): an image "
                         "layer installs wheels only", hint="lock wheels for them (build them into a wheelhouse)")
    fetched = fetch_dists(dists, cache_dir / "images" / "deps", cache_dir / "images" / "logs" / "fetch.log") \
        if dists else {}
    return [*(fetched[d.name] for d in dists), *built_wheels(lock, cache_dir)]


def labels(lock: Lock, lock_bytes: bytes, base: str, epoch: int, bytecode: str) -> dict[str, str]:
    """The image's labels (config) and annotations (manifest): provenance a registry or `inspect` shows, and
    the layer's bytecode (how it was compiled, or why there is none). The base is named by its digest only: the
    name it was given under (one of any number the same bytes have: a tag alias, another repository) is the
    user's, not the image's, and would give one base two image digests."""
    digest = pinned(base, "the base image")[1]
    out = {"org.opencontainers.image.created": rfc3339(epoch),
           BASE_DIGEST: digest, "org.opencontainers.image.title": lock.recipe_name,
           A + "recipe": lock.recipe_name, A + "lock.sha256": sha256_bytes(lock_bytes),
           A + "lock.path": "/" + LOCK_PATH, A + "tool-version": __version__, A + "bytecode": bytecode}
    for c in lock.components:
        out[A + f"commit.{c.name}"] = c.commit or c.wheel.sha256
    return out


def make_image(lock_path: Path, cache_dir: Path, ui: UI, *, base: str | None = None, engine: str = "podman",
               python: str | None = None, insecure: bool = False, bytecode: bool = True) -> Image:
    """The image of the lock over its base (`engine` runs the base's interpreter: it holds it, or pulls it; a
    base named on a registry is read from it, over plain HTTP when `insecure`); its modules compiled to
    bytecode by that interpreter unless not `bytecode` (a warning says when the base cannot). The layer is
    remembered (image/memo.py): a warm run reads the lock, the base's kept layout and the layer's blob, and
    starts no container."""
    from toolchain.image.memo import layer_identity, remembered_layer

    lock = read_lock(lock_path)
    assert lock.path is not None
    image = base_of(lock, base)
    files = [Path(f) for f in (*(d.file for d in (lock.closure.dists if lock.closure is not None else ())),
                               *(c.wheel.file for c in lock.components))]  # (lock_wheels' order)
    names = sorted({wheel_name_version(f.name)[0] for f in files})
    def ensure() -> None:  # (before a container of the base starts: the engine holds it under that name)
        held(image, engine, ui, cache_dir / "images" / "logs" / "pull.log", insecure=insecure)

    # the base's interpreter: the one the lock names, by name (its build record's path is the build machine's)
    python = python or lock.target.python_by_name()
    interp = read_interpreter(image, engine, python, names, ui, memo_dir=cache_dir / "images" / "memo", before=ensure)
    check_wheels(files, interp, lock.target.python_tag, lock.target.platform, image,
                 memo_dir=cache_dir / "images" / "memo")
    if interp.externally_managed:
        ui.warn(f"the base's {interp.executable} is externally managed (PEP 668: {interp.externally_managed}): the "
                f"layer installs over its packages in {interp.scheme['purelib']}, as `pip install "
                "--break-system-packages` would; a package the distribution installs there later may clash")
    kept = keep_base(image, cache_dir, engine, ui, insecure=insecure, platform=lock.target.platform or interp.platform)
    lock_bytes = lock.path.read_bytes()
    layers = cache_dir / "images" / "layers"

    def make() -> tuple[Layer, str, int]:
        return _make_layer(lock, lock_bytes, cache_dir, interp, image, engine, ui, bytecode, ensure, layers)

    layer, compiled, epoch = remembered_layer(
        cache_dir / "images" / "memo", layer_identity(sha256_bytes(lock_bytes), kept.digest, interp, python, bytecode),
        layers, make)
    created_by = f"toolchain image (xpu-toolchain {__version__}): {lock.recipe_name}, {len(files)} wheels"
    return assemble(kept, layer, labels(lock, lock_bytes, image, epoch, compiled), epoch, created_by)


def _make_layer(lock: Lock, lock_bytes: bytes, cache_dir: Path, interp: Interpreter, image: str, engine: str, ui: UI,
                bytecode: bool, ensure: Callable[[], None], layers: Path) -> tuple[Layer, str, int]:
    """The layer written afresh, its blob kept under `layers` by digest: (the layer, its bytecode label, epoch)."""
    from toolchain.release.bundle import stack_epoch

    wheels = lock_wheels(lock, cache_dir)
    epoch = stack_epoch(lock, wheels[len(wheels) - len(lock.components):])  # (the built ones: lock_wheels' last)
    work = cache_dir / "images" / "work" / f"{os.getpid()}-{os.urandom(4).hex()}"
    try:
        with ui.status(f"writing the layer of {len(wheels)} wheels"):
            stage(wheels, interp, work / "root")
        compiled = "none: --no-bytecode"
        if bytecode:
            with ui.status(f"compiling the layer's modules with the Python of {image}"):
                compiled = compile_bytecode(work / "root", interp, image, engine,
                                            cache_dir / "images" / "logs" / "bytecode.log",
                                            kept=cache_dir / "images" / "bytecode", before=ensure)
            if compiled.startswith("none: compileall"):
                ui.warn(f"the image has no bytecode: {compiled.removeprefix('none: ')} (log "
                        f"{cache_dir / 'images' / 'logs' / 'bytecode.log'}); each start compiles the stack's modules")
        with ui.status(f"writing the layer of {len(wheels)} wheels"):
            layer = write_layer(entries(work / "root", interp, lock_bytes), epoch, work / "layer.tar.gz")
        final = layers / layer.digest.split(":", 1)[1]
        final.parent.mkdir(parents=True, exist_ok=True)
        os.replace(layer.blob, final)  # (atomic: a run killed before leaves no blob, one after a whole one)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    from toolchain.core.record import replace

    return replace(layer, blob=final), compiled, epoch
