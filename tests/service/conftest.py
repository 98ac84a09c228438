"""Fixtures of the service tests: private Redis servers and real worker daemons."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from redis import Redis

from tests.service.redis_server import RedisServer, redis_server_binary
from tests.service.workers import Fleet


def _server(directory: Path) -> Iterator[str]:
    if redis_server_binary() is None:
        pytest.skip("redis-server is not on PATH")
    with RedisServer(directory) as server:
        yield server.url


@pytest.fixture
def redis_url(tmp_path: Path) -> Iterator[str]:
    """The URL of an empty Redis of this test's own."""
    yield from _server(tmp_path / "redis")


@pytest.fixture(scope="module")
def module_redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Redis shared by one module's tests (with `module_fleet`'s workers)."""
    yield from _server(tmp_path_factory.mktemp("redis"))


@pytest.fixture
def redis(redis_url: str) -> Iterator[Redis]:
    client = Redis.from_url(redis_url)
    yield client
    client.close()


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    """Worker daemons of this test: `fleet.start(redis_url, n)`; all stopped afterwards."""
    workers = Fleet(tmp_path / "workers")
    yield workers
    workers.stop_all()


@pytest.fixture(scope="module")
def module_fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    workers = Fleet(tmp_path_factory.mktemp("workers"))
    yield workers
    workers.stop_all()
