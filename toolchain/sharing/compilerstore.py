"""The shared compiler cache: ccache's own remote storage (Redis, or any HTTP server that takes GET and PUT),
so that a second machine's build of an adjacent commit is mostly hits on what the first one compiled.

    export TOOLCHAIN_COMPILER_CACHE_REMOTE=redis://cache.example:6379          # every machine
    export TOOLCHAIN_COMPILER_CACHE_REMOTE_MODE=read-write                      # the CI runners that fill it

The store: $TOOLCHAIN_COMPILER_CACHE_REMOTE (`none` turns it off; empty counts as unset), else the recipe's
`[build] compiler-cache-remote`. Credentials (`redis://:PASSWORD@HOST:PORT`, `http://USER:PASSWORD@HOST/PATH`) come from
the environment only (a recipe holding one is refused: recipe/buildspec.py); what is shown, logged or recorded
is the URL without them (`shown`).

The mode: $TOOLCHAIN_COMPILER_CACHE_REMOTE_MODE (`read-only` | `read-write`), else a `|read-only=...` attribute
of the URL, else read-write where $CI is set (as CI services set it: `true`), read-only elsewhere: developers
read what CI wrote and never fill the team's store with their work in progress.

The engine is ccache's: the build gets CCACHE_REMOTE_STORAGE (`URL|read-only=true|connect-timeout=...`).
A store that cannot be reached costs one TCP connect of at most PROBE_SECONDS once per `toolchain build` (once
per process: a bisect's steps do not ask again), and ONE warning; the build then goes on with the local cache alone (ccache is not given the store, so no compile
pays a timeout). The runner in the target connects once more before the build (a container whose network
does not reach the store: the same warning, the local cache). ccache's own short timeouts bound a store
that dies while the build runs.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Mapping
from typing import Literal

from toolchain.core.record import record
from toolchain.core.redact import without_credentials
from toolchain.errors import UsageError
from toolchain.recipe.buildspec import BuildSpec, StoreURL, parse_store_url

ENV_REMOTE, ENV_MODE = "TOOLCHAIN_COMPILER_CACHE_REMOTE", "TOOLCHAIN_COMPILER_CACHE_REMOTE_MODE"
MODES = ("read-only", "read-write")
OFF = ("none", "off")
PROBE_SECONDS = 1.0
# ccache's timeouts, in milliseconds (its defaults: connect 100, operation 10000): a store across a network gets
# half a second to accept, and an object (a kernel's object file can be tens of MB) five seconds to move
CONNECT_MS, OPERATION_MS = 500, 5000
OURS = ("read-only", "connect-timeout", "operation-timeout")  # the attributes this module sets


StoreMode = Literal["read-only", "read-write"]


@record
class RemoteStore:
    """One build's shared compiler cache. `url` may hold credentials: never show it; `shown` is for people,
    logs and locks."""
    url: str
    where: StoreURL
    mode: StoreMode
    origin: str    # what set it, for messages: "$TOOLCHAIN_COMPILER_CACHE_REMOTE" or "[build] compiler-cache-remote"
    mode_origin: str

    @property
    def shown(self) -> str:
        """The remote store's URL as it may be shown: its first part, without credentials."""
        return without_credentials(self.url.split("|")[0])

    @property
    def address(self) -> str:
        """HOST:PORT, what the runner in the target connects to before a build."""
        host = f"[{self.where.host}]" if ":" in self.where.host else self.where.host
        return f"{host}:{self.where.port}"

    def ccache_value(self) -> str:
        """CCACHE_REMOTE_STORAGE: the URL (a Redis password written as ccache reads it) and its attributes."""
        url = self.url.split("|")[0]
        if self.where.scheme == "redis":  # `redis://:PASSWORD@` (the redis-cli form): ccache sends no AUTH for it
            url = re.sub(r"^(redis://):([^@]*@)", r"\1\2", url)
        attrs = [(k, v) for k, v in self.where.attributes if k not in OURS]
        given = dict(self.where.attributes)
        attrs += [("connect-timeout", given.get("connect-timeout", str(CONNECT_MS))),
                  ("operation-timeout", given.get("operation-timeout", str(OPERATION_MS)))]
        if self.mode == "read-only":
            attrs.append(("read-only", "true"))
        return "|".join([url, *(f"{k}={v}" for k, v in attrs)])

    def describe(self) -> str:
        """The remote store for a summary: its URL, mode and where the mode came from."""
        return f"{self.shown} ({self.mode}, {self.mode_origin})"


