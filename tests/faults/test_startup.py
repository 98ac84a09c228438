"""Daemons started all at once on a fresh database migrate it once between them, and a daemon
killed and started again under its name is back within seconds."""

from __future__ import annotations

import time

from redis import Redis

from tests.faults.conftest import Redises, Service, wait_for
from tunehub.worker.registry import WORKER_TTL_S, list_workers


def test_two_tuners_and_the_api_migrate_a_fresh_database_at_once(
    tmp_path, redis_server: Redises, database_url: str
) -> None:
    service = Service(tmp_path, redis_server, database_url)  # not migrated: they do it
    try:
        daemons = [service.tuner("tuner-1"), service.tuner("tuner-2"), service.api()]
        service.wait_api()
        service.wait_registered("tuner-1", "tuner-2")
        time.sleep(1)
        for daemon in daemons:
            assert daemon.alive(), f"{daemon.name} died:\n{daemon.text()[-3000:]}"
            assert "locked" not in daemon.text()
    finally:
        service.stop()


def test_a_killed_worker_comes_back_under_its_name_within_seconds(service: Service) -> None:
    worker = service.worker("named-worker")
    service.wait_registered("named-worker")
    worker.kill()

    started = time.monotonic()
    again = service.worker("named-worker")
    with Redis.from_url(service.redis.url) as redis:

        def registered_again() -> bool:
            return any(
                w.name == "named-worker" and w.pid == again.proc.pid for w in list_workers(redis)
            )

        wait_for(registered_again, "the worker to register again")
    assert time.monotonic() - started < WORKER_TTL_S + 20
    assert again.alive()
    assert "There exists an active worker" not in again.text()


def test_a_second_daemon_under_a_living_ones_name_is_refused(service: Service) -> None:
    first = service.worker("taken")
    service.wait_registered("taken")
    second = service.worker("taken")
    wait_for(lambda: not second.alive(), "the second one to give up", timeout_s=60)
    assert "pick another --name" in second.text()
    assert first.alive()
