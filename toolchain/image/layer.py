"""The one layer: each wheel written by pypa `installer` into the base interpreter's scheme under a staging
folder, then its modules compiled to bytecode by the base's own interpreter in a one-off container of the base
(`compileall --invalidation-mode unchecked-hash`: a .pyc names its source by its hash, never by an mtime, as
reproducible-build distributions ship them; the host's interpreter compiles nothing), the lock at LOCK_PATH, and a
whiteout (`.wh.NAME`) for each file or emptied folder of a replaced distribution that the new files do not
cover (pip's `--force-reinstall` uninstalls it first). The tar is assembled by hand: entries sorted, owner
0:0, every mtime the lock's epoch, modes 0644/0755, gzip without a name or a timestamp."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from toolchain.core.record import record
from toolchain.image.base import Interpreter
from toolchain.image.gzipped import Counted, gzip_writer

LOCK_PATH = "usr/share/toolchain/stack.lock.toml"  # the lock inside the image (`toolchain lock --image` reads it)
WHITEOUT = ".wh."


@record
class Entry:
    """One tar entry: `path` relative to / ('/'-separated), its kind ('dir', 'file', 'whiteout'), and for a
    file where its bytes are (a staging file, or `data`)."""
    path: str
    kind: str
    source: Path | None = None
    data: bytes = b""
    executable: bool = False


@record
class Layer:
    """The written layer: the gzip blob, its digest and size, and the digest of the uncompressed tar."""
    blob: Path
    digest: str
    size: int
    diff_id: str
    entries: int
    whiteouts: tuple[str, ...] = ()


def stage(wheels: Sequence[Path], interp: Interpreter, staging: Path) -> None:
    """Install every wheel, in order, into the interpreter's scheme under `staging` (a later wheel's file
    replaces an earlier one's, as a later pip install would)."""
    from installer import install
    from installer.destinations import SchemeDictionaryDestination
    from installer.sources import WheelFile

    scheme = {k: interp.scheme[k] for k in ("purelib", "platlib", "scripts", "data")}
    for wheel in wheels:
        name = wheel.name.split("-", 1)[0]
        scheme["headers"] = f"{interp.scheme['include']}/{name}"
        dest = SchemeDictionaryDestination(scheme, interp.executable, "posix", bytecode_optimization_levels=(),
                                           destdir=str(staging), overwrite_existing=True)
        with WheelFile.open(wheel) as source:
            install(source, dest, additional_metadata={"INSTALLER": b"toolchain\n"})


STAGING = "/toolchain-staging"  # where the container of the base sees the staging folder


def _pyc_of(source: Path, tag: str) -> Path:
    return source.parent / "__pycache__" / f"{source.stem}.{tag}.pyc"


def compile_bytecode(staging: Path, interp: Interpreter, image: str, engine: str, log: Path,
                     kept: Path | None = None, before: Callable[[], None] | None = None) -> str:
    """Compile every module the layer installs with the base's interpreter, in a one-off container of `image`
    with the staging folder mounted (the image's own Python version, so its .pyc are the ones it would write:
    unchecked-hash, named by their image paths). What was done, as the image's label records it; a base that
    cannot compile (no compileall, a Python before 3.9) gets no bytecode, and the answer says why. `kept`: a
    folder of the .pyc compiled before, each by the base, its interpreter, its image path and its source's
    sha256 (a pure function of them): when it holds every one, no container is started."""
    from toolchain.core.proc.runner import run
    from toolchain.image.base import engine_env

    roots = sorted({interp.scheme[k].strip("/") for k in ("purelib", "platlib")})
    present = [r for r in roots if (staging / r).is_dir()]
    if not present:
        return "none: the layer installs no modules"
    done_text = f"unchecked-hash, compiled by the base's Python {interp.python_version}"
    tag = "cpython-" + "".join(interp.python_version.split(".")[:2])
    sources = sorted(p for r in present for p in (staging / r).rglob("*.py") if p.is_file() and not p.is_symlink())

    def key(src: Path) -> Path | None:
        if kept is None:
            return None
        ident = f"{image}\0{interp.executable}\0{src.relative_to(staging).as_posix()}\0".encode() + src.read_bytes()
        return kept / hashlib.sha256(ident).hexdigest()

    keys = {src: key(src) for src in sources}
    if kept is not None and all(k is not None and k.is_file() for k in keys.values()):
        for src, k in keys.items():
            assert k is not None
            _pyc_of(src, tag).parent.mkdir(exist_ok=True)
            _link_or_copy(k, _pyc_of(src, tag))  # (the staging folder is only read, then removed)
        return done_text
    if before is not None:  # (the engine holds the base: `image.base.held`)
        before()
    user = ["--user", f"{os.getuid()}:{os.getgid()}"] if engine == "docker" else []  # (files stay this user's)
    argv = [engine, "run", "--rm", "--network=none", *user, "--entrypoint", interp.executable,
            "-v", f"{staging}:{STAGING}", image,
            "-m", "compileall", "-q", "-f", "--invalidation-mode", "unchecked-hash", "-s", STAGING, "-p", "/",
            *(f"{STAGING}/{r}" for r in present)]
    done = run(argv, env=engine_env(), log=log, check=False, timeout=1800)
    if done.returncode != 0:
        return f"none: compileall in the base failed (exit {done.returncode})"  # (a label: no path of this machine)
    if kept is not None:
        kept.mkdir(parents=True, exist_ok=True)
        for src, k in keys.items():
            if k is not None and _pyc_of(src, tag).is_file():
                _link_or_copy(_pyc_of(src, tag), k)
    return done_text


