"""Which process owns what the tool leaves behind (a container): `owner_token()` names this one, `owner_gone()`
tells whether the one a token names has ended."""

from __future__ import annotations

import os
from pathlib import Path


def owner_token() -> str:
    """This process as `BOOT-ID/PID/START`: what the tool leaves behind (a container) carries it, so that a
    later run can tell whether its owner is gone (killed with SIGKILL), never mistaking a reused pid or a
    process of another boot or machine (a remote engine) for it."""
    return f"{_boot_id()}/{os.getpid()}/{_start_time(os.getpid())}"


def owner_gone(token: str) -> bool:
    """Whether the process `token` (`owner_token()`) names has ended. A token of another boot (or machine) is
    not known to be gone: it may run elsewhere."""
    boot, _, rest = token.partition("/")
    pid, _, start = rest.partition("/")
    if not boot or boot != _boot_id() or not pid.isdigit():
        return False
    return _start_time(int(pid)) != start


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def _start_time(pid: int) -> str:
    """When process `pid` started (clock ticks since boot: /proc/PID/stat field 22), "" when none runs."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    fields = text[text.rindex(")") + 2:].split()
    return fields[19] if len(fields) > 19 else ""
