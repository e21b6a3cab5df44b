"""One `Runtime` serves on the host, in a fresh container and by exec into a running one: the same calls
(a shared host directory seen inside, copy in and out, a fresh venv, a long-running server started through
`Runtime.serve` and stopped), and at exit nothing it started or brought in is left.

The server is the stdlib's http.server run by the runtime's fresh venv, serving the shared directory: what
the host reads from 127.0.0.1 is the file it shared, read through the target's path for it."""

from __future__ import annotations

import os
import signal
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.smoke.smoke_helpers import free_port
from tests.support.container_fixtures import podman_image  # noqa: F401  (the module names test_container_smoke uses)
from tests.test_container_build import engine_run, remove, tool_containers
from toolchain.core.proc.runner import merge_env
from toolchain.recipe.load import TargetSpec
from toolchain.smoke.server import Server, ServeSpec
from toolchain.target import HostRuntime, Runtime, Serving, make_runtime

STRATEGIES = ["host", pytest.param("fresh", marks=[pytest.mark.container, pytest.mark.slow]),
              pytest.param("exec", marks=[pytest.mark.container, pytest.mark.slow])]


@pytest.fixture
def share(tmp_path: Path) -> Path:
    d = tmp_path / "share"
    d.mkdir()
    (d / "hello.txt").write_text(f"shared {uuid.uuid4().hex}\n")
    return d


@pytest.fixture
def where(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """(strategy, running container name or "")."""
    kind = request.param
    if kind == "host":
        yield kind, ""
        return
    image = request.getfixturevalue("podman_image")
    if kind == "fresh":
        yield kind, image
        assert tool_containers("podman") == []  # the serving container is removed at exit
        return
    name = f"toolchain-test-runtime-{uuid.uuid4().hex[:8]}"
    engine_run("podman", "run", "--detach", "--name", name, "--network=host", "--entrypoint", "sleep", image,
               "infinity")
    try:
        yield kind, name
        state = engine_run("podman", "container", "inspect", "--format", "{{.State.Running}}", name).stdout.strip()
        assert state == "true"  # left running
        assert engine_run("podman", "exec", name, "test", "-e", "/toolchain", check=False).returncode == 1
    finally:
        remove("podman", name)


def runtime_for(kind: str, ref: str, port: int, share: Path) -> Runtime:
    serving = Serving(port, share)
    if kind == "host":
        return HostRuntime()
    spec = (TargetSpec(runtime="podman", image=ref, python="python3", run_args=("--network=none",)) if kind == "fresh"
            else TargetSpec(runtime="podman", container=ref, python="python3"))
    return make_runtime(spec, serving=serving)


def answers(url: str) -> bool:
    try:
        return requests.get(url, timeout=2).ok
    except requests.RequestException:
        return False


@pytest.mark.parametrize("where", STRATEGIES, indirect=True)
def test_one_runtime_shares_copies_makes_a_venv_and_serves(where: tuple[str, str], share: Path,
                                                           tmp_path: Path) -> None:
    kind, ref = where
    port = free_port()
    log = tmp_path / "runtime.log"
    base = sys.executable if kind == "host" else "python3"
    with runtime_for(kind, ref, port, share) as runtime:
        # the shared directory, read where the target sees it
        seen = runtime.visible_path(share / "hello.txt")
        assert (seen == str(share / "hello.txt")) == (kind == "host")
        assert runtime.run(["cat", seen], capture=True).stdout == (share / "hello.txt").read_text()
        # copy in, copy out
        scratch = runtime.scratch(tmp_path / "scratch")
        runtime.copy_in(share, f"{scratch}/copied")
        back = tmp_path / "back"
        runtime.copy_out(f"{scratch}/copied", back)
        assert (back / "hello.txt").read_text() == (share / "hello.txt").read_text()
        # a fresh venv there, whose interpreter runs in it
        py = runtime.make_venv(base, f"{scratch}/venv", log)
        assert py.venv == f"{scratch}/venv"
        assert py.python == f"{scratch}/venv/bin/python"
        prefix = py.run([py.python, "-c", "import sys; print(sys.prefix)"], capture=True).stdout.strip()
        assert prefix == py.venv
        # a long-running server, started through the runtime, answering on this machine, then stopped
        argv = [py.python, "-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory",
                runtime.visible_path(share)]
        env = merge_env(os.environ, runtime.serve_env(py))
        assert env["VIRTUAL_ENV"] == py.venv
        spec = ServeSpec(tuple(argv), env, f"http://127.0.0.1:{port}", tmp_path / "server.log", 60.0,
                         ready_path="/hello.txt")
        with Server(spec, runtime.serve) as server:
            server.start()
            assert server.wait_ready().ok, server.log_text()
            assert requests.get(f"{spec.base_url}/hello.txt", timeout=5).text == (share / "hello.txt").read_text()
            server.stop(5.0)
        assert not answers(f"{spec.base_url}/hello.txt")
        if kind == "exec":
            # a server whose host process was killed (kill -9: nothing passes the stop on) still answers ...
            orphan = Server(spec, runtime.serve)
            orphan.start()
            assert orphan.wait_ready().ok, orphan.log_text()
            assert orphan.pid is not None
            os.kill(orphan.pid, signal.SIGKILL)
            orphan.wait_exit(10)
            assert answers(f"{spec.base_url}/hello.txt")
    if kind == "exec":  # ... until the runtime exits: it is stopped there
        assert not answers(f"{spec.base_url}/hello.txt")
