"""What a shell read while it sourced setvars, as the kernel saw it: the command run under `strace -f -e
trace=%file` where this machine has strace and may trace (the host runtime), and every path a read-only open,
a stat, an access check, a readlink or an exec named — found or absent (ENOENT: a file created there later is
a change). This sees what the wrapped `source` and `.` of toolchain/scripts/setvars.bash cannot: `command .
FILE`, `$(<FILE)`, `cat FILE`, a program found on PATH. Where strace is missing or tracing is not permitted
(a container without CAP_SYS_PTRACE, yama's ptrace_scope) the caller runs the command plainly and relies on
the wrapper."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from toolchain.core.regex import Regex

# `PID syscall(ARGS...) = RESULT`: the first string argument is the path (after a dirfd for the *at calls)
_CALL = Regex(r'^(?:\d+\s+)?(\w+)\((?:AT_FDCWD, |-?\d+(?:<[^>]*>)?, )?"((?:[^"\\]|\\.)*)"(.*)$')
_READS = frozenset({"open", "openat", "openat2", "creat", "stat", "lstat", "stat64", "lstat64", "newfstatat",
                    "fstatat64", "statx", "access", "faccessat", "faccessat2", "execve", "execveat", "readlink",
                    "readlinkat"})
_OPENS = frozenset({"open", "openat", "openat2", "creat"})
_WRITES = ("O_WRONLY", "O_RDWR", "O_CREAT", "O_TRUNC", "O_APPEND")
_SKIP = ("/proc/", "/sys/", "/dev/")


def tracer() -> str | None:
    """strace's path on this machine, or None."""
    return shutil.which("strace")


def traced_argv(strace: str, trace_file: Path, argv: list[str]) -> list[str]:
    """`argv` run under strace, following forks, logging the file system calls to `trace_file`."""
    return [strace, "-f", "-qq", "-e", "trace=%file", "-o", str(trace_file), *argv]


def _unescape(path: str) -> str:
    if "\\" not in path:
        return path
    return path.encode("latin-1", "backslashreplace").decode("unicode_escape").encode("latin-1").decode(
        "utf-8", "surrogateescape")


def paths_read(trace: str, cwd: str) -> list[str]:
    """The absolute paths the traced processes read, looked up or executed (found or absent), in first-seen
    order; relative ones resolved against `cwd` (where the shell started); not /proc, /sys, /dev, not what
    was opened for writing, not a folder only looked up (a stat, not a listing)."""
    found: dict[str, None] = {}
    for line in trace.splitlines():
        m = _CALL.match(line)
        if m is None or m.group(1) not in _READS:
            continue
        call, path, rest = m.group(1), _unescape(m.group(2)), m.group(3)
        if call in _OPENS and (call == "creat" or any(w in rest for w in _WRITES)):
            continue
        if not path:
            continue
        path = os.path.normpath(os.path.join(cwd, path))
        if (path + "/").startswith(_SKIP) or path in found:
            continue
        if call not in _OPENS and os.path.isdir(path):
            continue  # (a folder looked up, not listed: bash checks its working folder; its listing is not read)
        found.setdefault(path)
    return list(found)
