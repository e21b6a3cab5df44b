"""A reproducible wheel bundle: `<out>/<recipe>-<key>/` and the deterministic tarball `<recipe>-<key>.tar.gz`.

The bundle holds the wheels, `stack.lock.toml` and `pylock.toml`, `sbom.cdx.json` (CycloneDX), the patches
when their directory is given, `INSTALL.txt` and `SHA256SUMS` (`sha256sum -c SHA256SUMS` checks it). Its lock
is the lock as written (what varies from build to build and says nothing about the result, build seconds, the
container's name, an absolute recipe path, is in the build record beside a build's lock, never in a bundle),
so two builds of the same sources give the same bundle. `<key>` is the start of the sha256 of SHA256SUMS: the bundle's name is its content.

The tarball is sorted, every entry dated the stack's source date, owned by 0/0 (root), files 0644 and
directories 0755, and gzip-compressed with mtime 0 and no file name: the same bundle gives the same bytes.
"""

from __future__ import annotations

import calendar
import gzip
import os
import shutil
import tarfile
import tempfile
import zipfile
from collections.abc import Sequence
from pathlib import Path

from toolchain import lock as lockmod
from toolchain.build.cache import WHEELS_DIR
from toolchain.build.wheelnorm import ZIP_MIN_EPOCH
from toolchain.core import blobs
from toolchain.core.fs import publish_dir, sha256_bytes, sha256_file
from toolchain.errors import TestFailed
from toolchain.lock import Lock
from toolchain.release import BUNDLES_DIR  # noqa: F401 - the constant's old home

SUMS_NAME = "SHA256SUMS"
INSTALL_NAME = "INSTALL.txt"
REQUIREMENTS_NAME = "requirements.lock.txt"
PATCHES_DIR = "patches"
KEY_LENGTH = 12


def write_bundle(lock: Lock, out_dir: Path, *, patches_dir: Path | Sequence[Path] | None = None,
                 with_deps: bool = False, input_dirs: Sequence[Path] = (), cache_dir: Path | None = None) -> Path:
    """Write the bundle of `lock` (whose wheels must match their recorded hashes) into `out_dir`.

    Returns the bundle directory; the tarball is `tarball_path(<returned dir>)`. `patches_dir` (the
    recipes' patches/ directory, or several: `Recipe.all_patches_dirs`) copies the patch series into the bundle and
    embeds it in the SBOM. `with_deps`: the locked dependency files go into `wheels/deps/` (checked against
    their sha256), so the bundle installs with no network. `input_dirs`: where the recipe's relative
    `inputs` are (the folders of the recipes that declared them); every input file (kernel configuration)
    is copied into `inputs/<component>/`, checked against its sha256. A patch or input file found in none of
    them is taken from `cache_dir`'s copies by sha256 (`core.blobs`: a lock rebuilt after its folder moved).
    """
    from toolchain.release.sbom import SBOM_NAME, sbom_json  # (cyclonedx: imported when a bundle is written)

    lockmod.verify_wheels(lock)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    published = lock  # (its text holds the lock's facts only: what the build record keeps is not in it)
    epoch = stack_epoch(lock)
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-bundle-", dir=out_dir))
    try:
        for comp in lock.components:
            _copy(lock.wheel_path(comp), tmp / WHEELS_DIR / comp.wheel.file)
        if with_deps:
            _bundle_deps(lock, tmp)
        lockmod.write_lock(published, tmp, bundled_deps=with_deps, record=False)
        (tmp / REQUIREMENTS_NAME).write_text(requirements_text(published, bundled=with_deps), encoding="utf-8")
        dirs = [patches_dir] if isinstance(patches_dir, (str, Path)) else list(patches_dir or ())
        patch_texts = _copy_patches(lock, dirs, tmp, cache_dir) if dirs else {}
        _copy_inputs(lock, input_dirs, tmp, cache_dir)
        lock_key = sha256_file(tmp / lockmod.LOCK_NAME)[:KEY_LENGTH]
        (tmp / SBOM_NAME).write_text(sbom_json(published, epoch=epoch, stack_version=lock_key,
                                               patch_texts=patch_texts), encoding="utf-8")
        (tmp / INSTALL_NAME).write_text(install_text(published, bundled_deps=with_deps), encoding="utf-8")
        sums = sums_text(tmp)
        (tmp / SUMS_NAME).write_text(sums, encoding="utf-8")
        _fix_modes(tmp)
        final = out_dir / f"{lock.recipe_name}-{sha256_bytes(sums.encode())[:KEY_LENGTH]}"
        publish_dir(tmp, final)  # an existing bundle of that name has the same content: it is kept
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    write_tarball(final, tarball_path(final), epoch)
    return final


