"""An image's manifest from its registry (the OCI distribution API: one small JSON document, no layer fetched),
for the size a pull would download. Anonymous: a registry's bearer-token challenge is answered without
credentials (public images, as docker.io serves them); a private one says why not. Loopback registries are
spoken to over http (a test or local registry), every other over https; proxies as the environment says.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

TIMEOUT = 20.0
ACCEPT = ", ".join(("application/vnd.oci.image.index.v1+json",
                    "application/vnd.docker.distribution.manifest.list.v2+json",
                    "application/vnd.oci.image.manifest.v1+json",
                    "application/vnd.docker.distribution.manifest.v2+json"))
LOOPBACK = ("localhost", "127.0.0.1", "[::1]")


class RegistryUnanswered(Exception):
    """The registry could not be asked, or did not give a manifest: why, in a line."""


def split_image(image: str) -> tuple[str, str, str]:
    """(registry host, repository, tag or digest) of an image reference; docker.io's short names as docker
    reads them (`ubuntu` → registry-1.docker.io, library/ubuntu)."""
    name, ref = (image.split("@", 1) if "@" in image else
                 image.rsplit(":", 1) if ":" in image.rsplit("/", 1)[-1] else (image, "latest"))
    first, _, rest = name.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        host, repo = first, rest
    else:
        host, repo = "docker.io", name
    if host == "docker.io":
        host = "registry-1.docker.io"
        repo = repo if "/" in repo else f"library/{repo}"
    return host, repo, ref


def manifest(image: str) -> dict[str, Any]:
    """The manifest (or index) the registry gives for `image`."""
    host, repo, ref = split_image(image)
    scheme = "http" if host.split(":")[0] in LOOPBACK or host.startswith("[::1]") else "https"
    url = f"{scheme}://{host}/v2/{repo}/manifests/{ref}"
    try:
        try:
            body = _get(url, {"Accept": ACCEPT})
        except urllib.error.HTTPError as exc:
            challenge = exc.headers.get("WWW-Authenticate", "") if exc.code == 401 else ""
            if not challenge.lower().startswith("bearer "):
                raise
            body = _get(url, {"Accept": ACCEPT, "Authorization": f"Bearer {_token(challenge)}"})
    except urllib.error.HTTPError as exc:
        raise RegistryUnanswered(f"{host} answered HTTP {exc.code} for {repo}") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise RegistryUnanswered(f"{host} cannot be reached (offline?): {reason}") from None
    try:
        data = json.loads(body)
    except ValueError:
        raise RegistryUnanswered(f"{host} gave no manifest for {repo}") from None
    if not isinstance(data, dict):
        raise RegistryUnanswered(f"{host} gave no manifest for {repo}")
    return data


def _get(url: str, headers: dict[str, str]) -> bytes:
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=TIMEOUT) as response:
        return bytes(response.read(1 << 22))  # a manifest is a few KiB


def _token(challenge: str) -> str:
    """An anonymous bearer token for `WWW-Authenticate: Bearer realm=...,service=...,scope=...`."""
    params = dict(re.findall(r'(\w+)="([^"]*)"', challenge))
    realm = params.pop("realm", "")
    if not realm:
        raise ValueError("a bearer challenge without a realm")
    data = json.loads(_get(f"{realm}?{urllib.parse.urlencode(params)}", {}))
    token = data.get("token") or data.get("access_token") if isinstance(data, dict) else None
    if not isinstance(token, str):
        raise ValueError("no token in the registry's answer")
    return token
