"""The one rule for what is read from the cache (wheel entries and their entry.json, native and closure
records, remembered probes, kept file copies, bisect's unbuildable records), like ssh's StrictModes and git's
`safe.directory`. A file is trusted only when it is

- a regular file, opened without following a final symbolic link and without blocking (a FIFO is a miss,
  never a hang; the checks below are made on the opened descriptor, so it cannot be swapped in between);
- owned by this user or root;
- writable by nobody else: not group- or other-writable, unless the cache is declared shared (`[cache]
  shared-group =` in a recipe, or `$TOOLCHAIN_CACHE_SHARED_GROUP`): then writable by that group and nobody
  else, and owned by this user, root or a member of that group.

Anything else is `Untrusted` (an OSError): the caller treats it as a miss (re-probed, rebuilt, resolved again),
never serves it. A cache other people can write to is shared through the OCI registry, where entries are
verified by digest (sharing/registry.py), not through a folder. The out folder's own files (its marker, pylock.toml)
are opened the same safe way (`fs.open_regular`: no link, no FIFO), not asked who owns them: under sudo the
out folder is handed to the user who ran it (`fs.give_to_invoking_user`).
"""

from __future__ import annotations

import functools
import io
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from toolchain.core.fs import NotRegular, open_regular

SHARED_GROUP_ENV = "TOOLCHAIN_CACHE_SHARED_GROUP"

_declared: list[str] = []  # the recipe's [cache] shared-group for this run (declare_shared_group)


class Untrusted(OSError):
    """A file read from the cache or the out folder that the trust rule refuses (why: the message)."""


def declare_shared_group(group: str) -> None:
    """The run's recipe declares its cache shared with `group` (a name or a gid; "" declares nothing): the
    environment's $TOOLCHAIN_CACHE_SHARED_GROUP, when set, wins."""
    _declared[:] = [group] if group else []


def shared_group() -> int | None:
    """The gid the cache is declared shared with, or None (not shared, or a group that does not exist)."""
    name = os.environ.get(SHARED_GROUP_ENV, "") or (_declared[0] if _declared else "")
    return _gid(name) if name else None


@functools.lru_cache(maxsize=8)
def _gid(name: str) -> int | None:
    if name.isdigit():
        return int(name)
    import grp

    try:
        return grp.getgrnam(name).gr_gid
    except KeyError:
        return None


@functools.lru_cache(maxsize=64)
def _member(uid: int, gid: int) -> bool:
    """Whether user `uid` belongs to group `gid` (its primary group or a supplementary one)."""
    import grp
    import pwd

    try:
        user = pwd.getpwuid(uid)
    except KeyError:
        return False
    if user.pw_gid == gid:
        return True
    try:
        return user.pw_name in grp.getgrgid(gid).gr_mem
    except KeyError:
        return False


def problem(st: os.stat_result, *, folder: bool = False) -> str:
    """Why a file (or, with `folder`, a folder) of this stat is not trusted ("" when it is)."""
    if not (stat.S_ISDIR(st.st_mode) if folder else stat.S_ISREG(st.st_mode)):
        return "not a folder" if folder else "not a regular file"
    me, group = os.geteuid(), shared_group()
    if folder and st.st_mode & stat.S_ISVTX and st.st_uid in (me, 0):
        return ""  # a sticky folder of this user's (or root's): others may add files, not replace ours
    if group is not None and st.st_gid == group:
        if st.st_mode & 0o002:
            return f"writable by other users (mode {stat.S_IMODE(st.st_mode):o})"
        if st.st_uid not in (me, 0) and not _member(st.st_uid, group):
            return f"owned by uid {st.st_uid}, not of the shared group {group}"
        return ""
    if st.st_uid not in (me, 0):
        return f"owned by uid {st.st_uid}"
    if st.st_mode & 0o022:
        return f"writable by other users (mode {stat.S_IMODE(st.st_mode):o})"
    return ""


@contextmanager
def open_trusted(path: Path) -> Iterator[io.BufferedReader]:
    """`path` opened for reading when the rule trusts it (checked on the opened descriptor: `open_regular`),
    else Untrusted; FileNotFoundError when absent."""
    try:
        with open_regular(path) as (fh, st):
            why = problem(st)
            if why:
                raise Untrusted(f"{path} is not trusted: {why}")
            yield fh
    except NotRegular as exc:
        raise Untrusted(str(exc)) from None


def read_trusted(path: Path) -> bytes:
    """The bytes of `path` when the rule trusts it, else Untrusted (a symbolic link: ELOOP, an OSError too)."""
    with open_trusted(path) as fh:
        return fh.read()


def read_json(path: Path) -> object:
    """The JSON document in `path` when the rule trusts it; None for a miss (absent, untrusted, not JSON)."""
    import json

    try:
        return json.loads(read_trusted(path).decode("utf-8"))
    except (OSError, ValueError):
        return None
