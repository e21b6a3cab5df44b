"""What the tool may remove, replace or write into, decided in one place (as cargo and Bazel refuse to clean what
lacks their mark, and GNU rm keeps `--preserve-root`): a folder the tool made (its marker file in it, the marker
and the folder owned by the invoking user), or an empty one, or none at all. Removing or replacing one is also
never done to `/`, a mount point, a home folder or the current folder or one above it. Anything else is a usage
error (exit 2) naming the folder, raised before anything is touched.

Every path a user names for the tool to fill or replace goes through here: `--out` (its marker is
`.toolchain-out`), `--oci-dir`, `verify-repro --work-dir`, `smoke --venv`, `bisect --out`; and what the tool
removes of its own in them is checked the same way at the moment it goes (`remove_ours`, `replace_ours`).

`safe_name` is the other half: a name read back from a record the tool wrote (a marker's wheel list, a bundle's
SHA256SUMS, a wheel's RECORD, a bisect state) is a name in one folder, never a path to act on."""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
from collections.abc import Sequence
from pathlib import Path

from toolchain.core.fs import atomic_write_text, invoking_user
from toolchain.errors import UsageError

OWNED_MARKER = ".toolchain-owned"  # in a folder the tool made for a path option (an OCI layout, a work folder)
MARKER_TEXT = "made by toolchain: it removes or replaces this folder as a whole; delete this file to keep it\n"


class CorruptRecord(ValueError):
    """A record read back names something that is not a plain name (a `/`, `..`, NUL, or nothing)."""


def safe_name(name: object, record: str = "a record") -> str:
    """`name` when it is one plain file name (a str with no `/`, NUL, nor `.`/`..` alone, not empty);
    CorruptRecord naming `record` otherwise: the name is never a path to act on."""
    if not isinstance(name, str) or name in ("", ".", "..") or "/" in name or "\0" in name:
        raise CorruptRecord(f"{record} names {name!r}, which is not a file name: the record is corrupt, "
                            "nothing it names is acted on")
    return name


def safe_relpath(path: object, record: str = "a record") -> str:
    """`path` when it is a relative path of plain names (`a/b/c.py`: each part a `safe_name`), as a bundle's
    SHA256SUMS or a wheel's RECORD list them; CorruptRecord otherwise (absolute, `..`, NUL, empty parts)."""
    if not isinstance(path, str) or not path:
        raise CorruptRecord(f"{record} names {path!r}, which is not a relative path: the record is corrupt")
    for part in path.split("/"):
        safe_name(part, record)
    return path


def safe_under(path: object, roots: Sequence[str], record: str = "a record") -> str:
    """`path`, an absolute path of plain names (no `..`, `.`, NUL or empty part) strictly inside one of
    `roots`, as a record of files to remove or white out must name them; CorruptRecord otherwise."""
    if not isinstance(path, str) or not path.startswith("/"):
        raise CorruptRecord(f"{record} names {path!r}, which is not an absolute path: the record is corrupt")
    safe_relpath(path[1:], record)
    if not any(path.startswith(r.rstrip("/") + "/") for r in roots if r):
        raise CorruptRecord(f"{record} names {path}, outside {', '.join(sorted(set(roots)))}: the record is "
                            "corrupt, nothing it names is acted on")
    return path


def owners() -> set[int]:
    """The uids whose folders and files the tool takes as its own: this process's and the one who ran sudo."""
    return {os.geteuid(), invoking_user()[0]}


def protected(path: Path, *, mounts: bool = True, current: bool = True) -> str:
    """Why `path` (an existing folder) is never removed or replaced as a whole: "" when it may be. Without
    `mounts` and `current`, a mount point and the current folder (or one above it) are not reasons: for a
    folder the tool prunes within, never as a whole (a cache on a disk of its own, a prune run from in it)."""
    real = os.path.realpath(path)
    if real == "/":
        return "it is the root folder"
    if mounts and os.path.ismount(real):
        return "it is a mount point"
    homes = {os.path.realpath(os.path.expanduser("~"))}
    with contextlib.suppress(KeyError, ImportError):
        import pwd

        homes.add(os.path.realpath(pwd.getpwuid(invoking_user()[0]).pw_dir))
    if real in homes:
        return "it is a home folder"
    if not current:
        return ""
    with contextlib.suppress(OSError):
        cwd = os.path.realpath(os.getcwd())
        if cwd == real or cwd.startswith(real.rstrip("/") + "/"):
            return "it is the current folder or holds it"
    return ""


