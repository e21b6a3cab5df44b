"""A TCP proxy on 127.0.0.1 in front of a real registry that cuts one transfer half-way and kills the registry
then: the registry dies mid-download or mid-upload, at a known point.

    with CutProxy(registry, cut=lambda method, path: method == "GET" and "/blobs/" in path) as proxy:
        ... talk to proxy.address ...           # the first matching exchange is cut; proxy.cut_done is set

HTTP/1.1 with keep-alive is followed request by request (Content-Length bodies: what the registry and the
client under test send). For a matching GET the registry's answer is forwarded up to half of its body; for a
matching PUT/PATCH/POST half of the request body reaches the registry. Then the registry is killed (SIGKILL)
and both connections are closed.

`before(method, path)`, when given, runs before each request is forwarded (to change the registry's storage at
a known point, as a concurrent writer would) and `cut` may then be a function that never matches.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tests.support.registry import Registry

BUF = 65536


def _read_head(sock: socket.socket, pending: bytes) -> tuple[bytes, bytes]:
    """(head including the blank line, what was read after it); (b"", b"") at EOF."""
    data = pending
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(BUF)
        if not chunk:
            return b"", b""
        data += chunk
    i = data.index(b"\r\n\r\n") + 4
    return data[:i], data[i:]


def _read_body(sock: socket.socket, pending: bytes, length: int) -> tuple[bytes, bytes]:
    data = pending
    while len(data) < length:
        chunk = sock.recv(BUF)
        if not chunk:
            break
        data += chunk
    return data[:length], data[length:]


def _length(head: bytes) -> int:
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value.strip())
    return 0


class CutProxy:
    def __init__(self, registry: Registry, cut: Callable[[str, str], bool],
                 before: Callable[[str, str], None] | None = None) -> None:
        self.registry, self.cut, self.before = registry, cut, before
        self.cut_done = threading.Event()
        self.server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.server.bind(("127.0.0.1", 0))
        self.server.listen(16)
        self.address = f"127.0.0.1:{self.server.getsockname()[1]}"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def __enter__(self) -> CutProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        with contextlib.suppress(OSError):
            self.server.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection((self.registry.host, self.registry.port), timeout=30)
        except OSError:
            client.close()
            return
        c_pending = u_pending = b""
        try:
            while True:
                head, c_pending = _read_head(client, c_pending)
                if not head:
                    return
                method, path = head.split(b" ", 2)[:2]
                body, c_pending = _read_body(client, c_pending, _length(head))
                cutting = not self.cut_done.is_set() and self.cut(method.decode(), path.decode())
                if cutting and method in (b"PUT", b"PATCH", b"POST") and body:
                    upstream.sendall(head + body[: len(body) // 2])
                    self._kill()
                    return
                if self.before is not None:
                    self.before(method.decode(), path.decode())
                upstream.sendall(head + body)
                rhead, u_pending = _read_head(upstream, u_pending)
                if not rhead:
                    return
                n = 0 if method == b"HEAD" else _length(rhead)
                rbody, u_pending = _read_body(upstream, u_pending, n)
                if cutting and method == b"GET":
                    client.sendall(rhead + rbody[: max(1, len(rbody) // 2)])
                    self._kill()
                    return
                client.sendall(rhead + rbody)
        except OSError:
            return
        finally:
            for s in (client, upstream):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()

    def _kill(self) -> None:
        self.registry.kill()
        self.cut_done.set()
