"""The registry client's HTTP transport: requests with timeouts and no retries, the registry's auth challenge
answered (Basic, or a Bearer token from the realm it names), and every open connection cut when a stop signal
arrives (`drop_requests`, registered with `core.proc.signals.on_stop`).

Pushes use the `oras` client (oras-py) for the blob-upload protocol (HEAD, POST, PUT; layer descriptors)
over this transport (`oras_class`, replacing oras's `Registry.do_request`): as shipped, oras retries a failed
request 5 times sleeping 3 + 5 + 11 + 29 + 83 s (a dead registry would stall a build for over two minutes),
sets no timeout, and picks basic or token auth up front (a token client against an htpasswd registry fails
with an unrelated MissingSchema error). Ours answers the registry's challenge with credentials from
sharing/auth.py.
"""

from __future__ import annotations

import contextlib
import functools
import re
import socket
import weakref
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from toolchain.core.proc.signals import STOPPING, on_stop
from toolchain.core.regex import Regex
from toolchain.core.serial import Data
from toolchain.sharing.auth import Credentials

if TYPE_CHECKING:
    import requests

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

class Transport:
    """requests with timeouts and no retries; answers a 401 once, with Basic credentials or a Bearer token
    from the realm the registry names (as distribution's token auth and GHCR/Harbor do). requests drops the
    Authorization header when a blob download is redirected to another host (object storage)."""

    def __init__(self, *, insecure: bool, timeout: float, credentials: Credentials | None) -> None:
        import http.cookiejar

        import requests

        self.session = requests.Session()
        for scheme in ("http://", "https://"):
            self.session.mount(scheme, _adapter_class()())
        self.session.cookies.set_policy(http.cookiejar.DefaultCookiePolicy(allowed_domains=[]))
        self.prefix = "http" if insecure else "https"
        self.timeout = (timeout, timeout)
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

        scheme, _, params = challenge.partition(" ")
        if scheme.lower() == "basic":
            if self.credentials is None:
                return None
            return self.credentials.basic_authorization()
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


_TOKEN = Regex(r"^[A-Za-z0-9._~+/=-]{1,16384}$")  # RFC 6750 b64token, bounded


@functools.cache
def oras_class() -> type:
    """oras's registry client (imported when pushing: it costs a second at start-up) over our transport."""
    import oras.provider

    class OrasRegistry(oras.provider.Registry):  # type: ignore[misc]  # oras ships no type information
        def __init__(self, host: str, transport: Transport) -> None:
            super().__init__(hostname=host, insecure=transport.prefix == "http", auth_backend="basic")
            self.auth = _NoConfigFiles()  # credentials come from sharing/auth.py (oras would read docker's file itself)
            self.transport = transport

        def do_request(self, url: str, method: str = "GET", data: Any = None, headers: Mapping[str, str] | None = None,
                       json: dict[str, Data] | None = None, stream: bool = False) -> requests.Response:
            return self.transport.request(url, method, data=data, headers=headers, json=json, stream=stream)

    return OrasRegistry


class _NoConfigFiles:
    """Stands in for oras's auth backend: its config-file reading is sharing/auth.py's job here."""

    def load_configs(self, *args: Any, **kwargs: Any) -> None:
        return None

