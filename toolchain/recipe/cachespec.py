"""A recipe's `[cache]` table: a remote wheel cache on an OCI registry, shared by a team or a CI fleet.

    [cache]
    remote = "oci://registry.example.com:5000/xpu-team"   # oci://HOST[:PORT]/NAMESPACE
    push = true        # upload what this machine builds (CI does; users read by default)
    insecure = true    # this host speaks plain HTTP (an explicit opt-in, for this host only)
    timeout = 20       # seconds: a registry slower than this is skipped (one warning, a local build)
    shared-group = "xpu-team"   # the local cache folder is shared with this group (a name or a gid): files
                                # it can write are trusted too (core/trust.py; $TOOLCHAIN_CACHE_SHARED_GROUP)

The URL never holds credentials: they come from the docker/podman auth files or the environment, so that a
recipe (which a lock records) can be committed and shared.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from toolchain.core.record import field, record
from toolchain.core.regex import Regex
from toolchain.recipe.keys import key, keys_of

SCHEME = "oci"
DEFAULT_TIMEOUT = 20.0
MAX_TIMEOUT = 3600.0  # an hour: a registry slower than that is no accelerator (and urllib3 refuses inf)
# distribution's repository name grammar: path components of lower-case alphanumerics and separators
_COMPONENT = Regex(r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$")
_GROUP = Regex(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*\$?$")  # a group name (useradd's rules) or a gid
_HOST = Regex(r"^[A-Za-z0-9.-]+(?::[0-9]{1,5})?$|^\[[0-9A-Fa-f:]+\](?::[0-9]{1,5})?$")


@record
class RemoteURL:
    """Where a remote wheel cache lives on an OCI registry."""

    host: str       # host[:port], as registries and auth files name it
    namespace: str  # the repository prefix: entries live in <namespace>/wheels

    @property
    def url(self) -> str:
        """The cache's oci://HOST/NAMESPACE URL."""
        return f"{SCHEME}://{self.host}/{self.namespace}"

    @property
    def repository(self) -> str:
        """The registry repository holding the cached wheels (NAMESPACE/wheels)."""
        return f"{self.namespace}/wheels"


@record
class CacheSpec:
    """A recipe's [cache] table: the remote wheel cache and how it is used."""

    remote: str = field(default="", metadata=key(str))
    push: bool = field(default=False, metadata=key(bool))
    insecure: bool = field(default=False, metadata=key(bool))
    timeout: float = field(default=DEFAULT_TIMEOUT, metadata=key(object))  # an int or a float: checked below
    shared_group: str = field(default="", metadata=key(str))  # the local cache's group (core/trust.py)


CACHE_KEYS = keys_of(CacheSpec)


def parse_remote_url(value: str) -> RemoteURL:
    """`oci://HOST[:PORT]/NAMESPACE` → RemoteURL; ValueError says what is wrong (never echoing a password)."""
    parts = urlsplit(value.strip())
    if parts.scheme != SCHEME:
        raise ValueError(f"must start with {SCHEME}:// (oci://HOST[:PORT]/NAMESPACE), got {parts.scheme or 'no'} scheme")
    if "@" in parts.netloc:
        raise ValueError("holds credentials (user@ or user:password@); remove them: they are read from "
                         "docker/podman login files or TOOLCHAIN_REGISTRY_USERNAME/TOOLCHAIN_REGISTRY_PASSWORD")
    if not parts.netloc or not _HOST.match(parts.netloc):
        raise ValueError("needs a registry host (oci://HOST[:PORT]/NAMESPACE)")
    if parts.query or parts.fragment:
        raise ValueError("takes no ?query or #fragment")
    namespace = parts.path.strip("/")
    if not namespace:
        raise ValueError("needs a namespace after the host (oci://HOST[:PORT]/NAMESPACE), e.g. oci://ghcr.io/my-team")
    bad = [c for c in namespace.split("/") if not _COMPONENT.match(c)]
    if bad:
        raise ValueError(f"namespace part {bad[0]!r} is not a valid repository name (lower-case letters, digits, "
                         f"'.', '_', '-')")
    return RemoteURL(parts.netloc.lower(), namespace)


def timeout_problem(value: object) -> str:
    """Why `value` is not a usable timeout ("" when it is): a finite number of seconds, > 0, at most an hour."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not 0 < value <= MAX_TIMEOUT:
        return f"must be a number of seconds above 0 and at most {MAX_TIMEOUT:g}, got {value!r}"
    return ""


def cache_spec(table: Any, add_problem: Callable[[str, str], None]) -> CacheSpec:
    """The validated `[cache]` table; `add_problem(key, message)` collects what is wrong (key types are
    checked by the caller against CACHE_KEYS)."""
    if not isinstance(table, dict):
        return CacheSpec()
    remote = table.get("remote", "")
    if isinstance(remote, str) and remote:
        try:
            parse_remote_url(remote)
        except ValueError as exc:
            add_problem("cache.remote", str(exc))
            remote = ""
    timeout = table.get("timeout", DEFAULT_TIMEOUT)
    problem = timeout_problem(timeout)
    if problem:
        add_problem("cache.timeout", problem)
        timeout = DEFAULT_TIMEOUT
    group = table.get("shared-group", "")
    if isinstance(group, str) and group and not _GROUP.match(group):
        add_problem("cache.shared-group", f"must be a group name or a gid, got {group!r}")
        group = ""
    return CacheSpec(remote=remote if isinstance(remote, str) else "",
                     push=table.get("push") is True, insecure=table.get("insecure") is True, timeout=float(timeout),
                     shared_group=group if isinstance(group, str) else "")
