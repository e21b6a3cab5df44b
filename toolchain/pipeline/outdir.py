"""The output directory is the tool's own: it must be new, empty, or one an earlier build wrote (it holds
the `.toolchain-out` marker, or a lock of an older version). The marker records the wheels the tool put in
`wheels/`; only those are ever removed (a wheel the user dropped there stays)."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path

from toolchain.build.cache import WHEELS_DIR
from toolchain.console import UI
from toolchain.core.fs import atomic_write_text, file_lock, lock_held, read_regular, sha256_bytes
from toolchain.errors import UsageError
from toolchain.lock import LOCK_NAME, Lock, read_lock

OUT_MARKER = ".toolchain-out"


def wheel_names(out: Path) -> set[str]:
    """The names of the files in the output directory's wheels/ (none when it is absent)."""
    wheels = out / WHEELS_DIR
    return {p.name for p in wheels.iterdir()} if wheels.is_dir() else set()


def undo_wheels(out: Path, before: set[str], ours: set[str]) -> None:
    """A failed build leaves wheels/ as it found it: the wheels it put there (names that were not there
    before) are removed; the marker keeps listing the last finished build's wheels (`ours`)."""
    for name in wheel_names(out) - before:
        if name.endswith(".whl"):
            (out / WHEELS_DIR / name).unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        mark_out_dir(out, ours)


def pylock_sha256(out: Path) -> str:
    """The sha256 of the pylock.toml in the output directory (empty when it cannot be read)."""
    from toolchain.lock import PYLOCK_NAME

    try:
        return sha256_bytes(read_regular(out / PYLOCK_NAME))  # (a FIFO there: "", written again)
    except OSError:
        return ""


def pylock_agrees(out: Path, pylock: str) -> bool:
    """pylock.toml (sha256 `pylock`) is the file written with this lock (its sha256 is the one the marker
    recorded when both were written): an edited, damaged or missing one is written again. A digest, not the
    text made again, so a warm no-op imports no TOML writer."""
    recorded = _marker(_marker_text(out)).get("pylock-sha256")
    return bool(recorded) and recorded == pylock


def _marker_text(out: Path) -> str:
    """The marker's text, read without following a link or blocking (a FIFO there is no marker, never a hang):
    "" when there is none that can be read."""
    try:
        return read_regular(out / OUT_MARKER).decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return ""


@contextlib.contextmanager
def holding_out_dir(out: Path, cache_dir: Path, ui: UI) -> Iterator[None]:
    """Held while a build writes into `out`: builds into one output folder (a full one and a `--component`
    one at once) take turns, so the folder ends with one whole lock and exactly the wheels it names. The lock
    file lives in the cache (`locks/out-<sha256 of out's real path>.lock`), not in `out`: a build refused
    before it writes leaves no output folder behind."""
    with file_lock(_out_lock(out, cache_dir), on_wait=lambda: ui.step(f"waiting for another build into {out} to finish")):
        yield


def _out_lock(out: Path, cache_dir: Path) -> Path:
    return cache_dir / "locks" / f"out-{sha256_bytes(os.path.realpath(out).encode())[:24]}.lock"


def check_out_dir_unless_building(out: Path, cache_dir: Path) -> None:
    """`check_out_dir` before waiting for the folder's lock, writing nothing: a folder that is not the tool's is
    refused at once, but while a build into it holds the lock (it has written its logs, not yet its marker):
    then it is checked once that build is done."""
    try:
        check_out_dir(out)
    except UsageError:
        if not lock_held(_out_lock(out, cache_dir)):
            raise


def _marker(text: str) -> dict[str, object]:
    try:
        doc = json.loads(text)
    except ValueError:
        return {}
    return doc if isinstance(doc, dict) else {}


def check_out_dir(out: Path) -> set[str]:
    """Refuse an output directory that is not the tool's own (nothing is written); returns the names of the
    wheels the tool wrote there before (the only ones it may remove)."""
    check_dir(out, "output directory")
    if not out.is_dir():
        return set()
    if os.path.lexists(out / OUT_MARKER):  # (whatever it is: a FIFO there is read as no list, never waited on)
        wheels = _marker(_marker_text(out)).get("wheels", [])
        return {str(w) for w in wheels} if isinstance(wheels, list) else set()
    if (out / LOCK_NAME).is_file():  # written by a version of the tool before the marker
        try:
            return {c.wheel.file for c in read_lock(out / LOCK_NAME).components}
        except Exception:
            return set()
    entries = sorted(p.name for p in out.iterdir())
    if entries:
        shown = ", ".join(entries[:5]) + (", ..." if len(entries) > 5 else "")
        raise UsageError(f"output directory {out} is not empty and was not written by toolchain "
                         f"(it holds {shown}); nothing was written",
                         hint="pass --out a new or empty directory (or the output of an earlier build)")
    return set()


def mark_out_dir(out: Path, wheels: set[str], *, incomplete: str = "", pylock: str | None = None) -> None:
    """The marker: the tool's output, the wheels it wrote; `incomplete`: why the last build left no lock;
    `pylock`: the sha256 of the pylock.toml written with the lock (kept from the marker when not given)."""
    out.mkdir(parents=True, exist_ok=True)
    current = _marker_text(out)
    old = _marker(current)
    doc: dict[str, object] = {"written-by": "toolchain build: wheels/, logs/, the locks and bundles/ are its output",
                              "wheels": sorted(wheels)}
    if incomplete:
        doc["incomplete"] = incomplete
    digest = pylock if pylock is not None else old.get("pylock-sha256")
    if digest:
        doc["pylock-sha256"] = digest
    text = json.dumps(doc, indent=2) + "\n"
    if current == text:
        return  # a warm no-op writes nothing
    atomic_write_text(out / OUT_MARKER, text)


def check_dir(path: Path, what: str, *, writable: bool = True) -> None:
    """`path` is, or can be made as, a directory (this process can write, when `writable`): else a usage
    error (exit 2) naming `what` (a flag, or what the directory is for)."""
    for p in (path, *path.parents):
        if not p.exists():
            continue
        if not p.is_dir():
            raise UsageError(f"{what} {path}: {p} is a file, not a directory", hint=f"pass a directory as {what}")
        if writable and not os.access(p, os.W_OK | os.X_OK):
            why = "read-only file system" if _read_only(p) else "permission denied"
            raise UsageError(f"{what} {path}: cannot write {p} ({why})",
                             hint="pass a directory on a file system you can write to")
        return


def _read_only(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def previous_lock(path: Path) -> Lock | None:
    """The lock an earlier build left at `path`, if it reads back whole: when it records exactly what this build
    makes (and its pylock.toml agrees), a warm no-op rewrites nothing."""
    try:
        return read_lock(path) if path.is_file() else None
    except Exception:
        return None
