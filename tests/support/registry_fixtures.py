"""pytest fixtures `registry` and `auth_registry`: a real OCI registry per test (tests/support/registry.py).

tests/conftest.py imports them, so every test can ask for them. They skip the test when `docker-registry`
(or `htpasswd`) is missing, unless TOOLCHAIN_REQUIRE_REGISTRY=1 (or TOOLCHAIN_REQUIRE_CONTAINERS is set, as
tests/run.sh does as root after ci_setup.sh installed them): then they fail.
Starting one takes well under a second; each test gets its own, with its own storage under tmp_path.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from .registry import Registry, registry_available, run_registry

AUTH_USER = "toolchain"
AUTH_PASSWORD = "s3cret-for-tests"


def require(available: tuple[bool, str], what: str, variable: str) -> None:
    """Skip the test when a server's program is missing (`available`: (usable, reason)), or fail it when the
    run requires it: `variable`=1, or TOOLCHAIN_REQUIRE_CONTAINERS set (tests/run.sh as root)."""
    ok, reason = available
    if ok:
        return
    if os.environ.get(variable) == "1" or os.environ.get("TOOLCHAIN_REQUIRE_CONTAINERS"):
        pytest.fail(f"no {what}: {reason} (required in this run)", pytrace=False)
    pytest.skip(reason)


def _require(auth: bool) -> None:
    require(registry_available(auth=auth), "registry", "TOOLCHAIN_REQUIRE_REGISTRY")


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[Registry]:
    """A registry without auth on 127.0.0.1:<free port> (plain HTTP): `.address`, `.url`, `.storage`,
    `.kill()`."""
    _require(auth=False)
    with run_registry(tmp_path / "registry") as reg:
        yield reg


@pytest.fixture
def auth_registry(tmp_path: Path) -> Iterator[Registry]:
    """A registry with htpasswd auth: `.username`, `.password`, `.auth` (for requests), and 401 without them."""
    _require(auth=True)
    with run_registry(tmp_path / "auth-registry", username=AUTH_USER, password=AUTH_PASSWORD) as reg:
        yield reg
