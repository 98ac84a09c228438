"""The service as it runs in production, on this machine: a private redis-server, the API
under uvicorn, the tuner daemon (`server.standalone.Stack`) and two worker daemons
(`tests.service.workers.Fleet`, so a test can kill one), all real processes, shared by every
end-to-end test."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.service.redis_server import RedisServer, redis_server_binary
from tests.service.workers import Fleet
from tunehub.client.sdk import Client
from tunehub.server.standalone import Stack, StackConfig


@dataclass(frozen=True)
class Service:
    stack: Stack
    fleet: Fleet
    redis_url: str
    database_url: str

    @property
    def url(self) -> str:
        return self.stack.url


@pytest.fixture(scope="package")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    if redis_server_binary() is None:
        pytest.skip("redis-server is not on PATH")
    home = tmp_path_factory.mktemp("e2e")
    database_url = f"sqlite:///{home / 'tunehub.db'}"
    with RedisServer(home / "redis") as redis:
        config = StackConfig(home=home, database_url=database_url, redis_url=redis.url, workers=0)
        fleet = Fleet(home / "workers")
        with Stack(config) as stack:
            try:
                fleet.start(redis.url, 2)
                yield Service(stack, fleet, redis.url, database_url)
            finally:
                fleet.stop_all()


@pytest.fixture
def client(service: Service) -> Iterator[Client]:
    with Client(service.url) as hub:
        yield hub


def example(name: str) -> Path:
    return Path(__file__).resolve().parents[2] / "examples" / f"{name}.json"
