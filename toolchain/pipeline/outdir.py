"""The output directory is the tool's own: it must be new, empty, or one an earlier build wrote (it holds
the `.toolchain-out` marker, or a lock of an older version). The marker records the wheels the tool put in
`wheels/`; only those are ever removed (a wheel the user dropped there stays)."""

from __future__ import annotations

import contextlib
import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from toolchain.build.cache import WHEELS_DIR
from toolchain.console import UI
from toolchain.core.fs import LockWait, atomic_write_text, check_dir, file_lock, read_regular, sha256_bytes
from toolchain.core.owned import CorruptRecord, owners, refusal, safe_name
from toolchain.errors import BuildError, UsageError
from toolchain.lock import LOCK_NAME, Lock, read_lock

OUT_MARKER = ".toolchain-out"
OUT_LOCK = ".toolchain-out.lock"  # held while a build writes into the folder
OUT_FOLDERS = ("logs", WHEELS_DIR, "bundles")  # the folders a build writes into
LOCK_WAIT_ENV = "TOOLCHAIN_OUT_LOCK_WAIT"
LOCK_WAIT = 6 * 3600.0


def wheel_names(out: Path) -> set[str]:
    """The names of the files in the output directory's wheels/ (none when it is absent)."""
    wheels = out / WHEELS_DIR
    return {p.name for p in wheels.iterdir()} if wheels.is_dir() else set()


def undo_wheels(out: Path, before: set[str], ours: set[str]) -> None:
    """A failed build leaves wheels/ as it found it: the wheels it put there (names that were not there
    before) are removed; the marker keeps listing the last finished build's wheels (`ours`)."""
    for name in wheel_names(out) - before:  # (names listed from the folder: plain names)
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
def holding_out_dir(out: Path, ui: UI) -> Iterator[None]:
    """Held while a build writes into `out`: builds into one output folder (a full one and a `--component`
    one at once, whatever their caches) take turns, so the folder ends with one whole lock and exactly the
    wheels it names. The lock file is in `out` (`OUT_LOCK`); a folder made for it that the build leaves
    holding nothing else is removed again (a build refused early leaves no output folder behind). The wait
    ends: at once when the holder is another user (naming its pid and uid), else after `lock_wait()`."""
    made = [p for p in (out, *out.parents) if not os.path.lexists(p)]  # (innermost first)
    out.mkdir(parents=True, exist_ok=True)
    try:
        with file_lock(out / OUT_LOCK, timeout=lock_wait(), owners=owners(),
                       on_wait=lambda: ui.step(f"waiting for another build into {out} to finish")):
            try:
                secure_out_dir(out, ui)
                yield
            finally:
                if made:
                    _drop_if_only_lock(out, made)
    except LockWait as exc:
        if exc.path != out / OUT_LOCK:
            raise  # (a lock of the cache's, waited for inside: the CLI says whose)
        who = ", ".join(f"pid {pid} (uid {uid})" for pid, uid in exc.holders) or "a process not named in /proc/locks"
        if exc.foreign:
            raise UsageError(f"output directory {out}: its lock {exc.path} is held by another user: {who}",
                             hint="ask them to stop it, or pass another --out (a user who can read the lock file "
                                  "can hold it; the build does not wait for them)") from None
        raise BuildError(f"output directory {out}: another build into it ({who}) held its lock for more than "
                         f"{exc.waited:g}s", hint=f"wait for it to finish, or pass another --out (${LOCK_WAIT_ENV} "
                                                  "sets how long a build waits, in seconds)") from None


def lock_wait() -> float:
    """How long a build waits for another build into its output folder: ${LOCK_WAIT_ENV} seconds, else
    `LOCK_WAIT` (a whole cold kernel build)."""
    text = os.environ.get(LOCK_WAIT_ENV, "")
    try:
        return max(0.0, float(text)) if text else LOCK_WAIT
    except ValueError:
        raise UsageError(f"${LOCK_WAIT_ENV}={text!r} is not a number of seconds") from None


def _drop_if_only_lock(out: Path, made: list[Path]) -> None:
    """Remove `out` when it holds nothing but the lock file (held: waiters open it again), and the folders
    `made` for it (innermost first) that are left empty."""
    with contextlib.suppress(OSError):
        if os.listdir(out) == [OUT_LOCK]:
            os.unlink(out / OUT_LOCK)
            for folder in made:
                os.rmdir(folder)