def tarball_path(bundle_dir: Path) -> Path:
    """The .tar.gz written beside a bundle directory."""
    return bundle_dir.parent / f"{bundle_dir.name}.tar.gz"


def stack_epoch(lock: Lock, wheels: Sequence[Path] | None = None) -> int:
    """The stack's source date: the newest entry date in its (normalized) wheels (`wheels`: where they are,
    when not beside the lock), i.e. the newest pinned commit's date; 1980-01-01 when there is none."""
    newest = ZIP_MIN_EPOCH
    for path in wheels if wheels is not None else [lock.wheel_path(c) for c in lock.components]:
        with zipfile.ZipFile(path) as zf:
            for info in zf.infolist():
                newest = max(newest, calendar.timegm((*tuple(info.date_time), 0, 0, 0)))
    return newest


def sums_text(root: Path) -> str:
    """`sha256sum`-format lines for every file under `root` (except SHA256SUMS), sorted by path."""
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.name != SUMS_NAME)
    return "".join(f"{sha256_file(p)}  {p.relative_to(root).as_posix()}\n" for p in files)


def _bundle_deps(lock: Lock, dest: Path) -> None:
    from toolchain.resolve.closure import DEPS_DIR
    from toolchain.resolve.fetch import fetch_dists

    if lock.closure is None:
        raise TestFailed(f"{lock.path}: --with-deps needs a lock with its resolved closure",
                         hint="resolve it first: `toolchain lock --lock LOCK` (or build without --no-resolve)")
    assert lock.path is not None
    fetched = fetch_dists(lock.closure.dists, lock.path.parent / DEPS_DIR, lock.path.parent / "logs" / "fetch.log")
    for d in lock.closure.dists:
        _copy(fetched[d.name], dest / DEPS_DIR / d.file)


def requirements_text(lock: Lock, *, bundled: bool) -> str:
    """Every locked file with its sha256 (pip --require-hashes): dependencies (bundled paths, or their URLs)
    then the built wheels, paths relative to the bundle directory. A lock without a closure: the built wheels."""
    from toolchain.resolve.closure import DEPS_DIR
    from toolchain.resolve.fetch import hashed_requirements

    dists = lock.closure.dists if lock.closure is not None else ()
    deps = [(f"./{DEPS_DIR}/{d.file}" if bundled else f"{d.name} @ {d.url}", d.sha256) for d in dists]
    built = [(f"./{WHEELS_DIR}/{c.wheel.file}", c.wheel.sha256) for c in lock.components]
    return ("# Every file of the stack with its sha256: pip install --no-index --no-deps --require-hashes -r "
            f"{REQUIREMENTS_NAME}\n" + hashed_requirements([*deps, *built]))


def _image_lines(lock: Lock) -> list[str]:
    """For a container lock: the image its wheels were built in (and run in), and the one command that makes the
    runnable image of this bundle (`toolchain image`). Nothing for a host lock."""
    if lock.base is not None:
        base = lock.base.image if "@" in lock.base.image else f"{lock.base.image}@{lock.base.digest}"
        return ["Make the runnable image (the base above plus one layer of these wheels; the same digest anywhere):",
                "  toolchain image --lock stack.lock.toml --tag NAME[:TAG] --load podman   (or --push, --oci-dir DIR)",
                f"  (its base: {base})", ""]
    if not lock.target.image:  # (a host lock names no image)
        return []
    image = lock.target.image
    if "@" not in image and lock.target.image_digest.startswith("sha256:"):  # pinned: NAME@DIGEST, its tag left out
        image = (image.rsplit(":", 1)[0] if ":" in image.rsplit("/", 1)[-1] else image) + "@" + lock.target.image_digest
    return [f"Built in the {lock.target.runtime} image {image} (Python {lock.target.python_version}): the wheels",
            "are for that image's interpreter. Make the runnable image (that image plus one layer of these wheels):",
            f"  toolchain image --lock stack.lock.toml --base {image} --tag NAME[:TAG] --load podman",
            ""]


