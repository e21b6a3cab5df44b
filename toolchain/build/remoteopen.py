"""`open_remote`: the remote wheel cache a build uses, or None. The settings are decided by remotespec without
the client; the client (build/remote.py and its OCI library) is imported here, and only when a remote is
configured. (remote.py reads remotespec's settings: opening it there would make the two import each other.)"""

from __future__ import annotations

from typing import TYPE_CHECKING

from toolchain.build.remotespec import RemoteRequest, resolve_settings
from toolchain.recipe.cachespec import CacheSpec

if TYPE_CHECKING:
    from toolchain.build.remote import RemoteCache


def open_remote(spec: CacheSpec, request: RemoteRequest) -> RemoteCache | None:
    """The remote cache to use (one per settings in this process), or None."""
    settings = resolve_settings(spec, request)
    if settings is None:
        return None
    from toolchain.build.remote import RemoteCache

    return RemoteCache.shared(settings)
