"""The one OCI registry client: the remote wheel cache's entries (sharing), its retention, and base images'
manifests (target/container/presence.py) all speak to registries through it.

One entry is one artifact in `<namespace>/wheels`, tagged by its cache key: an OCI image manifest with
`artifactType` ARTIFACT_TYPE, the empty config and one layer per part (the wheel, the entry's metadata, the
build log), annotated with the component, commit, describe, patches, toolchain and target, so that
`toolchain cache ls --remote` can say what a registry holds without downloading wheels.

Reads (manifests, tags, blobs) speak the distribution HTTP API through the transport (sharing/transport.py)
directly: oras's pull writes straight to the destination and checks no digest, its manifest GET logs every 404
(every cache miss), and importing oras costs about a second that a build served from the cache should not pay.
Pushes go through oras's blob-upload protocol over the same transport. An image's manifest (`image_manifest`)
is read anonymously: a registry's bearer-token challenge is answered without credentials (public images, as
docker.io serves them).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urljoin

from toolchain.core.record import record
from toolchain.core.regex import SHA256
from toolchain.errors import ToolError
from toolchain.sharing.auth import find_credentials
from toolchain.sharing.settings import ENV_INSECURE, ENV_TIMEOUT, RemoteSettings
from toolchain.sharing.transport import Transport, oras_class

if TYPE_CHECKING:
    import requests


OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
ARTIFACT_TYPE = "application/vnd.xpu-toolchain.cache-entry.v1"
MT_WHEEL = "application/vnd.xpu-toolchain.wheel.v1+zip"
MT_META = "application/vnd.xpu-toolchain.metadata.v1+json"
MT_LOG = "application/vnd.xpu-toolchain.log.v1+text"
MT_EMPTY = "application/vnd.oci.empty.v1+json"
EMPTY = b"{}"
TITLE = "org.opencontainers.image.title"
CREATED = "org.opencontainers.image.created"
A = "vnd.xpu-toolchain."  # our annotations: A + "component", "commit", ...
BLOB_UNKNOWN_RETRIES = 4  # manifest PUTs retried (0.1, 0.2, 0.4, 0.8 s apart) while another writer relinks a blob
MAX_MANIFEST = 4 << 20
MAX_TAG_PAGES = 1000  # tag list pages followed (`Link: next`) before the listing is called endless
MAX_ANNOTATION = 64 << 10  # characters of one annotation value shown (a registry may send anything)


class RemoteError(ToolError):
    """The registry could not be used (unreachable, slow, refused, answered nonsense)."""

    return_code = 1


class Refused(RemoteError):
    """One entry failed verification (its wheel, metadata or manifest do not agree)."""


class DeletesRefused(RemoteError):
    """The registry does not delete manifests (distribution answers 405 UNSUPPORTED unless delete is enabled)."""


@record
class RemoteEntry:
    """One wheel kept in the remote cache: its cache key, manifest digest and annotations."""
    key: str
    digest: str
    annotations: dict[str, str]

    def to_dict(self) -> dict[str, Any]:
        a = self.annotations
        size = a.get(A + "wheel.size", "0")
        return {"key": self.key, "digest": self.digest, "component": a.get(A + "component", ""),
                "commit": a.get(A + "commit", ""), "describe": a.get(A + "describe", ""),
                "wheel": a.get(A + "wheel", ""), "sha256": a.get(A + "wheel.sha256", ""),
                "size": int(size) if size.isdigit() and len(size) <= 18 else 0, "created": a.get(CREATED, ""),
                "patches": [p for p in a.get(A + "patches", "").split(",") if p],
                "toolchain": _json_or_text(a.get(A + "toolchain", "")), "target": _json_or_text(a.get(A + "target", ""))}


def _json_or_text(value: str) -> Any:
    try:
        return json.loads(value)
    except ValueError:
        return value


class Registry:
    """The registry calls one remote cache needs. Each raises RemoteError (Refused for a bad entry) with a
    message that names the registry and what to do, never a credential."""

    def __init__(self, settings: RemoteSettings, env: Mapping[str, str] | None = None, repository: str = "") -> None:
        self.settings, self.env = settings, env
        self.where = settings.where
        self.repository = repository or self.where.repository  # another repository of that registry (an image's)
        self.credentials = find_credentials(self.where.host, self.repository, env)
        self.transport = Transport(insecure=settings.insecure, timeout=settings.timeout,
                                   credentials=self.credentials)
        self.base = f"{self.transport.prefix}://{self.where.host}/v2/{self.repository}"
        self._oras: Any = None

    # -- requests ------------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _talking(self, what: str) -> Iterator[None]:
        """Turn the transport's exceptions into RemoteError naming the registry and what was being done."""
        import requests

        try:
            yield
        except requests.exceptions.SSLError:
            raise RemoteError(f"{self.where.host}: TLS failed while {what} (is it a plain-HTTP registry?)",
                              hint=self._insecure_hint()) from None
        except requests.exceptions.RequestException as exc:  # refused, reset, broken off, silent, bad answer
            if _timed_out(exc):  # (urllib3 may report a read timeout on a pooled connection as a ConnectionError)
                raise RemoteError(f"{self.where.host} did not answer within {self.settings.timeout:g}s while {what}",
                                  hint=f"a slow registry is skipped; raise [cache] timeout or ${ENV_TIMEOUT}") from None
            raise RemoteError(f"cannot reach the registry {self.where.host} while {what}: {_reason(exc)}",
                              hint="check that the registry runs and the host and port are right") from None

    def _check(self, status: int, what: str, ok: tuple[int, ...]) -> None:
        if status in ok:
            return
        if status in (401, 403):
            raise RemoteError(self._denied(status, what), hint=self._login_hint())
        raise RemoteError(f"{self.where.host} answered HTTP {status} while {what}")

    def _request(self, method: str, url: str, *, what: str, ok: tuple[int, ...] = (200,), **kw: Any) -> requests.Response:
        with self._talking(what):
            r = self.transport.request(url, method, **kw)
        if r.status_code not in ok:
            r.close()
        self._check(r.status_code, what, ok)
        return r

    def _denied(self, code: int, what: str) -> str:
        if self.credentials is None:
            return f"{self.where.host} wants credentials for {what} (HTTP {code}) and none were found"
        verb = "refused" if code == 401 else "does not allow"
        return f"{self.where.host} {verb} the credentials of {self.credentials} for {what} (HTTP {code})"

    def _login_hint(self) -> str:
        return (f"`docker login {self.where.host}` or `podman login {self.where.host}`, or set "
                "TOOLCHAIN_REGISTRY_USERNAME and TOOLCHAIN_REGISTRY_PASSWORD")

    def _insecure_hint(self) -> str:
        return (f"only for a registry you trust on a private network: opt in to plain HTTP for this host with "
                f"--remote-insecure, [cache] insecure = true or {ENV_INSECURE}={self.where.host}")

    # -- reading -------------------------------------------------------------------------------------------
    def manifest(self, ref: str, accept: str = OCI_MANIFEST) -> tuple[dict[str, Any], str] | None:
        """(manifest, digest) of a tag or digest, or None when the registry does not hold it (`accept`: the
        media types asked for, comma-separated)."""
        r = self._request("GET", f"{self.base}/manifests/{ref}", what=f"looking up {ref[:16]}", ok=(200, 404),
                          headers={"Accept": accept}, stream=True)
        with contextlib.closing(r):
            if r.status_code == 404:
                return None
            body = _read_limited(r, MAX_MANIFEST, f"manifest {ref}")
        digest = "sha256:" + hashlib.sha256(body).hexdigest()
        said = r.headers.get("Docker-Content-Digest")
        if said and said != digest:
            raise Refused(f"manifest {ref} has digest {digest}, the registry says {said}")
        try:
            return _json_object(body), digest
        except ValueError as exc:
            raise Refused(f"manifest {ref} {exc}") from None

    def exists(self, tag: str) -> bool:
        """Whether the registry holds a manifest tagged `tag` (a HEAD request)."""
        r = self._request("HEAD", f"{self.base}/manifests/{tag}", what=f"looking up {tag[:16]}", ok=(200, 404),
                          headers={"Accept": OCI_MANIFEST})
        return r.status_code == 200

    def tags(self) -> list[str]:
        """Every tag, following `Link: next` pages: a page seen before, or more than MAX_TAG_PAGES of them,
        and an answer that is not a tag list are RemoteError (the registry answered nonsense)."""
        out: list[str] = []
        url: str | None = f"{self.base}/tags/list?n=1000"
        seen: set[str] = set()
        while url:
            if url in seen or len(seen) >= MAX_TAG_PAGES:
                raise RemoteError(f"{self.where.host} keeps sending more tag list pages (`Link: next` "
                                  f"{'back to a page already read' if url in seen else f'past {MAX_TAG_PAGES} pages'})")
            seen.add(url)
            r = self._request("GET", url, what="listing tags", ok=(200, 404), stream=True)
            with contextlib.closing(r):
                if r.status_code == 404:  # no repository yet: nothing pushed
                    return out
                body = _read_limited(r, MAX_MANIFEST, f"{self.where.host}: the tag list", RemoteError)
                nxt = r.links.get("next", {}).get("url")
            try:
                doc = json.loads(body)
            except ValueError:
                doc = None
            page = doc.get("tags") if isinstance(doc, dict) else None
            if page is None and isinstance(doc, dict):
                page = []
            if not isinstance(page, list) or not all(isinstance(t, str) for t in page):
                raise RemoteError(f"{self.where.host} answered the tag list with something that is not one "
                                  "(a JSON object with a list of strings under \"tags\")")
            out += page
            url = urljoin(url, nxt) if isinstance(nxt, str) and nxt else None
        return out

    def blob_to(self, layer: Mapping[str, Any], dest: Path, limit: int) -> None:
        """Stream a blob into `dest`, checking its size and digest; Refused (and `dest` removed) if wrong."""
        digest, size = str(layer.get("digest", "")), layer.get("size")
        if not re.match(rf"^sha256:{SHA256}$", digest) or not isinstance(size, int) or not 0 <= size <= limit:
            raise Refused(f"layer {layer.get('mediaType')} has a bad descriptor (digest {digest!r}, size {size!r})")
        r = self._request("GET", f"{self.base}/blobs/{digest}", what=f"downloading {dest.name}", stream=True)
        h, n = hashlib.sha256(), 0
        try:
            with self._talking(f"downloading {dest.name}"), contextlib.closing(r), open(dest, "wb") as f:
                for chunk in r.iter_content(1 << 20):
                    n += len(chunk)
                    if n > size:
                        raise Refused(f"{dest.name}: the registry sent more than the {size} bytes its manifest says")
                    h.update(chunk)
                    f.write(chunk)
        except BaseException:
            dest.unlink(missing_ok=True)
            raise
        if n != size or "sha256:" + h.hexdigest() != digest:
            dest.unlink(missing_ok=True)
            raise Refused(f"{dest.name}: the registry sent {n} bytes with sha256:{h.hexdigest()}, "
                          f"the manifest says {size} bytes with {digest}")

    # -- writing -------------------------------------------------------------------------------------------
    def push(self, tag: str, files: list[tuple[Path, str]], annotations: dict[str, str], work: Path) -> str:
        """Upload `files` ((path, media type), blobs first) and then the manifest tagged `tag`; its digest."""
        import oras.oci

        work.mkdir(parents=True, exist_ok=True)
        empty = work / f".empty-{os.urandom(16).hex()}.json"
        empty.write_bytes(EMPTY)
        try:
            blobs = []
            for path, media_type in files:
                layer = oras.oci.NewLayer(str(path), media_type=media_type)
                layer["annotations"] = {TITLE: path.name}
                blobs.append((path, layer))
            config = {"mediaType": MT_EMPTY, "digest": "sha256:" + hashlib.sha256(EMPTY).hexdigest(),
                      "size": len(EMPTY)}
            blobs.append((empty, config))
            for path, layer in blobs:
                self._upload(path, layer)
            manifest = {"schemaVersion": 2, "mediaType": OCI_MANIFEST, "artifactType": ARTIFACT_TYPE,
                        "config": config, "layers": [layer for _, layer in blobs[:-1]], "annotations": annotations}
            body = json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()
            self._put_manifest(tag, body, blobs)
        finally:
            empty.unlink(missing_ok=True)
        return "sha256:" + hashlib.sha256(body).hexdigest()

    def _put_manifest(self, tag: str, body: bytes, blobs: list[tuple[Path, dict[str, Any]]]) -> None:
        """PUT the manifest. A registry whose blob links another writer is rewriting at the same moment (two
        builders pushing one wheel: the filesystem storage of `distribution` truncates and rewrites the
        link) answers 400 MANIFEST_BLOB_UNKNOWN for a blob it holds; upload what it does not see, then retry."""
        what = f"pushing the manifest of {tag[:16]}"
        for attempt in range(BLOB_UNKNOWN_RETRIES + 1):
            r = self._request("PUT", f"{self.base}/manifests/{tag}", what=what, ok=(200, 201, 400), data=body,
                              headers={"Content-Type": OCI_MANIFEST})
            if r.status_code != 400:
                return
            said = _read_limited(r, MAX_MANIFEST, what).decode(errors="replace")
            r.close()
            if "BLOB_UNKNOWN" not in said or attempt == BLOB_UNKNOWN_RETRIES:
                raise RemoteError(f"{self.where.host} answered HTTP 400 while {what}: {_error_codes(said)}")
            time.sleep(0.1 * 2 ** attempt)
            for path, layer in blobs:
                if not self._has_blob(layer["digest"]):
                    self._upload(path, layer)

    def _has_blob(self, digest: str) -> bool:
        """Whether the registry serves the blob now (a link caught empty mid-rewrite is a 500: not served)."""
        r = self._request("HEAD", f"{self.base}/blobs/{digest}", what=f"looking up blob {digest[7:23]}",
                          ok=(200, 404, 500))
        r.close()
        return r.status_code == 200

    def _upload(self, path: Path, layer: dict[str, Any]) -> None:
        what = f"uploading {path.name}"
        with self._talking(what):
            try:
                if self._oras is None:
                    self._oras = oras_class()(self.where.host, self.transport)
                container = self._oras.get_container(f"{self.where.host}/{self.repository}")
                r = self._oras.upload_blob(str(path), container, layer)
            except ValueError as exc:  # oras: the registry gave no upload location
                raise RemoteError(f"{self.where.host}: {what} failed: {exc}") from None
        self._check(r.status_code, what, (200, 201, 202))

    def push_image(self, tag: str, blobs: list[tuple[Callable[[], Path], dict[str, Any]]], manifest: bytes,
                   mount_from: str = "") -> int:
        """Push an image: each blob the repository lacks (a HEAD first) is mounted from the repository
        `mount_from` of this registry when it holds it, else uploaded (its file asked for only then); then the
        manifest tagged `tag`. Returns the bytes uploaded (blobs the registry had or mounted cost none)."""
        sent, uploaded = 0, []
        for where, layer in blobs:
            digest = str(layer["digest"])
            if self._has_blob(digest):
                continue
            if mount_from:
                r = self._request("POST", f"{self.base}/blobs/uploads/?mount={digest}&from={mount_from}",
                                  what=f"mounting blob {digest[7:23]}", ok=(201, 202))
                r.close()
                if r.status_code == 201:
                    continue
            path = where()
            self._upload(path, layer)
            uploaded.append((path, layer))
            sent += int(layer["size"])
        self._put_manifest(tag, manifest, uploaded)
        return sent

    def delete(self, digest: str) -> bool:
        """Delete the manifest `digest` (every tag naming it goes with it); False when it was already gone. The
        blobs' space comes back when the registry's garbage collector runs."""
        what = f"deleting {digest[:19]}"
        r = self._request("DELETE", f"{self.base}/manifests/{digest}", what=what, ok=(200, 202, 404, 405))
        body = _read_limited(r, MAX_MANIFEST, what).decode(errors="replace") if r.status_code == 405 else ""
        r.close()
        if r.status_code == 405:
            raise DeletesRefused(
                f"{self.where.host} does not delete manifests (HTTP 405 {_error_codes(body) or 'Method Not Allowed'}): "
                "its storage has deletes turned off, so nothing was removed",
                hint="enable deletes on the registry: in distribution's config.yml `storage: {delete: {enabled: "
                     "true}}` (or REGISTRY_STORAGE_DELETE_ENABLED=true), restart it, and prune again; then run "
                     "`registry garbage-collect config.yml` (Debian: `docker-registry garbage-collect ...`) to free the blobs. `--dry-run` lists what would go")
        return r.status_code != 404

    def entries(self, component: str = "", jobs: int = 8) -> list[RemoteEntry]:
        """Every entry (manifests read concurrently), those of `component` only when given."""
        from concurrent.futures import ThreadPoolExecutor

        tags = [t for t in self.tags() if re.match(r"^[0-9a-f]{32}$", t)]
        local = threading.local()  # a client (a requests session) per worker thread

        def one(tag: str) -> RemoteEntry | None:
            if not hasattr(local, "registry"):
                local.registry = Registry(self.settings, self.env)
            try:
                got = local.registry.manifest(tag)
            except Refused:  # one bad manifest: not an entry to list
                return None
            if got is None or got[0].get("artifactType") != ARTIFACT_TYPE:
                return None
            annotations = got[0].get("annotations")
            if not isinstance(annotations, dict):
                return None
            return RemoteEntry(tag, got[1], {str(k)[:MAX_ANNOTATION]: str(v)[:MAX_ANNOTATION]
                                             for k, v in annotations.items()})

        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            found = [e for e in pool.map(one, tags) if e is not None]
        if component:
            found = [e for e in found if e.annotations.get(A + "component") == component]
        return sorted(found, key=lambda e: (e.annotations.get(CREATED, ""), e.key))


