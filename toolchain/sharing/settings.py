"""Which remote wheel cache a build uses, decided without importing the client (sharing/registry.py, build/remotecache.py): a build
with no remote, the common case, never pays for it (`remoteopen.open_remote` imports it only for a remote).

--remote-cache, else $TOOLCHAIN_REMOTE_CACHE, else the recipe's `[cache] remote`; `none` turns it off."""

from __future__ import annotations

import os
from collections.abc import Mapping

from toolchain.core.record import record
from toolchain.errors import UsageError
from toolchain.recipe.cachespec import DEFAULT_TIMEOUT, CacheSpec, RemoteURL, parse_remote_url, timeout_problem

ENV_REMOTE, ENV_INSECURE, ENV_TIMEOUT = "TOOLCHAIN_REMOTE_CACHE", "TOOLCHAIN_REMOTE_INSECURE", "TOOLCHAIN_REMOTE_TIMEOUT"
OFF = ("", "none", "off")  # --remote-cache none: no remote, whatever the recipe or the environment say


@record
class RemoteRequest:
    """What the command line asked for; None: not given (the environment, then the recipe decide)."""
    url: str | None = None
    push: bool | None = None
    insecure: bool = False  # --remote-insecure: the given (or configured) host speaks plain HTTP


@record
class RemoteSettings:
    """The remote wheel cache a build uses, once the recipe, options and environment are merged."""

    where: RemoteURL
    push: bool = False
    insecure: bool = False
    timeout: float = DEFAULT_TIMEOUT

    @property
    def url(self) -> str:
        """The remote cache's oci:// URL."""
        return self.where.url


def resolve_settings(spec: CacheSpec, request: RemoteRequest = RemoteRequest(),
                     env: Mapping[str, str] | None = None) -> RemoteSettings | None:
    """The remote to use: --remote-cache, else $TOOLCHAIN_REMOTE_CACHE, else the recipe's [cache] remote.
    Plain HTTP only for a host opted in: --remote-insecure, a host:port listed in $TOOLCHAIN_REMOTE_INSECURE
    (comma-separated), or `[cache] insecure = true` when the remote is the recipe's own."""
    env = os.environ if env is None else env
    if request.url is not None:
        url, origin = request.url, "--remote-cache"
    elif env.get(ENV_REMOTE) is not None:
        url, origin = env[ENV_REMOTE], f"${ENV_REMOTE}"
    else:
        url, origin = spec.remote, "[cache] remote"
    if url.strip().lower() in OFF:
        return None
    try:
        where = parse_remote_url(url)
    except ValueError as exc:
        raise UsageError(f"{origin}: {exc}", hint="write it as oci://HOST[:PORT]/NAMESPACE") from None
    recipe_host = parse_remote_url(spec.remote).host if spec.remote else None
    listed = {h.strip().lower() for h in env.get(ENV_INSECURE, "").split(",") if h.strip()}
    insecure = request.insecure or where.host in listed or (spec.insecure and where.host == recipe_host)
    timeout = spec.timeout
    if env.get(ENV_TIMEOUT):
        try:
            timeout = float(env[ENV_TIMEOUT])
        except ValueError:
            timeout = float("nan")
        problem = timeout_problem(timeout)
        if problem:
            raise UsageError(f"${ENV_TIMEOUT}={env[ENV_TIMEOUT]!r}: {problem.split(', got')[0]}",
                             hint=f"set ${ENV_TIMEOUT} to seconds, e.g. 20, or unset it") from None
    push = request.push if request.push is not None else spec.push
    return RemoteSettings(where, push=push, insecure=insecure, timeout=timeout)


__all__ = ["ENV_INSECURE", "ENV_REMOTE", "ENV_TIMEOUT", "OFF", "RemoteRequest", "RemoteSettings",
           "resolve_settings"]