def _link_or_copy(src: Path, dest: Path) -> None:
    """`dest` made the file `src` atomically: a hard link where the file system allows, else a copy."""
    import shutil

    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    try:
        os.link(src, tmp)
    except OSError:
        shutil.copyfile(src, tmp)
    os.replace(tmp, dest)


def _under(path: str, root: str) -> bool:
    return path.startswith(root.rstrip("/") + "/")


def entries(staging: Path, interp: Interpreter, lock_bytes: bytes) -> list[Entry]:
    """What the layer holds, sorted: the staged files and the folders below the scheme's roots, the lock, and
    the whiteouts of what a replaced distribution leaves behind."""
    roots = sorted({v.strip("/") for v in interp.scheme.values()})
    out: dict[str, Entry] = {}
    for top, dirs, files in os.walk(staging):
        for name in [*dirs, *files]:
            full = Path(top) / name
            rel = full.relative_to(staging).as_posix()
            if not any(_under(rel, r) for r in roots):
                continue
            if full.is_dir() and not full.is_symlink():
                if not any(rel == r or _under(r, rel) for r in roots):  # the scheme's folders are the base's
                    out[rel] = Entry(rel, "dir")
            else:
                out[rel] = Entry(rel, "file", source=full, executable=os.access(full, os.X_OK))
    lock_dir = LOCK_PATH.rsplit("/", 1)[0]
    out[lock_dir] = Entry(lock_dir, "dir")
    out[LOCK_PATH] = Entry(LOCK_PATH, "file", data=lock_bytes)
    for path in whiteouts(interp, set(out)):
        parent, _, name = path.rpartition("/")
        wh = f"{parent}/{WHITEOUT}{name}"
        out[wh] = Entry(wh, "whiteout")
    return [out[k] for k in sorted(out, key=lambda p: p.split("/"))]


def whiteouts(interp: Interpreter, written: set[str]) -> list[str]:
    """The paths (relative to /) a replaced distribution's uninstall removes that the layer does not write: a
    whole emptied folder where the layer writes nothing into it, else its files one by one."""
    gone_dirs: list[str] = []
    out: list[str] = []
    for rep in interp.replaced:
        dirs = sorted((d.strip("/") for d in rep.dirs), key=len)
        for d in dirs:
            if any(_under(d, g) for g in gone_dirs):
                continue
            if d not in written and not any(_under(w, d) for w in written):
                gone_dirs.append(d)
                out.append(d)
        for f in rep.files:
            rel = f.strip("/")
            if rel not in written and not any(_under(rel, g) for g in gone_dirs):
                out.append(rel)
    return sorted(set(out))


def write_layer(items: Iterable[Entry], epoch: int, dest: Path) -> Layer:
    """The tar.gz of `items` at `dest` (its digest, size and diff_id): a pure function of the entries' paths,
    kinds, modes and bytes, and of `epoch`."""
    import io
    import tarfile

    dest.parent.mkdir(parents=True, exist_ok=True)
    count, wh = 0, []
    with open(dest, "wb") as raw:
        packed = Counted(raw)
        with gzip_writer(packed) as gz:  # type: ignore[arg-type]
            plain = Counted(gz)
            with tarfile.open(fileobj=plain, mode="w", format=tarfile.PAX_FORMAT) as tar:  # type: ignore[call-overload]
                for item in items:
                    info = tarfile.TarInfo(item.path)
                    info.mtime, info.uid, info.gid, info.uname, info.gname = epoch, 0, 0, "", ""
                    count += 1
                    if item.kind == "dir":
                        info.type, info.mode = tarfile.DIRTYPE, 0o755
                        tar.addfile(info)
                        continue
                    info.mode = 0o755 if item.executable else 0o644
                    if item.kind == "whiteout":
                        wh.append(item.path)
                        tar.addfile(info)
                        continue
                    if item.source is not None:
                        info.size = item.source.stat().st_size
                        with open(item.source, "rb") as f:
                            tar.addfile(info, f)
                    else:
                        info.size = len(item.data)
                        tar.addfile(info, io.BytesIO(item.data))
        raw.flush()
        os.fsync(raw.fileno())
    return Layer(blob=dest, digest="sha256:" + packed.sha.hexdigest(), size=packed.size,
                 diff_id="sha256:" + plain.sha.hexdigest(), entries=count, whiteouts=tuple(wh))