def install_text(lock: Lock, *, bundled_deps: bool = False) -> str:
    """The INSTALL instructions of a bundle: how to install its wheels for this lock (a container lock: in
    which image, and how `toolchain image` makes the runnable image)."""
    image = _image_lines(lock)
    text = _install_text(lock, bundled_deps=bundled_deps)
    if not image:
        return text
    head, _, rest = text.partition("\n\n")
    return "\n".join([head, "", *image]) + rest


def _install_text(lock: Lock, *, bundled_deps: bool = False) -> str:
    if lock.base is not None:
        return _install_text_overlay(lock)
    if lock.closure is not None:
        n = len(lock.closure.dists)
        where = "in wheels/deps/: installs with no network" if bundled_deps else "fetched from the URLs the lock records"
        return "\n".join([
            f"Bundle of recipe {lock.recipe_name!r}: {len(lock.components)} built wheel(s) and {n} locked "
            f"dependenc{'y' if n == 1 else 'ies'} ({where}), built by toolchain {lock.tool_version}.",
            "",
            "Check it (in this directory):   sha256sum -c SHA256SUMS",
            "Install exactly the lock (in this directory, into a fresh venv; every file's sha256 is checked, and",
            "a dependency the lock does not name is an error, never a download):",
            f"  pip install --no-index --no-deps --require-hashes -r {REQUIREMENTS_NAME}",
            "  pip check",
            *([] if bundled_deps else ["(For an air-gapped machine make the bundle with --bundle --with-deps.)"]),
            "Rebuild and compare it:         toolchain verify-repro --lock stack.lock.toml",
            "",
        ])
    return _install_text_unresolved(lock)


def _install_text_overlay(lock: Lock) -> str:
    """A lock rebuilt over a base image: its wheels go over that image, which holds everything else."""
    base = lock.base
    assert base is not None
    image = base.image if "@" in base.image else f"{base.image}@{base.digest}"
    return "\n".join([
        f"Bundle of recipe {lock.recipe_name!r}: {len(lock.components)} wheel(s) rebuilt over the base image",
        f"  {image}",
        f"(Python {base.python_version}, torch {base.torch_version or 'none'}; the lock's [base] lists the "
        f"{len(base.dists)} distributions it holds). It NEEDS that image: nothing else is pinned or bundled.",
        "",
        "Check it (in this directory):   sha256sum -c SHA256SUMS",
        "Install it over the image (in a container of it, this directory mounted; every sha256 is checked):",
        f"  pip install --no-index --no-deps --force-reinstall --require-hashes -r {REQUIREMENTS_NAME}",
        "  pip check",
        "Rebuild and compare it:         toolchain verify-repro --lock stack.lock.toml",
        "",
    ])


def _install_text_unresolved(lock: Lock) -> str:
    """A lock that pins no dependencies: its wheels install alone, hashes required; what they need beyond
    them is for `pip check` to name, never for pip to download."""
    return "\n".join([
        f"Bundle of recipe {lock.recipe_name!r}: {len(lock.components)} wheel(s), built by toolchain "
        f"{lock.tool_version}.",
        "Its lock records NO resolved closure (built with --no-resolve, or by an older toolchain): the wheels'",
        "dependencies are not pinned, and are not in this bundle.",
        "",
        "Check it (in this directory):   sha256sum -c SHA256SUMS",
        "Install exactly the lock (in this directory, into a fresh venv; every wheel's sha256 is checked):",
        f"  pip install --no-index --no-deps --require-hashes -r {REQUIREMENTS_NAME}",
        "  pip check",
        "`pip check` names each dependency the lock does not pin: nothing is downloaded in its place. To pin them:",
        "  toolchain lock --lock stack.lock.toml   (or build again: toolchain build --recipe RECIPE --bundle --with-deps)",
        "Rebuild and compare it:         toolchain verify-repro --lock stack.lock.toml",
        "",
    ])