def resolve(spec: BuildSpec, env: Mapping[str, str] | None = None) -> RemoteStore | None:
    """The shared store a build uses, or None. A URL or mode that is not understood is a UsageError (exit 2)
    naming where it was set (the environment's value, with any password, is never echoed)."""
    env = os.environ if env is None else env
    if env.get(ENV_REMOTE, "").strip():  # (empty: unset, as a CI secret that is not set arrives)
        url, origin = env[ENV_REMOTE], f"${ENV_REMOTE}"
    else:
        url, origin = spec.compiler_cache_remote, "[build] compiler-cache-remote"
    if not url.strip() or url.strip().lower() in OFF:
        return None
    try:
        where = parse_store_url(url)
    except ValueError as exc:
        raise UsageError(f"{origin}: {exc}",
                         hint="write it as redis://HOST:PORT or http://HOST:PORT/PATH (a password: "
                              "redis://:PASSWORD@HOST:PORT, in the environment only), or `none`") from None
    given = dict(where.attributes).get("read-only")
    mode: StoreMode
    if env.get(ENV_MODE):
        asked, mode_origin = env[ENV_MODE].strip().lower(), f"${ENV_MODE}"
        mode = "read-write" if asked == "read-write" else "read-only"
        if asked not in MODES:
            raise UsageError(f"${ENV_MODE}={env[ENV_MODE]!r}: use read-only or read-write",
                             hint="read-write for the CI runners that fill the shared cache, read-only elsewhere")
    elif given is not None:
        mode, mode_origin = ("read-only" if given.lower() in ("true", "1", "yes") else "read-write"), "the URL's |read-only"
    elif env.get("CI", "").strip().lower() not in ("", "0", "false", "no"):
        mode, mode_origin = "read-write", "$CI is set"
    else:
        mode, mode_origin = "read-only", "the default outside CI"
    return RemoteStore(url.strip(), where, mode, origin, mode_origin)


_UNUSABLE: dict[str, str] = {}  # stores found unusable in this process (a bisect's builds): url -> why


def unusable(store: RemoteStore) -> tuple[str, bool]:
    """(why the store cannot be used, "" when it can; whether that was already found in this process). A store
    found unusable stays so for the rest of the process, as the remote wheel cache does: the builds of a bisect
    pay for one check and one warning, not one a step."""
    if store.url in _UNUSABLE:
        return _UNUSABLE[store.url], True
    problem = probe(store)
    if problem:
        _UNUSABLE[store.url] = problem
    return problem, False


def probe(store: RemoteStore, timeout: float = PROBE_SECONDS) -> str:
    """Why the store cannot be used now ("" when it can): a TCP connect within `timeout`; for Redis also its
    answer to PING, after AUTH when the URL has a password (a refused password is found here, once, instead of
    in every compile)."""
    try:
        sock = socket.create_connection((store.where.host, store.where.port), timeout=timeout)
    except OSError as exc:
        return f"cannot connect to {store.address} within {timeout:g} s ({exc.strerror or exc.__class__.__name__})"
    with sock:
        if store.where.scheme != "redis":
            return ""
        user, password = _redis_auth(store.url.split("|")[0])
        words = [["AUTH", *([user] if user else []), password]] if password else []
        try:
            sock.sendall(b"".join(_resp(w) for w in [*words, ["PING"]]))
            answers = _lines(sock, len(words) + 1)
        except OSError as exc:
            return f"{store.address} did not answer PING within {timeout:g} s ({exc.strerror or exc.__class__.__name__})"
    refused = [a for a in answers if not a.startswith("+")]
    if refused:
        return f"{store.address} refused: {refused[0][1:80]}"
    return ""


def _redis_auth(url: str) -> tuple[str, str]:
    """(user, password) of a Redis URL as ccache reads it: `USER:PASSWORD@`, `PASSWORD@`, `:PASSWORD@`."""
    netloc = url.split("://", 1)[1].split("/", 1)[0]
    if "@" not in netloc:
        return "", ""
    info = netloc.rpartition("@")[0]
    user, colon, password = info.partition(":")
    return (user, password) if colon else ("", user)


def _resp(words: list[str]) -> bytes:
    out = [f"*{len(words)}\r\n".encode()]
    for w in words:
        data = w.encode()
        out.append(f"${len(data)}\r\n".encode() + data + b"\r\n")
    return b"".join(out)


def _lines(sock: socket.socket, count: int) -> list[str]:
    data = b""
    while data.count(b"\r\n") < count:
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    lines = data.decode("utf-8", "replace").split("\r\n")[:count]
    return lines + ["-no answer"] * (count - len(lines))


__all__ = ["ENV_MODE", "ENV_REMOTE", "MODES", "RemoteStore", "probe", "resolve", "unusable"]
