"""The remote wheel cache: entries of the local wheel cache (build/cache.py) as OCI artifacts on a registry.

One entry is one artifact in `<namespace>/wheels`, tagged by its cache key: an OCI image manifest with
`artifactType` ARTIFACT_TYPE, the empty config and one layer per part (the wheel, the entry's metadata, the
build log), annotated with the component, commit, describe, patches, toolchain and target, so that
`toolchain cache ls --remote` can say what a registry holds without downloading wheels.

Reading: a local miss asks the registry for the key. A hit downloads every part into a temporary directory
under the cache (each blob checked against its digest and size while it streams), checks the wheel's sha256
against the entry's metadata and the manifest, and only then puts it into the local cache, which publishes
by rename: a local entry is whole or absent, whatever happens to the registry or to this process.
Pushing: only when asked (`--push`, `[cache] push = true`); the manifest goes last, so a tag never names a
half-uploaded entry, and a key the registry already holds is not pushed again.

The registry is an accelerator, never a dependency. Every request is bounded (connect and read timeouts) and
tried once; the first failure (down, slow, credentials refused, a plain-HTTP host not opted in) prints ONE
warning and turns the remote off for the rest of the process, and the build goes on locally. An entry that
fails verification is refused (a warning naming it) and built locally.

Pushes use the `oras` client (oras-py) for the blob-upload protocol (HEAD, POST, PUT; layer descriptors)
over our transport (`_Transport`, replacing oras's `Registry.do_request`): as shipped, oras retries a failed
request 5 times sleeping 3 + 5 + 11 + 29 + 83 s (a dead registry would stall a build for over two minutes),
sets no timeout, and picks basic or token auth up front (a token client against an htpasswd registry fails
with an unrelated MissingSchema error). Ours answers the registry's challenge (Basic, or a Bearer token from
the realm it names) with credentials from build/regauth.py. Reads (manifests, tags, blobs) speak the
distribution HTTP API through the same transport directly: oras's pull writes straight to the destination
and checks no digest, its manifest GET logs every 404 (every cache miss), and importing oras costs about a
second that a build served from the cache should not pay.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import re
import shutil
import socket
import threading
import time
import weakref
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar
from urllib.parse import urljoin

from toolchain.build.regauth import Credentials, find_credentials
from toolchain.build.remotespec import ENV_INSECURE, ENV_TIMEOUT, RemoteSettings

from toolchain import __version__
from toolchain.build.cache import CacheEntry, WheelCache, meta_problem
from toolchain.core.proc.signals import STOPPING, on_stop
from toolchain.core.redact import redact_url
from toolchain.core.serial import Data
from toolchain.errors import ToolError

if TYPE_CHECKING:
    import requests

    from toolchain.build.plan import ComponentPlan, Plan
    from toolchain.console import UI


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
PREFETCH_JOBS = 4  # downloads at once
BLOB_UNKNOWN_RETRIES = 4  # manifest PUTs retried (0.1, 0.2, 0.4, 0.8 s apart) while another writer relinks a blob
MAX_MANIFEST, MAX_META, MAX_LOG = 4 << 20, 4 << 20, 256 << 20
MAX_TAG_PAGES = 1000  # tag list pages followed (`Link: next`) before the listing is called endless
MAX_ANNOTATION = 64 << 10  # characters of one annotation value shown (a registry may send anything)
WHEEL_NAME = re.compile(r"^[A-Za-z0-9_.+!-]+\.whl$")


class RemoteError(ToolError):
    """The registry could not be used (unreachable, slow, refused, answered nonsense)."""

    return_code = 1


class Refused(RemoteError):
    """One entry failed verification (its wheel, metadata or manifest do not agree)."""


class DeletesRefused(RemoteError):
    """The registry does not delete manifests (distribution answers 405 UNSUPPORTED unless delete is enabled)."""


# ---- the transport: one bounded try per request, the registry's auth challenge answered ----------------------

_OPEN_SOCKETS: weakref.WeakSet[socket.socket] = weakref.WeakSet()  # the transport's connections


def drop_requests() -> None:
    """Cut every connection the transport has open (a request waiting for an answer fails at once instead
    of waiting out its timeout): what a stop signal does (proc.on_stop). New requests are refused while
    `STOPPING` is set; it is cleared when the stop is over, so a later command in this process (a library
    caller, a test) talks to the registry again."""
    for sock in list(_OPEN_SOCKETS):
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


on_stop(drop_requests)


@functools.cache
def _adapter_class() -> type:
    """A requests adapter whose connections are noted in _OPEN_SOCKETS once connected."""
    from requests.adapters import HTTPAdapter
    from urllib3.connection import HTTPConnection, HTTPSConnection
    from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

    class Conn(HTTPConnection):
        def connect(self) -> None:
            super().connect()
            _OPEN_SOCKETS.add(self.sock)

    class SConn(HTTPSConnection):
        def connect(self) -> None:
            super().connect()
            _OPEN_SOCKETS.add(self.sock)

    class Pool(HTTPConnectionPool):
        ConnectionCls = Conn

    class SPool(HTTPSConnectionPool):
        ConnectionCls = SConn

    class Adapter(HTTPAdapter):
        def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
            super().init_poolmanager(*args, **kwargs)
            self.poolmanager.pool_classes_by_scheme = {"http": Pool, "https": SPool}

    return Adapter

class _Transport:
    """requests with timeouts and no retries; answers a 401 once, with Basic credentials or a Bearer token
    from the realm the registry names (as distribution's token auth and GHCR/Harbor do). requests drops the
    Authorization header when a blob download is redirected to another host (object storage)."""

    def __init__(self, settings: RemoteSettings, credentials: Credentials | None) -> None:
        import http.cookiejar

        import requests

        self.session = requests.Session()
        for scheme in ("http://", "https://"):
            self.session.mount(scheme, _adapter_class()())
        self.session.cookies.set_policy(http.cookiejar.DefaultCookiePolicy(allowed_domains=[]))
        self.prefix = "http" if settings.insecure else "https"
        self.timeout = (settings.timeout, settings.timeout)
        self.credentials = credentials
        self.authorization: str | None = None

    def request(self, url: str, method: str = "GET", data: Any = None, headers: Mapping[str, str] | None = None,
                json: dict[str, Data] | None = None, stream: bool = False) -> requests.Response:
        if STOPPING.is_set():
            import requests

            raise requests.exceptions.ConnectionError("the request was dropped: the tool is stopping")
        sent = dict(headers or {})
        used = self.authorization  # what THIS request carries: threads share the transport
        if used:
            sent["Authorization"] = used
        response = self.session.request(method, url, data=data, json=json, headers=sent, stream=stream,
                                        timeout=self.timeout)
        if response.status_code != 401:
            return response
        latest = self.authorization
        if latest and latest != used:  # another thread answered the challenge while this request was out
            answer: str | None = latest
        else:
            answer = self._answer(str(response.headers.get("WWW-Authenticate", "")))
        if answer is None or answer == used:  # the credentials this request carried were refused: final
            return response
        response.close()
        self.authorization = sent["Authorization"] = answer
        return self.session.request(method, url, data=data, json=json, headers=sent, stream=stream,
                                    timeout=self.timeout)

    def _answer(self, challenge: str) -> str | None:
        import requests

        scheme, _, params = challenge.partition(" ")
        if scheme.lower() == "basic":
            if self.credentials is None:
                return None
            return requests.auth._basic_auth_str(self.credentials.username, self.credentials.password)
        if scheme.lower() != "bearer":
            return None
        fields = dict(re.findall(r'(\w+)="([^"]*)"', params))
        if not fields.get("realm"):
            return None
        creds = (self.credentials.username, self.credentials.password) if self.credentials else None
        query = {k: v for k, v in fields.items() if k in ("service", "scope")}
        r = self.session.get(fields["realm"], params=query, auth=creds, timeout=self.timeout)
        if r.status_code != 200:
            return None
        try:
            doc = r.json()
        except ValueError:
            return None
        token = (doc.get("token") or doc.get("access_token")) if isinstance(doc, dict) else None
        if not isinstance(token, str) or not _TOKEN.match(token):  # a list, a number, a header-breaking string
            return None
        return f"Bearer {token}"


_TOKEN = re.compile(r"^[A-Za-z0-9._~+/=-]{1,16384}$")  # RFC 6750 b64token, bounded


@functools.cache
def _oras_class() -> type:
    """oras's registry client (imported when pushing: it costs a second at start-up) over our transport."""
    import oras.provider

    class OrasRegistry(oras.provider.Registry):  # type: ignore[misc]  # oras ships no type information
        def __init__(self, host: str, transport: _Transport) -> None:
            super().__init__(hostname=host, insecure=transport.prefix == "http", auth_backend="basic")
            self.auth = _NoConfigFiles()  # credentials come from regauth (oras would read docker's file itself)
            self.transport = transport

        def do_request(self, url: str, method: str = "GET", data: Any = None, headers: Mapping[str, str] | None = None,
                       json: dict[str, Data] | None = None, stream: bool = False) -> requests.Response:
            return self.transport.request(url, method, data=data, headers=headers, json=json, stream=stream)

    return OrasRegistry


class _NoConfigFiles:
    """Stands in for oras's auth backend: its config-file reading is regauth's job here."""

    def load_configs(self, *args: Any, **kwargs: Any) -> None:
        return None


@dataclass(frozen=True)
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

    def __init__(self, settings: RemoteSettings, env: Mapping[str, str] | None = None) -> None:
        self.settings, self.env = settings, env
        self.where = settings.where
        self.credentials = find_credentials(self.where.host, self.where.repository, env)
        self.transport = _Transport(settings, self.credentials)
        self.base = f"{self.transport.prefix}://{self.where.host}/v2/{self.where.repository}"
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
    def manifest(self, ref: str) -> tuple[dict[str, Any], str] | None:
        """(manifest, digest) of a tag or digest, or None when the registry does not hold it."""
        r = self._request("GET", f"{self.base}/manifests/{ref}", what=f"looking up {ref[:16]}", ok=(200, 404),
                          headers={"Accept": OCI_MANIFEST}, stream=True)
        with contextlib.closing(r):
            if r.status_code == 404:
                return None
            body = _read_limited(r, MAX_MANIFEST, f"manifest {ref}")
        digest = "sha256:" + hashlib.sha256(body).hexdigest()
        said = r.headers.get("Docker-Content-Digest")
        if said and said != digest:
            raise Refused(f"manifest {ref} has digest {digest}, the registry says {said}")
        try:
            doc = json.loads(body)
        except ValueError:
            raise Refused(f"manifest {ref} is not JSON") from None
        if not isinstance(doc, dict):
            raise Refused(f"manifest {ref} is not a JSON object")
        return doc, digest

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
        if not re.match(r"^sha256:[0-9a-f]{64}$", digest) or not isinstance(size, int) or not 0 <= size <= limit:
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
                    self._oras = _oras_class()(self.where.host, self.transport)
                container = self._oras.get_container(f"{self.where.host}/{self.where.repository}")
                r = self._oras.upload_blob(str(path), container, layer)
            except ValueError as exc:  # oras: the registry gave no upload location
                raise RemoteError(f"{self.where.host}: {what} failed: {exc}") from None
        self._check(r.status_code, what, (200, 201, 202))

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


# ---- the remote cache a build uses ---------------------------------------------------------------------------

class RemoteCache:
    """The remote behind one process's builds (shared by bisect's threads: `shared()`). Never raises: a
    problem is one warning, after which the remote is off (reads and pushes, or pushes only when just the
    push was refused); a refused entry is a warning that names it."""

    _shared: ClassVar[dict[RemoteSettings, RemoteCache]] = {}
    _shared_lock = threading.Lock()

    def __init__(self, settings: RemoteSettings) -> None:
        self.settings = settings
        self._registry_made: Registry | None = None
        self._lock = threading.Lock()
        self.off: str | None = None          # why reads (and pushes) stopped
        self.push_off: str | None = None     # why pushes stopped
        self.warnings: list[str] = []
        self.pushed: list[str] = []
        self.downloaded: list[str] = []

    @classmethod
    def shared(cls, settings: RemoteSettings) -> RemoteCache:
        """The one RemoteCache of these settings in this process (made on first use)."""
        with cls._shared_lock:
            if settings not in cls._shared:
                cls._shared[settings] = cls(settings)
            return cls._shared[settings]

    @property
    def push_enabled(self) -> bool:
        """Whether this machine pushes what it builds (asked to, and pushing has not been turned off by a failure)."""
        return self.settings.push and self.off is None and self.push_off is None

    def warm_up(self) -> None:
        """Make the client (imports requests, reads the auth files) in the background while the build plans:
        a build whose wheels all come from the registry should not wait for that at its first download."""
        def make() -> None:
            with contextlib.suppress(Exception):  # any problem shows, once, at the first real request
                self._registry()

        if self.off is None and self._registry_made is None:
            threading.Thread(target=make, name="remote-cache-warm-up", daemon=True).start()

    def _registry(self) -> Registry:
        """One client for the process's threads (a requests Session's connection pool is thread-safe)."""
        with self._lock:
            if self._registry_made is None:
                self._registry_made = Registry(self.settings)
            return self._registry_made

    def _warn(self, ui: UI, message: str) -> None:
        self.warnings.append(message)
        ui.warn(message)

    def _turn_off(self, ui: UI, err: RemoteError, *, push_only: bool = False) -> None:
        with self._lock:
            if self.off is not None or (push_only and self.push_off is not None):
                return
            if push_only:
                self.push_off = str(err)
                what = "not pushing to it"
            else:
                self.off = str(err)
                what = "building locally without it"
        tip = f" ({err.hint})" if err.hint else ""
        self._warn(ui, f"remote cache {self.settings.url}: {err}; {what} for the rest of this run{tip}")

    def fetch(self, key: str, name: str, cache: WheelCache, work: Path, ui: UI) -> CacheEntry | None:
        """The entry for `key` from the registry, verified and put into the local cache; None on a miss,
        a refused entry or a registry problem (the caller builds)."""
        if self.off is not None:
            return None
        tmp = work / f"{key}-remote-{os.urandom(4).hex()}"  # under the build's stale-leftover sweep
        try:
            reg = self._registry()
            got = reg.manifest(key)
            if got is None:
                return None
            manifest, digest = got
            ui.step(f"downloading {name} ({key[:12]}) from {self.settings.url}")
            tmp.mkdir(parents=True)
            entry = _install(reg, key, manifest, digest, cache, tmp)
            self.downloaded.append(key)
            return entry
        except Refused as err:
            self._warn(ui, f"remote cache {self.settings.url}: refused the entry for {name} ({key}): {err}; "
                           f"building it locally")
            return None
        except RemoteError as err:
            self._turn_off(ui, err)
            return None
        except _NONSENSE as exc:  # an answer no check above foresaw: the remote is off, never a traceback
            self._turn_off(ui, RemoteError(f"answered something this client cannot use while fetching {name} "
                                           f"({type(exc).__name__})"))
            return None
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def push(self, entry: CacheEntry, annotations: dict[str, str], name: str, work: Path, ui: UI) -> bool:
        """Upload a local entry unless the registry holds its key; True when pushed."""
        if not self.push_enabled:
            return False
        files = [(entry.wheel, MT_WHEEL), (entry.wheel.parent / "entry.json", MT_META)]
        if (entry.wheel.parent / "build.log").is_file():
            files.append((entry.wheel.parent / "build.log", MT_LOG))
        try:
            reg = self._registry()
            if reg.exists(entry.key):
                return False
            ui.step(f"pushing {name} ({entry.key[:12]}) to {self.settings.url}")
            reg.push(entry.key, files, annotations, work)
        except RemoteError as err:
            refused = "credentials" in str(err) or "HTTP 403" in str(err) or "HTTP 401" in str(err)
            self._turn_off(ui, err, push_only=refused)
            return False
        self.pushed.append(entry.key)
        return True

    def prefetch(self, wanted: list[tuple[str, str]], cache: WheelCache, work: Path, ui: UI) -> dict[str, bool]:
        """Look up and download several (key, name) at once (a build's local misses, before its first
        component builds: wheels download side by side). key -> True (now in the local cache) or False (the
        registry has no usable entry). Each key is fetched holding its build lock, like a build."""
        from concurrent.futures import ThreadPoolExecutor

        if self.off is not None or not wanted:
            return {}

        def one(item: tuple[str, str]) -> bool | None:
            key, name = item
            with cache.building(key):
                if cache.get(key) is not None:
                    return None  # another builder put it there meanwhile
                return self.fetch(key, name, cache, work, ui) is not None

        with ThreadPoolExecutor(max_workers=min(PREFETCH_JOBS, len(wanted))) as pool:
            found = dict(zip((k for k, _ in wanted), pool.map(one, wanted), strict=False))
        return {k: v for k, v in found.items() if v is not None and (v or self.off is None)}

    def summary(self) -> dict[str, Any]:
        """What the remote cache did in this build, for the JSON report: downloads, pushes, warnings."""
        return {"url": self.settings.url, "push": self.settings.push, "off": self.off, "push-off": self.push_off,
                "downloaded": list(self.downloaded), "pushed": list(self.pushed), "warnings": list(self.warnings)}


def _install(reg: Registry, key: str, manifest: dict[str, Any], digest: str, cache: WheelCache,
             tmp: Path) -> CacheEntry:
    """Download, verify, then put into the local cache (atomic there). Raises Refused for a bad entry."""
    if manifest.get("artifactType") != ARTIFACT_TYPE:
        raise Refused(f"the artifact tagged {key} is not a toolchain cache entry (artifactType "
                      f"{_shown(manifest.get('artifactType'))})")
    annotations = manifest.get("annotations") or {}
    if not isinstance(annotations, dict):
        raise Refused(f"its annotations are a {type(annotations).__name__}, not an object")
    if annotations.get(A + "cache-key") != key:
        raise Refused(f"the artifact tagged {key} says it is the entry of {_shown(annotations.get(A + 'cache-key'))}")
    listed = manifest.get("layers") or []
    if not isinstance(listed, list):
        raise Refused(f"its layers are a {type(listed).__name__}, not a list")
    layers: dict[str, dict[str, Any]] = {}
    for layer in listed:
        if isinstance(layer, dict) and layer.get("mediaType") in (MT_WHEEL, MT_META, MT_LOG):
            if layer["mediaType"] in layers:
                raise Refused(f"two {layer['mediaType']} layers")
            layers[layer["mediaType"]] = layer
    if MT_WHEEL not in layers or MT_META not in layers:
        raise Refused("the artifact lacks its wheel or its metadata layer")
    reg.blob_to(layers[MT_META], tmp / "entry.json", MAX_META)
    try:
        meta = json.loads((tmp / "entry.json").read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError):
        raise Refused("its metadata is not JSON") from None
    if not isinstance(meta, dict):
        raise Refused("its metadata is not a JSON object")
    problem = meta_problem(meta)
    if problem:
        raise Refused(f"its metadata {problem}")
    name, sha, size = meta.get("wheel"), meta.get("sha256"), meta.get("size")
    wheel_annotations = layers[MT_WHEEL].get("annotations") or {}
    title = wheel_annotations.get(TITLE) if isinstance(wheel_annotations, dict) else None
    if not isinstance(name, str) or not WHEEL_NAME.match(name) or title != name:
        raise Refused(f"its metadata names the wheel {_shown(name)}, the layer {_shown(title)}")
    if layers[MT_WHEEL].get("digest") != f"sha256:{sha}" or layers[MT_WHEEL].get("size") != size \
            or annotations.get(A + "wheel.sha256") != sha:
        raise Refused(f"the wheel layer ({_shown(layers[MT_WHEEL].get('digest'))}) is not the wheel its metadata "
                      f"records (sha256:{sha}, {size} bytes)")
    wheel = tmp / name
    reg.blob_to(layers[MT_WHEEL], wheel, layers[MT_WHEEL]["size"])  # checks the bytes against sha256 `sha` as they stream
    log = None
    if MT_LOG in layers:
        log = tmp / "build.log"
        try:
            reg.blob_to(layers[MT_LOG], log, MAX_LOG)
        except Refused:
            log = None  # a bad log costs the log, not the wheel
    kept = {k: v for k, v in meta.items() if k not in ("wheel", "sha256", "size", "stored", "remote")}
    kept["remote"] = {"url": reg.settings.url, "digest": digest, "downloaded": time.time()}
    entry = cache.put(key, wheel, kept, log=log)
    if entry.sha256 != sha:  # put re-hashes its own copy: a disk that changed it is caught too
        cache.evict(key)
        raise Refused(f"the local copy of {name} has sha256 {entry.sha256}, the entry records {sha}")
    return entry


def _shown(value: object) -> str:
    """A value from the registry, for a message: repr, cut short."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


# what a registry's unforeseen answer raises in this client's parsing (never a ToolError, never an OSError)
_NONSENSE = (ValueError, TypeError, KeyError, AttributeError, IndexError, OverflowError, UnicodeError)


def entry_annotations(plan: Plan, cp: ComponentPlan, entry: CacheEntry) -> dict[str, str]:
    """What `cache ls --remote` shows without downloading: manifest annotations (strings)."""
    comp = cp.component
    tc = plan.toolchain
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(entry.meta.get("stored") or time.time()))
    return {
        CREATED: created,
        A + "cache-key": cp.cache_key,
        A + "component": comp.name,
        A + "url": redact_url(comp.url),
        A + "commit": comp.commit,
        A + "describe": str(entry.meta.get("describe") or ""),
        A + "subdir": comp.subdir,
        A + "patches": ",".join(p.sha256 for p in cp.patches),
        A + "wheel": entry.wheel.name,
        A + "wheel.sha256": entry.sha256,
        A + "wheel.size": str(entry.size),
        A + "toolchain": json.dumps({"oneapi-version": tc.oneapi_version, "cmplr-root": tc.cmplr_root,
                                     "env-sha256": tc.env_diff_sha256}, sort_keys=True),
        A + "target": json.dumps(plan.target.fingerprint(), sort_keys=True),
        A + "tool-version": __version__,
    }


__all__ = ["ARTIFACT_TYPE", "MT_LOG", "MT_META", "MT_WHEEL", "DeletesRefused", "Registry", "RemoteCache", "RemoteError",
           "entry_annotations"]
