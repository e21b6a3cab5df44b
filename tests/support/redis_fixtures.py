"""pytest fixtures `redis_store` and `auth_redis_store`: a real Redis per test (tests/support/redis_server.py),
the store of a shared compiler cache. Import them into a test module. They skip the test when `redis-server`
is missing, unless TOOLCHAIN_REQUIRE_REDIS=1 (or TOOLCHAIN_REQUIRE_CONTAINERS is set, as tests/run.sh does as
root after ci_setup.sh installed it): then they fail. Starting one takes a few milliseconds.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from .redis_server import RedisServer, redis_available, run_redis
from .registry_fixtures import require

STORE_PASSWORD = "redis-pw-for-tests-7c1d"


def _require() -> None:
    require(redis_available(), "redis", "TOOLCHAIN_REQUIRE_REDIS")


@pytest.fixture
def redis_store(tmp_path: Path) -> Iterator[RedisServer]:
    """A Redis without a password on 127.0.0.1:<free port>: `.url`, `.keys()`, `.stop()`."""
    _require()
    with run_redis(tmp_path / "redis") as store:
        yield store


@pytest.fixture
def auth_redis_store(tmp_path: Path) -> Iterator[RedisServer]:
    """A Redis that wants STORE_PASSWORD (`.url` carries it: redis://:PASSWORD@127.0.0.1:PORT)."""
    _require()
    with run_redis(tmp_path / "auth-redis", password=STORE_PASSWORD) as store:
        yield store
