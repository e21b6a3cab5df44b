"""A real HTTP storage for ccache in tests: a server on 127.0.0.1 that takes PUT and answers GET and HEAD from a
folder (what ccache's `http://` remote storage needs of a WebDAV location or an object store), optionally
behind HTTP Basic auth.

    with serve_http_store(tmp_path / "store", password="p") as store:
        store.url        # http://ccache:p@127.0.0.1:PORT/cache
        store.objects()  # how many objects it holds

It runs in a thread of the test process and serves the tool's subprocesses (ccache) over TCP.
"""

from __future__ import annotations

import base64
import contextlib
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Optional

USER = "ccache"
PREFIX = "/cache/"


@dataclass
class HttpStore:
    root: Path
    port: int
    password: Optional[str]
    puts: list[str]

    @property
    def bare_url(self) -> str:
        return f"http://127.0.0.1:{self.port}{PREFIX.rstrip('/')}"

    @property
    def url(self) -> str:
        creds = f"{USER}:{self.password}@" if self.password else ""
        return f"http://{creds}127.0.0.1:{self.port}{PREFIX.rstrip('/')}"

    def objects(self) -> int:
        return sum(1 for p in self.root.rglob("*") if p.is_file())


def _handler(store: HttpStore) -> type[BaseHTTPRequestHandler]:
    want = "Basic " + base64.b64encode(f"{USER}:{store.password}".encode()).decode() if store.password else ""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:  # quiet: the test reads counts, not logs
            pass

        def _path(self) -> Optional[Path]:
            if want and self.headers.get("Authorization") != want:
                self.send_response(401)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return None
            rel = self.path.split("?", 1)[0]
            if not rel.startswith(PREFIX) or ".." in rel:
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return None
            return store.root / rel[len(PREFIX):]

        def do_GET(self) -> None:
            self._read(body=True)

        def do_HEAD(self) -> None:
            self._read(body=False)

        def _read(self, body: bool) -> None:
            path = self._path()
            if path is None:
                return
            if not path.is_file():
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            data = path.read_bytes()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if body:
                self.wfile.write(data)

        def do_PUT(self) -> None:
            path = self._path()
            if path is None:
                return
            data = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
            tmp.write_bytes(data)
            os.replace(tmp, path)
            store.puts.append(path.name)
            self.send_response(201)
            self.send_header("Content-Length", "0")
            self.end_headers()

    return Handler


@contextlib.contextmanager
def serve_http_store(root: Path, password: Optional[str] = None) -> Iterator[HttpStore]:
    root.mkdir(parents=True, exist_ok=True)
    store = HttpStore(root, 0, password, [])
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(store))
    store.port = int(server.server_address[1])
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield store
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
