"""The line of a failed build's log that says why, for the error's first lines: pip ends a failed setup.py build
with "Failed to build ..." and "subprocess-exited-with-error", which name no cause; what CMake, git or the
compiler printed earlier does (ARK's CMake cloning FetchContent from the network: "Could not resolve host").
The patterns are tried in order, each over the whole log; the first line one matches is the cause."""

from __future__ import annotations

from pathlib import Path

from toolchain.core.regex import Regex

CAUSES = (
    Regex(r"Could not resolve host|unable to access '[^']+'|Failed to connect to|Network is unreachable"),
    Regex(r"FETCHCONTENT_FULLY_DISCONNECTED|Failed to (?:clone|checkout) repository"),
    Regex(r"CMake Error.*"),
    Regex(r"fatal error: .*|\berror: (?!subprocess-exited-with-error|legacy-install-failure|metadata-generation-failed).*"),
    Regex(r"\b[A-Z]\w*Error: .*|No such file or directory"),
)
MAX_READ = 8 * 1024 * 1024  # the tail of a huge log is enough


def failure_cause(log: Path) -> str:
    """The first log line the first matching pattern finds, trimmed; "" when none does (or no log)."""
    try:
        with open(log, "rb") as f:
            f.seek(max(0, f.seek(0, 2) - MAX_READ))
            lines = f.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return ""
    for pattern in CAUSES:
        for line in lines:
            if pattern.search(line):
                return line.strip()[:300]
    return ""


__all__ = ["failure_cause"]
