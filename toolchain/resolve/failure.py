"""What went wrong when the resolver (uv) or the fetch of the locked files (pip) failed, read from its output:
the network (DNS, refused, reset, timeout, TLS, proxy), authentication, a full disk, a hash mismatch, or none
of these (then the index answered and the requirements are what cannot be met). Each class has a one-line
cause naming the host (never its credentials) and its own TIP; network and disk-full failures are raised as
`TransientError`, so bisect never remembers them as unbuildable."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from toolchain.core.record import record
from toolchain.core.redact import redact_text
from toolchain.core.regex import Regex
from toolchain.errors import BuildError, TransientError

_DISK = Regex(r"no space left on device|os error 28\b|errno 28\b|disk quota exceeded|os error 122\b"
              r"|errno 122\b|ENOSPC|EDQUOT", re.IGNORECASE)
_AUTH = Regex(r"\b401\b|\b403\b|unauthori[sz]ed|forbidden|missing credentials|authentication", re.IGNORECASE)
_HASH = Regex(r"hash mismatch|do not match the hashes|hashes? (?:do|does) not match", re.IGNORECASE)
# (what the cause line says, pattern), most specific first
_NETWORK = (
    ("the proxy refused or could not open the connection",
     Regex(r"tunnel error|proxy ?error|ProxyError|Cannot connect to proxy|proxy connect", re.IGNORECASE)),
    ("the host name does not resolve (DNS)",
     Regex(r"dns error|error resolving DNS|failed to lookup address|Name or service not known|"
           r"Temporary failure in name resolution|NameResolutionError|getaddrinfo failed|nodename nor servname",
           re.IGNORECASE)),
    ("TLS failed", Regex(r"invalid peer certificate|certificate verify failed|SSLError|tls handshake|"
                         r"UnknownIssuer|ssl\b.*error|handshake failure", re.IGNORECASE)),
    ("connection refused", Regex(r"Connection refused|os error 111\b|Errno 111\b", re.IGNORECASE)),
    ("the connection timed out", Regex(r"timed out|timeout|os error 110\b", re.IGNORECASE)),
    ("the connection was reset or dropped",
     Regex(r"Connection reset|connection closed|broken pipe|os error 104\b|unexpected EOF|"
           r"IncompleteRead|RemoteDisconnected|Connection aborted", re.IGNORECASE)),
    ("the network is unreachable",
     Regex(r"Network is unreachable|No route to host|os error 101\b|os error 113\b|"
           r"Max retries exceeded|NewConnectionError|client error \(Connect\)|tcp connect error", re.IGNORECASE)),
)
_URL = Regex(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"()`<>]+")
_PATH = Regex(r"[`'\"](/[^`'\"]+)[`'\"]")
_INTERPRETER = Regex(r"interpreter|python at|python executable", re.IGNORECASE)  # a line naming the Python, not a folder


@record
class Failure:
    """A classified failure: `kind` is network, auth, disk-full or hash; `cause` one line; `host` (or path)."""
    kind: str
    cause: str
    where: str


def classify(output: str) -> Failure | None:
    """The class of a failure from the failed command's output; None when it is none of them (the index
    answered: the requirements cannot be met)."""
    if _DISK.search(output):
        return Failure("disk-full", "no space left on device", _path(output))
    host = _host(output)
    if _HASH.search(output):
        return Failure("hash", "a downloaded file's sha256 differs from the one its index publishes", host)
    if _AUTH.search(output) and re.search(r"\b40[13]\b|credentials|unauthori", output, re.IGNORECASE):
        return Failure("auth", "the index refused the request (authentication)", host)
    for cause, pattern in _NETWORK:
        if pattern.search(output):
            return Failure("network", cause, host)
    return None


def raise_classified(output: str, *, what: str, log: object, disk_fallback: str = "",
                     leave: tuple[str, ...] = ()) -> None:
    """Raise the error for a classified failure of `what` ("resolving the runtime closure", ...); return
    when the output is none of the classes (or one in `leave`, which the caller words itself). Network and
    disk-full are TransientError (bisect resumes)."""
    failure = classify(output)
    if failure is None or failure.kind in leave:
        return
    raise error_for(failure, what=what, log=log, disk_fallback=disk_fallback)


def error_for(failure: Failure, *, what: str, log: object, disk_fallback: str = "") -> BuildError:
    """The error to raise for a classified resolver failure: disk full and network trouble are transient."""
    if failure.kind == "disk-full":
        where = failure.where or disk_fallback
        return TransientError(f"{what} failed: no space left on device{f' ({where})' if where else ''}",
                              kind="disk-full", hint=f"free space there (or point --cache-dir / TMPDIR at a larger "
                                                     f"disk) and run the same command again; log: {log}")
    host = failure.where or "the index"
    if failure.kind == "network":
        return TransientError(f"{what} failed: cannot reach {host}: {failure.cause}{_proxy_note(failure)}",
                              kind="network",
                              hint="nothing is wrong with the recipe: check the network, DNS or proxy "
                                   "(HTTPS_PROXY / NO_PROXY) and run the same command again; a closure already "
                                   f"resolved for the same wheels is reused without the network; log: {log}")
    if failure.kind == "auth":
        return BuildError(f"{what} failed: {host} refused the request: authentication (401/403)",
                          hint=f"give the index's credentials in ~/.netrc or a keyring (uv and pip read both; "
                               f"never in the recipe, which the lock records); log: {log}")
    return BuildError(f"{what} failed: hash mismatch: {failure.cause} (from {host})",
                      hint=f"the index changed or serves a damaged file: ask its owner, or resolve from "
                           f"another index; log: {log}")


def _proxy_note(failure: Failure) -> str:
    if "proxy" not in failure.cause:
        return ""
    import os

    proxy = next((os.environ[k] for k in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy", "HTTP_PROXY",
                                          "http_proxy") if os.environ.get(k)), "")
    return f" (proxy {host_of(proxy)})" if proxy else ""


def host_of(url: str) -> str:
    """`host[:port]` of a URL: never its user name or password."""
    try:
        parts = urlsplit(url.strip())
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return redact_text(url)
    if not host:
        return ""
    return f"{host}:{port}" if port else host


def _host(output: str) -> str:
    for url in _URL.findall(output):
        if not url.lower().startswith("file:"):
            host = host_of(url)
            if host:
                return host
    return ""


def _path(output: str) -> str:
    """The path a disk-full error names (uv quotes it in backticks, pip in quotes after the errno): the one
    nearest the error, at or before its line (uv names its interpreter earlier in its output, and the file it
    could not write in the `Caused by:` line above the errno)."""
    m = re.search(r"No space left on device:? *['\"](/[^'\"]+)['\"]", output)
    if m:
        return m.group(1)
    disk = _DISK.search(output)
    upto = output[:output.find("\n", disk.end()) if disk and "\n" in output[disk.end():] else len(output)]
    found = [p for line in upto.splitlines() if not _INTERPRETER.search(line) for p in _PATH.findall(line)]
    return found[-1] if found else ""  # (none: the caller names the folder it gave, uv's cache)
