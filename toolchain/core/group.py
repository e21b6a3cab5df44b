"""The group a cache is declared shared with (the recipe's `[cache] shared-group`, or
$TOOLCHAIN_CACHE_SHARED_GROUP) and who belongs to it: what core/trust's rule allows besides you and root, and
whose lock core/fs waits for. Below both (it imports neither)."""

from __future__ import annotations

import functools
import os

SHARED_GROUP_ENV = "TOOLCHAIN_CACHE_SHARED_GROUP"

_declared: list[str] = []  # the recipe's [cache] shared-group for this run (declare_shared_group)


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
def member(uid: int, gid: int) -> bool:
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
