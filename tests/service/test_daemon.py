"""The worker daemon as a real process: registration, heartbeats, death, clean stop."""

from __future__ import annotations

import os
import signal
import socket
import time
from collections.abc import Callable

import pytest
from redis import Redis

from tests.service.workers import Fleet
from tunehub.schemas.target import Target
from tunehub.worker import device
from tunehub.worker.daemon import run_worker
from tunehub.worker.measure_lock import measure_lock
from tunehub.worker.queues import WORKERS_KEY, measure_lock_key, worker_key, worker_queues
from tunehub.worker.registry import HEARTBEAT_S, WORKER_TTL_S, list_workers, machine_id

TARGET = Target(kind="cpu", isa=device.cpu_isa())


def wait_for(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def test_a_worker_registers_its_device_and_heartbeats(
    redis_url: str, redis: Redis, fleet: Fleet
) -> None:
    (process,) = fleet.start(redis_url)
    (info,) = list_workers(redis)
    assert info.name == process.name and info.pid == process.proc.pid
    assert info.host == socket.gethostname() and info.machine == machine_id()
    assert info.queues == worker_queues([TARGET])
    assert info.targets == [str(TARGET)]
    assert info.threads == device.cpu_cores()
    assert info.fingerprints[str(TARGET)]["cpu_isa"] == TARGET.isa
    assert info.started_at <= info.last_heartbeat
    assert 0 < redis.ttl(worker_key(info.name)) <= WORKER_TTL_S

    def beat() -> bool:
        (now,) = list_workers(redis)
        return now.last_heartbeat > info.last_heartbeat

    wait_for(beat, 5 * HEARTBEAT_S, "a heartbeat")


def test_a_killed_worker_disappears_when_its_registration_expires(
    redis_url: str, redis: Redis, fleet: Fleet
) -> None:
    killed, survivor = fleet.start(redis_url, 2)
    assert fleet.kill(killed) == -signal.SIGKILL
    wait_for(
        lambda: [w.name for w in list_workers(redis)] == [survivor.name],
        WORKER_TTL_S + 5,
        "the killed worker to expire",
    )
    assert redis.smembers(WORKERS_KEY) == {survivor.name.encode()}


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_a_worker_cleanly(
    redis_url: str, redis: Redis, fleet: Fleet, sig: signal.Signals
) -> None:
    (process,) = fleet.start(redis_url)
    assert fleet.kill(process, sig) == 0, process.tail()
    assert list_workers(redis) == []
    assert not redis.exists(worker_key(process.name))


def test_a_worker_serves_only_build_and_measure_queues(redis_url: str) -> None:
    with pytest.raises(ValueError, match="not a build or measure queue"):
        run_worker(redis_url, queues=["tunehub:tuner"])


def test_the_measure_lock_is_exclusive_and_released(redis: Redis) -> None:
    machine = f"test-{os.getpid()}"
    with measure_lock(redis, machine):
        assert redis.exists(measure_lock_key(machine))
        other = redis.lock(measure_lock_key(machine), timeout=5)
        assert not other.acquire(blocking=False)
    assert not redis.exists(measure_lock_key(machine))
