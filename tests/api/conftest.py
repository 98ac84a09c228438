"""Fixtures of the API tests: the real app on a migrated database (SQLite, and PostgreSQL when
`TUNEHUB_TEST_POSTGRES_URL` is set) with a private redis-server of its own."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.service.redis_server import RedisServer, redis_server_binary
from tests.service.workers import Fleet
from tunehub.server.app import create_app
from tunehub.server.settings import Settings

# TestClient's default client address is not an IP address; an open server answers only
# loopback clients.
LOCAL_CLIENT = ("127.0.0.1", 50000)

MakeClient = Callable[..., TestClient]


@pytest.fixture
def redis_url(tmp_path: Path) -> Iterator[str]:
    if redis_server_binary() is None:
        pytest.skip("redis-server is not on PATH")
    with RedisServer(tmp_path / "redis") as server:
        yield server.url


@pytest.fixture
def settings(tmp_path: Path, database_url: str, redis_url: str) -> Settings:
    return Settings(home=tmp_path / "home", database_url=database_url, redis_url=redis_url)


@pytest.fixture
def make_client(settings: Settings) -> Iterator[MakeClient]:
    """`make_client(**setting_overrides, client=(host, port))`: a started app (lifespan run,
    database migrated) and a client on it; all closed when the test ends."""
    clients: list[TestClient] = []

    def make(client: tuple[str, int] = LOCAL_CLIENT, **overrides: Any) -> TestClient:
        app = create_app(settings.model_copy(update=overrides))
        test_client = TestClient(app, client=client, raise_server_exceptions=False)
        test_client.__enter__()
        clients.append(test_client)
        return test_client

    yield make
    for test_client in clients:
        test_client.__exit__(None, None, None)


@pytest.fixture
def client(make_client: MakeClient) -> TestClient:
    """An open (token-less) server, as the embedded default runs."""
    return make_client()


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    workers = Fleet(tmp_path / "workers")
    yield workers
    workers.stop_all()
