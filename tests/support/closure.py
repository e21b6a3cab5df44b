"""Fixtures for the runtime-closure tests: wheels of the stand-in torch in any build, a PEP 503 simple index
made from a folder of wheels and served by `python -m http.server` on 127.0.0.1, and demo recipe variants
with their own [resolve] table."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any

from packaging.utils import canonicalize_name, parse_wheel_filename

from toolchain.core import toml as tomlio
from toolchain.core.fs import sha256_file

if TYPE_CHECKING:
    from tests.spine_helpers import Cli, Result

REPO = Path(__file__).resolve().parents[2]
DEMO_SRC = REPO / "toolchain" / "demo_src"
WHEELHOUSE = DEMO_SRC / "wheelhouse"
STANDIN_TORCH_SRC = DEMO_SRC / "standin-torch"
STANDIN_SETVARS = DEMO_SRC / "oneapi-standin" / "setvars.sh"


def build_standin_torch(version: str, out: Path) -> Path:
    """A real wheel of the stand-in torch in build `version` (e.g. 2.14.0+cpu), made with `pip wheel`."""
    out.mkdir(parents=True, exist_ok=True)
    src = out.parent / f".src-standin-{version}"
    shutil.rmtree(src, ignore_errors=True)
    shutil.copytree(STANDIN_TORCH_SRC, src)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-build-isolation", "--no-deps", str(src),
                    "-w", str(out)], check=True, timeout=300, env=dict(os.environ, STANDIN_TORCH_VERSION=version))
    shutil.rmtree(src, ignore_errors=True)
    return next(out.glob(f"standin_torch-{version}-*.whl"))


def wheelhouse(dest: Path, *, without: tuple[str, ...] = (), torch: str = "2.14.0+xpu") -> Path:
    """A find-links folder: the demo's shipped packaging and tomli (minus `without`) and a stand-in torch build."""
    dest.mkdir(parents=True, exist_ok=True)
    for w in WHEELHOUSE.glob("*.whl"):
        name = str(parse_wheel_filename(w.name)[0])
        if name not in without and name != "standin-torch":
            shutil.copyfile(w, dest / w.name)
    if torch == "2.14.0+xpu":
        shipped = next(WHEELHOUSE.glob("standin_torch-*.whl"))
        shutil.copyfile(shipped, dest / shipped.name)
    elif torch:
        build_standin_torch(torch, dest)
    return dest