def write_tarball(src_dir: Path, dest: Path, epoch: int) -> None:
    """A deterministic .tar.gz of `src_dir` (entries under `<src_dir name>/`), written atomically."""
    entries = [src_dir, *sorted(src_dir.rglob("*"), key=lambda p: p.relative_to(src_dir).as_posix())]
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent)
    try:
        with os.fdopen(fd, "wb") as raw:
            with gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=9, mtime=0) as gz:  # noqa: SIM117 (raw is flushed and synced after gzip closes, before raw closes)
                with tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
                    for path in entries:
                        rel = path.relative_to(src_dir).as_posix()
                        _add(tar, path, src_dir.name if path == src_dir else f"{src_dir.name}/{rel}", int(epoch))
            raw.flush()
            os.fsync(raw.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, dest)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _add(tar: tarfile.TarFile, path: Path, arcname: str, epoch: int) -> None:
    info = tarfile.TarInfo(arcname)
    info.mtime = epoch
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    if path.is_dir():
        info.type, info.mode = tarfile.DIRTYPE, 0o755
        tar.addfile(info)
        return
    info.size, info.mode = path.stat().st_size, 0o644
    with open(path, "rb") as f:
        tar.addfile(info, f)


def _copy(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dst)


def _copy_patches(lock: Lock, patches_dirs: Sequence[Path], dest: Path, cache_dir: Path | None = None) -> dict[str, str]:
    """Copy every locked local patch (checked against its sha256) into the bundle; return {label: text}.
    Each is looked up in `patches_dirs` in order (a recipe may inherit patches from another directory).
    A remote patch is pinned by url, commit and sha256 in the lock itself and is not copied."""
    texts, problems = {}, []
    for comp in lock.components:
        for patch in comp.patches:
            if patch.remote:
                continue
            found = [Path(d) / patch.path for d in patches_dirs if (Path(d) / patch.path).is_file()]
            match = next((f for f in found if sha256_file(f) == patch.sha256), None) if found else \
                blobs.find(cache_dir, patch.sha256)
            copied = dest / PATCHES_DIR / patch.path
            if match is None and not found:  # (nor kept in the cache)
                problems.append(f"{comp.name}: patch {patch.path} is missing from "
                                + ", ".join(str(d) for d in patches_dirs))
            elif match is None:
                problems.append(f"{comp.name}: patch {found[0]} has sha256 {sha256_file(found[0])}, "
                                f"the lock records {patch.sha256}")
            elif copied.is_file() and sha256_file(copied) != patch.sha256:
                problems.append(f"{comp.name}: two different patches are both named {patch.path}")
            else:
                _copy(match, copied)
                texts[patch.label] = match.read_text(encoding="utf-8", errors="replace")
    if problems:
        raise TestFailed("patches do not match the lock " + str(lock.path) + ":\n"
                         + "\n".join(f"  - {p}" for p in problems),
                         hint="bundle the lock with the patches directory it was built from")
    return texts


def _copy_inputs(lock: Lock, dirs: Sequence[Path], dest: Path, cache_dir: Path | None = None) -> None:
    """Each component's input files (an env value naming a file: that path; a declared input: relative to
    one of `dirs`, or absolute) into `inputs/<component>/<file name>`, sha256 checked."""
    problems = []
    for comp in lock.components:
        for inp in comp.inputs:
            if inp.label.startswith("env "):
                candidates = [Path(comp.env.get(inp.label[4:], "")).expanduser()]
            else:
                rel = Path(inp.label).expanduser()
                candidates = [rel] if rel.is_absolute() else [Path(d) / rel for d in dirs]
            found = [c for c in candidates if c.is_file()]
            match = next((f for f in found if sha256_file(f) == inp.sha256), None) if found else \
                blobs.find(cache_dir, inp.sha256)
            if match is None:
                problems.append(f"{comp.name}: input {inp.label}: "
                                + (f"{found[0]} has sha256 {sha256_file(found[0])}, the lock records {inp.sha256}"
                                   if found else "not found"))
            else:
                _copy(match, dest / "inputs" / comp.name / candidates[0].name)  # (a kept copy is named by its hash)
    if problems:
        raise TestFailed("input files do not match the lock " + str(lock.path) + ":\n"
                         + "\n".join(f"  - {p}" for p in problems),
                         hint="bundle the lock right after the build that used these files, or rebuild")


def _fix_modes(root: Path) -> None:
    for path in [root, *root.rglob("*")]:
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
