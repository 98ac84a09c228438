"""Fixtures of the CLI tests that talk to a server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.service.redis_server import redis_server_binary
from tunehub.server.standalone import Stack, StackConfig


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """A running API with no tuner or worker on a database of its own: its URL and its
    database's (a tuning submitted there stays queued)."""
    if redis_server_binary() is None:
        pytest.skip("redis-server is not on PATH")
    url = f"sqlite:///{tmp_path / 'server.db'}"
    config = StackConfig(home=tmp_path / "home", database_url=url, workers=0, tuner=False)
    with Stack(config) as stack:
        yield stack.url, url
