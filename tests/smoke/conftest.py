"""Fixtures for the smoke tests (helpers live in smoke_helpers.py)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.smoke.smoke_helpers import SmokeRun, free_port
from toolchain import cli


@pytest.fixture
def smoke(tmp_path, capsys):
    """Run `toolchain smoke ARGS --out DIR --port P` in this process (fast; the server is a subprocess)."""
    def go(*args: str, out: Path | None = None, port: int | None = None) -> SmokeRun:
        out = out or tmp_path / f"out-{time.monotonic_ns()}"
        argv = ["smoke", "--json", *args, "--out", str(out)]
        if "--port" not in args:
            argv += ["--port", str(port or free_port())]
        started = time.monotonic()
        code = cli.main(argv)
        return SmokeRun(code, out, time.monotonic() - started, capsys.readouterr().out)
    return go
