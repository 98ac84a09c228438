"""The SDK and the CLI ride out a restart of the API: `Client.wait` and `tunehub status --watch`
keep following a tuning while the API process is down and come back with its end; a server
that stays away is a clear error once the retry time is spent."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.api.api_process import ApiProcess, api_env, uvicorn_factory
from tests.cli_process import tunehub_argv
from tests.service.redis_server import RedisServer, redis_server_binary
from tests.signatures import AXPY
from tunehub.client.errors import ServerUnreachable
from tunehub.client.sdk import Client
from tunehub.schemas.api import TuningView
from tunehub.schemas.record import TuningStatus
from tunehub.schemas.signature import TaskSignature
from tunehub.schemas.target import Target
from tunehub.server.db.session import make_engine, migrate, session_factory, session_scope
from tunehub.server.db.tunings import move_tunings
from tunehub.server.standalone import free_port
from tunehub.server.tuner import SearchPlan, register_tuning, validate_task

# Far longer than a restart on a loaded machine: the waits below must never give up.
RETRY_S = 120.0
DOWN_S = 2.0


class Restartable:
    """An API process on a fixed port, over a database with one queued tuning (nobody runs
    it: the test ends it by hand, as a tuner would, while the API is down)."""

    def __init__(self, tmp_path: Path, database_url: str, redis_url: str) -> None:
        migrate(database_url)
        self.database_url = database_url
        self.tuning_id = self._register()
        port = free_port()
        env = api_env(tmp_path / "home", database_url, redis_url)
        self.api = ApiProcess(uvicorn_factory(port), env, tmp_path / "api.log", port)

    def _register(self) -> int:
        engine = make_engine(self.database_url)
        try:
            with session_scope(session_factory(engine)) as s:
                return register_tuning(
                    s,
                    validate_task(TaskSignature.model_validate(AXPY), {}),
                    SearchPlan("random", 4),
                    target=Target.parse("cpu:x86_64"),
                )
        finally:
            engine.dispose()

    def restart_and_finish(self) -> None:
        """Stop the API, end the tuning while it is down, and start it again."""
        self.api.stop()
        engine = make_engine(self.database_url)
        try:
            with session_scope(session_factory(engine)) as s:
                move_tunings(s, [self.tuning_id], TuningStatus.DONE)
        finally:
            engine.dispose()
        time.sleep(DOWN_S)
        self.api.start()


@pytest.fixture
def redis_url(tmp_path: Path) -> Iterator[str]:
    if redis_server_binary() is None:
        pytest.skip("redis-server is not on PATH")
    with RedisServer(tmp_path / "redis") as server:
        yield server.url


@pytest.fixture
def restartable(tmp_path: Path, database_url: str, redis_url: str) -> Restartable:
    return Restartable(tmp_path, database_url, redis_url)


def test_client_wait_outlives_an_api_restart(restartable: Restartable) -> None:
    seen: list[TuningView] = []
    with restartable.api as api, Client(api.url, retry_s=RETRY_S) as client:
        waiting = threading.Thread(
            target=lambda: seen.append(client.wait(restartable.tuning_id, timeout_s=300))
        )
        waiting.start()
        time.sleep(1.0)  # polling a queued tuning
        restartable.restart_and_finish()
        waiting.join(timeout=300)
    assert not waiting.is_alive()
    assert seen and seen[0].status == TuningStatus.DONE


def test_status_watch_outlives_an_api_restart(restartable: Restartable, tmp_path: Path) -> None:
    with restartable.api as api:
        env = {**restartable.api.env, "TUNEHUB_RETRY_S": str(RETRY_S)}
        argv = tunehub_argv("status", restartable.tuning_id, "--watch", "--server", api.url)
        watch = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        time.sleep(2.0)
        restartable.restart_and_finish()
        out, err = watch.communicate(timeout=300)
    assert watch.returncode == 0, err.decode()
    assert "done" in out.decode()


def test_giving_up_says_how_long_it_tried() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    gave_up = pytest.raises(ServerUnreachable, match=r"gave up after \d+ tries over 1 s")
    with Client(url, retry_s=1.0) as client, gave_up:
        client.get(1)
    env = {**os.environ, "TUNEHUB_RETRY_S": "1"}
    argv = tunehub_argv("status", "1", "--server", url)
    down = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert down.returncode == 1
    assert down.stderr.startswith("error: cannot reach the tunehub server")
    assert "gave up after" in down.stderr
    assert len(down.stderr.strip().splitlines()) == 1