def simple_index(wheels: Path, root: Path) -> Path:
    """A PEP 503 simple index of the wheels in `wheels` (links with #sha256= fragments) under root/simple."""
    by_name: dict[str, list[Path]] = {}
    for w in sorted(wheels.glob("*.whl")):
        by_name.setdefault(str(canonicalize_name(parse_wheel_filename(w.name)[0])), []).append(w)
    simple = root / "simple"
    simple.mkdir(parents=True, exist_ok=True)
    (root / "files").mkdir(exist_ok=True)
    links = []
    for name, files in by_name.items():
        (simple / name).mkdir(exist_ok=True)
        rows = []
        for w in files:
            shutil.copyfile(w, root / "files" / w.name)
            rows.append(f'<a href="../../files/{w.name}#sha256={sha256_file(w)}">{w.name}</a><br>')
        (simple / name / "index.html").write_text("<!DOCTYPE html><html><body>\n" + "\n".join(rows) + "\n</body></html>\n")
        links.append(f'<a href="{name}/">{name}</a><br>')
    (simple / "index.html").write_text("<!DOCTYPE html><html><body>\n" + "\n".join(links) + "\n</body></html>\n")
    return simple


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def served(root: Path) -> Iterator[str]:
    """`python -m http.server` serving `root` on 127.0.0.1; yields the base URL."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1",
                             "--directory", str(root)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(url + "/", timeout=2).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise AssertionError(f"http.server on port {port} did not start") from None
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def demo_variant(recipes: Path, name: str, resolve: dict, **overrides: object) -> Path:
    """recipes/<name>.toml: the shipped demo with its own [resolve] (and any other tables replaced)."""
    data = tomlio.load_file(REPO / "recipes" / "demo.toml")
    # relative to the recipe file, like the shipped demo: a container runtime brings the folder in
    data["toolchain"] = {"setvars": os.path.relpath(STANDIN_SETVARS, recipes), "setvars-args": ["--force"]}
    data["resolve"] = resolve
    data.update(overrides)
    recipes.mkdir(parents=True, exist_ok=True)
    path = recipes / f"{name}.toml"
    path.write_text(tomlio.dumps(data))
    return path


def dead_proxy_env() -> dict[str, str]:
    """Every proxy variable pointing at a closed port: any network access beyond local files fails."""
    dead = f"http://127.0.0.1:{free_port()}"
    return {k: dead for k in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")} | {
        "NO_PROXY": "", "no_proxy": ""}


class CountingIndex:
    """A PEP 503 index (a folder `simple_index` made) served on 127.0.0.1 by a thread of the test process: it
    counts the requests it answers (`requests`: their paths), can answer each `latency` seconds late, can ask
    for credentials (`need_auth`: every request without the right ones gets 401) and can be stopped (`stop()`:
    the port then refuses connections, the outage) and served again on the same `port`."""

    def __init__(self, root: Path, *, latency: float = 0.0, need_auth: str = "", port: int = 0) -> None:
        import base64
        import http.server
        import threading

        self.requests: list[str] = []
        self.latency = latency
        self.need_auth = need_auth  # "user:password"
        index = self

        class Handler(http.server.SimpleHTTPRequestHandler):
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                super().__init__(*args, directory=str(root), **kwargs)

            def do_GET(self) -> None:
                index.requests.append(self.path)
                if index.latency:
                    time.sleep(index.latency)
                if index.need_auth:
                    want = "Basic " + base64.b64encode(index.need_auth.encode()).decode()
                    if self.headers.get("Authorization") != want:
                        self.send_response(401)
                        self.send_header("WWW-Authenticate", 'Basic realm="test index"')
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                        return
                super().do_GET()

            def log_message(self, *args: object) -> None:
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.port = self._server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def count(self) -> int:
        return len(self.requests)

    def stop(self) -> None:
        if self._thread.is_alive():
            self._server.shutdown()
            self._server.server_close()
            self._thread.join(timeout=30)

    def __enter__(self) -> CountingIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextmanager
def full_disk(where: Path) -> Iterator[Path]:
    """A 64 KiB tmpfs mounted at `where` (made empty first; what was there is put back after) and filled, so
    every write under it fails with ENOSPC; unmounted after. Needs root (the caller skips otherwise)."""
    kept = where.with_name(where.name + ".kept")
    had = where.exists()
    if had:
        where.rename(kept)
    where.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(where)], check=True)
    try:
        with open(where / ".filler", "wb") as f, suppress(OSError):
            f.write(b"\0" * (1 << 20))
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)
        shutil.rmtree(where, ignore_errors=True)
        if had:
            kept.rename(where)


def warm_builds(demo_cache: Path, root: Path) -> tuple[Path, Cli, Callable[..., tuple[Result, Path]]]:
    """(root, cli, build): a copy of the demo build's cache under `root` (every component cached) and a CLI
    to build recipe variants with it; build(recipe, out, *args, env=...) → (result, root / out)."""
    from tests.spine_helpers import Cli, isolated_env

    shutil.copytree(demo_cache, root / "cache", symlinks=True)
    cli = Cli(root, isolated_env(root))

    def build(recipe: Path, out: str, *args: object, env: dict[str, str] | None = None) -> tuple[Result, Path]:
        r = cli("build", "--recipe", recipe, "--patches-dir", REPO / "patches", "--cache-dir", root / "cache",
                "--out", root / out, "--json", *args, env=env)
        return r, root / out

    return root, cli, build
