"""Measurements on one machine take turns: the measure lock, and the RQ job that measures
a built candidate under it.

The lock (`queues.measure_lock_key`) is a Redis lock renewed while held, so a daemon killed
mid-measurement frees the machine within LOCK_TTL_S. Builds do not take it: they may run in
parallel with each other (and with a measurement). A measuring slot (`worker.slots`: `tunehub
worker --gpus`) is a daemon that sees one device alone: its lock is the device's, so each GPU
measures in parallel with the others while two measurements never share a GPU.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from redis import Redis
from redis.exceptions import LockError, RedisError
from rq import get_current_job

from tunehub.worker.jobs import CandidateRequest, CandidateResult, measure_candidate
from tunehub.worker.outage import Outage
from tunehub.worker.queues import measure_lock_key
from tunehub.worker.registry import machine_id
from tunehub.worker.slots import SLOT_ENV

# The measure lock expires this long after its holder stops renewing it.
LOCK_TTL_S = 6

log = logging.getLogger(__name__)


def measure(request: CandidateRequest, built: CandidateResult) -> CandidateResult:
    """RQ job: `measure_candidate` while holding this machine's measure lock. Waiting for the
    lock is bounded by the job's RQ timeout."""
    job = get_current_job()
    if job is None:
        raise RuntimeError("worker.measure_lock.measure runs as an RQ job (see measure_candidate)")
    with measure_lock(job.connection, measuring_unit()):
        return measure_candidate(request, built)


def slot() -> str | None:
    """The measuring slot this daemon is (`kind:device`), if it is one."""
    return os.environ.get(SLOT_ENV) or None


def measuring_unit() -> str:
    """What a measurement here takes turns on: the machine, or a slot's own device."""
    own = slot()
    return machine_id() if own is None else f"{machine_id()}/{own}"


@contextmanager
def measure_lock(redis: Redis, machine: str, ttl_s: float = LOCK_TTL_S) -> Iterator[None]:
    """Hold `machine`'s measure lock for the block, renewing it from a thread every third of
    `ttl_s`: a holder that dies stops renewing, and the lock expires `ttl_s` later."""
    lock = redis.lock(measure_lock_key(machine), timeout=ttl_s, thread_local=False)
    lock.acquire(blocking=True)
    done = threading.Event()

    outage = Outage("Redis (the measure lock)", log, (LockError, RedisError), done)

    def renew() -> None:
        while not done.wait(ttl_s / 3):
            try:
                lock.reacquire()
            except (LockError, RedisError) as exc:
                outage.failed(exc)
            else:
                outage.ok()

    renewer = threading.Thread(target=renew, name="measure-lock", daemon=True)
    renewer.start()
    try:
        yield
    finally:
        done.set()
        renewer.join()
        try:
            lock.release()
        except LockError:  # it expired (a long stall) and may be someone else's by now
            log.warning("the measure lock had expired before the measurement ended")