def secure_out_dir(out: Path, ui: UI) -> None:
    """The output folder and the folders the build writes in it (logs/, wheels/, bundles/) are real folders of
    the user's that no one else may write (checked like the cache): a symbolic link there is removed (never
    followed) and made again as a folder; write permission for others is taken away (the folders are the
    tool's own); a folder of another user's is refused (UsageError). The files in them are opened without
    following a link or waiting on a FIFO (core/fs `open_append`, `mine`)."""
    for folder in (out, *(out / name for name in OUT_FOLDERS)):
        try:
            st = os.lstat(folder)
        except FileNotFoundError:
            continue
        if stat.S_ISLNK(st.st_mode) and folder != out:
            ui.warn(f"{folder} was a symbolic link (to {os.readlink(folder)}): removed, nothing written through it")
            os.unlink(folder)
            continue
        if not stat.S_ISDIR(st.st_mode):
            raise UsageError(f"output directory {out}: {folder} is not a folder",
                             hint=f"remove {folder} (the build makes it again)")
        if st.st_uid not in owners():
            if folder == out:  # (its owner was checked with its marker; `toolchain lock` writes beside a lock)
                continue
            raise UsageError(f"output directory {out}: {folder} belongs to uid {st.st_uid}, not to you; nothing "
                             "was written into it", hint=f"remove {folder} (the build makes it again), or pass "
                                                         "another --out")
        if st.st_mode & 0o002:
            os.chmod(folder, stat.S_IMODE(st.st_mode) & ~0o002)
            ui.warn(f"{folder} could be written by every user: no longer (chmod o-w)")


def check_out_dir_unless_building(out: Path) -> None:
    """`check_out_dir` before waiting for the folder's lock, writing nothing: a folder that is not the tool's is
    refused at once (one a build into it runs in now holds the lock file: the tool's mark too)."""
    check_out_dir(out)


def _marker(text: str) -> dict[str, object]:
    try:
        doc = json.loads(text)
    except ValueError:
        return {}
    return doc if isinstance(doc, dict) else {}


def check_out_dir(out: Path) -> set[str]:
    """Refuse an output directory that is not the tool's own (core/owned.py: new, empty, or holding its marker
    -- or a lock of an older version -- of yours in a folder of yours; nothing is written); returns the names of
    the wheels the tool wrote there before (the only ones it may remove: each a plain name, `safe_name`)."""
    check_dir(out, "output directory")
    if not out.is_dir():
        return set()
    why = refusal(out, (OUT_MARKER, LOCK_NAME, OUT_LOCK), removing=False)
    if why:
        raise UsageError(f"output directory {out}: {why}; nothing was written",
                         hint="pass --out a new or empty directory (or the output of an earlier build of yours)")
    if os.path.lexists(out / OUT_MARKER):  # (whatever it is: a FIFO there is read as no list, never waited on)
        return _wheel_list(_marker(_marker_text(out)).get("wheels", []), out)
    if (out / LOCK_NAME).is_file():  # written by a version of the tool before the marker
        try:
            return _wheel_list([c.wheel.file for c in read_lock(out / LOCK_NAME).components], out)
        except UsageError:
            raise
        except Exception:
            return set()
    return set()


def _wheel_list(names: object, out: Path) -> set[str]:
    """The wheel names a record of `out` lists, each a plain name: a path (`../x`, `/etc/x`) is a corrupt
    record (UsageError, exit 2): nothing it names is removed."""
    if not isinstance(names, list):
        return set()
    try:
        return {safe_name(n, f"{out / OUT_MARKER}'s wheel list") for n in names}
    except CorruptRecord as exc:
        raise UsageError(f"{exc}", hint=f"remove {out / OUT_MARKER} (the next build writes it again), or pass "
                                        "another --out") from None


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


def previous_lock(path: Path) -> Lock | None:
    """The lock an earlier build left at `path`, if it reads back whole: when it records exactly what this build
    makes (and its pylock.toml agrees), a warm no-op rewrites nothing."""
    try:
        return read_lock(path) if path.is_file() else None
    except Exception:
        return None