def refusal(path: Path, markers: Sequence[str] = (OWNED_MARKER,), *, removing: bool = True) -> str:
    """Why the tool may not fill (or, `removing`, remove or replace) the folder `path`: "" when it may (absent,
    empty, or holding one of `markers` owned, as the folder is, by the invoking user)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return ""
    except OSError as exc:
        return f"it cannot be examined ({exc.strerror or exc})"
    if stat.S_ISLNK(st.st_mode):
        return "it is a symbolic link"
    if not stat.S_ISDIR(st.st_mode):
        return "it is not a folder"
    if removing:
        why = protected(path)
        if why:
            return why
    mine = owners()
    for marker in markers:
        try:
            m = os.lstat(Path(path) / marker)
        except OSError:
            continue
        if m.st_uid not in mine or st.st_uid not in mine:  # (its content is read, if at all, as a regular file)
            return (f"its {marker} is not a file of yours in a folder of yours (owner uid {st.st_uid}, "
                    f"marker uid {m.st_uid}): another user made or can fill it")
        return ""
    try:
        entries = sorted(os.listdir(path))
    except OSError as exc:
        return f"it cannot be listed ({exc.strerror or exc})"
    if not entries:
        return ""
    shown = ", ".join(entries[:5]) + (", ..." if len(entries) > 5 else "")
    return f"it is not empty and was not written by toolchain (no {markers[0]} in it; it holds {shown})"


def check_ours(path: Path, what: str, markers: Sequence[str] = (OWNED_MARKER,), *, removing: bool = True) -> None:
    """Refuse (UsageError, exit 2; nothing touched) a folder `refusal` gives a reason for; `what` names the
    option or what the folder is for."""
    why = refusal(path, markers, removing=removing)
    if why:
        raise UsageError(f"{what} {path}: {why}; nothing was removed or written",
                         hint=f"pass {what} a new or empty folder, or one toolchain made (it holds {markers[0]})")


def claim(path: Path, what: str, markers: Sequence[str] = (OWNED_MARKER,), *, removing: bool = True) -> Path:
    """Make `path` (a folder `check_ours` accepts) the tool's own: made when absent, marked `OWNED_MARKER`."""
    check_ours(path, what, markers, removing=removing)
    path.mkdir(parents=True, exist_ok=True)
    mark(path)
    return path


def mark(path: Path) -> None:
    """Write the marker into `path`, a folder the tool made (nothing when it is there)."""
    if not os.path.lexists(path / OWNED_MARKER):
        atomic_write_text(path / OWNED_MARKER, MARKER_TEXT)


def remove_ours(path: Path, what: str, markers: Sequence[str] = (OWNED_MARKER,)) -> bool:
    """Remove the folder `path` when it is the tool's (`check_ours`: else UsageError, nothing removed); an
    empty one of someone else's is removed only while empty (rmdir). Whether there was one."""
    check_ours(path, what, markers)
    if not os.path.lexists(path):
        return False
    if any(os.path.lexists(Path(path) / m) for m in markers):
        shutil.rmtree(path)
    else:
        os.rmdir(path)
    return True


def replace_ours(tmp: Path, dest: Path, what: str, markers: Sequence[str] = (OWNED_MARKER,)) -> Path:
    """Put the folder `tmp` (made by the tool) at `dest`, removing what `dest` held when it is the tool's
    (`check_ours`; else UsageError and `dest` is as it was)."""
    check_ours(dest, what, markers)
    if os.path.lexists(dest):
        ours = any(os.path.lexists(Path(dest) / m) for m in markers)
        trash = dest.with_name(f".{dest.name}.{os.getpid()}.old")
        os.rename(dest, trash)
        try:
            os.rename(tmp, dest)
        finally:
            if ours:
                shutil.rmtree(trash, ignore_errors=True)
            else:  # (it was empty: removed only while it still is)
                with contextlib.suppress(OSError):
                    os.rmdir(trash)
    else:
        os.rename(tmp, dest)
    return dest


__all__ = ["MARKER_TEXT", "OWNED_MARKER", "CorruptRecord", "check_ours", "claim", "mark", "owners", "protected", "refusal", "remove_ours",
           "replace_ours", "safe_name", "safe_relpath", "safe_under"]