def _error_codes(body: str) -> str:
    """The OCI error codes of an error body ("MANIFEST_BLOB_UNKNOWN, ..."), or its start when it has none."""
    try:
        codes = [str(e.get("code")) for e in json.loads(body).get("errors", []) if isinstance(e, dict)]
    except (ValueError, AttributeError):
        codes = []
    return ", ".join(codes) if codes else (body.strip()[:200] or "no reason given")


def _json_object(body: bytes) -> dict[str, Any]:
    """A manifest's JSON object; ValueError saying what it is instead ("is not JSON", "is not a JSON object")."""
    try:
        doc = json.loads(body)
    except ValueError:
        raise ValueError("is not JSON") from None
    if not isinstance(doc, dict):
        raise ValueError("is not a JSON object")
    return doc


def _read_limited(r: requests.Response, limit: int, what: str, error: type[RemoteError] = Refused) -> bytes:
    data = b""
    for chunk in r.iter_content(1 << 16):
        data += chunk
        if len(data) > limit:
            raise error(f"{what} is larger than {limit} bytes")
    return data


def _timed_out(exc: BaseException) -> bool:
    """Whether a request failed because the registry did not answer in time: a Timeout, or a connection error
    wrapping a TimeoutError (urllib3's `ProtocolError('Connection aborted.', TimeoutError())`, whose text may
    not say "timed out"), found through the exception's arguments, cause and context."""
    import requests

    seen: set[int] = set()
    todo: list[object] = [exc]
    while todo:
        e = todo.pop()
        if not isinstance(e, BaseException) or id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, (requests.exceptions.Timeout, TimeoutError)) or "timed out" in str(e).lower():
            return True
        todo += [*e.args, e.__cause__, e.__context__]
    return False


