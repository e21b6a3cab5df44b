"""A scripted, hostile OCI registry on 127.0.0.1 for the corpus: each answer is what a test sets.

    with FakeRegistry() as reg:
        reg.route("GET", "/v2/team/wheels/tags/list", json_body={"tags": 5})
        reg.url            # oci://127.0.0.1:PORT/team (plain HTTP: pass --remote-insecure)

A route is (method, path) -> Answer (status, headers, body); unknown paths answer 404 like an empty registry.
`hits` counts the requests per path (a `Link: next` loop is seen as many hits on one path). Threads: one per
connection (ThreadingHTTPServer), so parallel pulls meet parallel answers.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

NAMESPACE = "team"
REPO = f"{NAMESPACE}/wheels"


@dataclass
class Answer:
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""


def json_answer(doc: Any, status: int = 200, headers: dict[str, str] | None = None) -> Answer:
    return Answer(status, {"Content-Type": "application/json", **(headers or {})}, json.dumps(doc).encode())


class FakeRegistry:
    def __init__(self) -> None:
        self.routes: dict[tuple[str, str], Answer | Callable[[BaseHTTPRequestHandler], Answer]] = {}
        self.hits: Counter[str] = Counter()
        self._server: ThreadingHTTPServer | None = None

    # -- scripting -----------------------------------------------------------------------------------------
    def route(self, method: str, path: str, answer: Answer | Callable[[BaseHTTPRequestHandler], Answer]) -> None:
        self.routes[(method, path)] = answer

    def reset(self) -> None:
        self.routes.clear()
        self.hits.clear()

    @property
    def address(self) -> str:
        assert self._server is not None
        return f"127.0.0.1:{self._server.server_address[1]}"

    @property
    def url(self) -> str:
        return f"oci://{self.address}/{NAMESPACE}"

    @property
    def base(self) -> str:
        return f"http://{self.address}"

    # -- serving -------------------------------------------------------------------------------------------
    def __enter__(self) -> FakeRegistry:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def _serve(self) -> None:
                path = self.path.split("?", 1)[0]
                fake.hits[path] += 1
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                got = fake.routes.get((self.command, path)) or fake.routes.get(("*", path))
                answer = got(self) if callable(got) else (got or Answer(404, {}, b'{"errors":[]}'))
                self.send_response(answer.status)
                for k, v in answer.headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(answer.body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(answer.body)

            do_GET = do_HEAD = do_PUT = do_POST = _serve

        class Server(ThreadingHTTPServer):
            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # a client that stops reading a hostile answer (as it should) is no error of the test

        self._server = Server(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, name="fake-registry", daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.shutdown()
        self._server.server_close()
