"""`open_remote`: the remote wheel cache a build uses, or None. The settings are decided by sharing/settings.py
without the client; the client (build/remotecache.py, sharing/registry.py and its OCI library) is imported here,
and only when a remote is configured."""

from __future__ import annotations

from typing import TYPE_CHECKING

from toolchain.recipe.cachespec import CacheSpec
from toolchain.sharing.settings import RemoteRequest, resolve_settings

if TYPE_CHECKING:
    from toolchain.build.remotecache import RemoteCache


def open_remote(spec: CacheSpec, request: RemoteRequest) -> RemoteCache | None:
    """The remote cache to use (one per settings in this process), or None."""
    settings = resolve_settings(spec, request)
    if settings is None:
        return None
    from toolchain.build.remotecache import RemoteCache

    return RemoteCache.shared(settings)