def _reason(exc: BaseException) -> str:
    text = str(exc)
    for known in ("Connection refused", "Name or service not known", "No route to host", "timed out",
                  "Connection reset", "Connection aborted", "Temporary failure in name resolution",
                  "RemoteDisconnected", "IncompleteRead", "Connection broken"):
        if known.lower() in text.lower():
            return known.lower()
    return type(exc).__name__


# ---- an image's manifest: what a base image's pull would download ---------------------------------------------

IMAGE_TIMEOUT = 20.0
IMAGE_ACCEPT = ", ".join(("application/vnd.oci.image.index.v1+json",
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


def image_manifest(image: str) -> dict[str, Any]:
    """The manifest (or index) the registry gives for `image`, asked anonymously. Loopback registries are spoken
    to over http (a test or local registry), every other over https; proxies as the environment says."""
    import requests

    host, repo, ref = split_image(image)
    insecure = host.split(":")[0] in LOOPBACK or host.startswith("[::1]")
    transport = Transport(insecure=insecure, timeout=IMAGE_TIMEOUT, credentials=None)
    url = f"{transport.prefix}://{host}/v2/{repo}/manifests/{ref}"
    try:
        r = transport.request(url, headers={"Accept": IMAGE_ACCEPT}, stream=True)
        with contextlib.closing(r):
            if r.status_code != 200:
                raise RegistryUnanswered(f"{host} answered HTTP {r.status_code} for {repo}")
            body = _read_limited(r, MAX_MANIFEST, f"{host}: the manifest of {repo}")
    except requests.exceptions.RequestException as exc:
        raise RegistryUnanswered(f"{host} cannot be reached (offline?): {_reason(exc)}") from None
    except RemoteError:
        raise RegistryUnanswered(f"{host} gave no manifest for {repo}") from None
    finally:
        transport.session.close()
    try:
        return _json_object(body)
    except ValueError:
        raise RegistryUnanswered(f"{host} gave no manifest for {repo}") from None


__all__ = ["ARTIFACT_TYPE", "MT_LOG", "MT_META", "MT_WHEEL", "DeletesRefused", "Registry", "RegistryUnanswered",
           "RemoteError", "image_manifest", "split_image"]
