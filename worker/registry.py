"""The worker registry in Redis: which daemons are alive, and the heartbeat that says so.

Registration is a hash per worker (`queues.worker_key`) that a heartbeat thread rewrites every
HEARTBEAT_S seconds with a WORKER_TTL_S expiry: a daemon that dies, however it dies, vanishes
from `list_workers` within WORKER_TTL_S, and that is how the tuner learns a job it was waiting
for is lost (the job's RQ `worker_name` is no longer registered). Tuner daemons register the
same way, in a registry of their own (`queues.TUNERS_KEY`).

Kept apart from the daemon (`worker.daemon`), as RQ keeps its worker registration apart from
its worker: the API and the tuner read the registry without loading the daemon's loop.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any

from redis import Redis
from redis.exceptions import RedisError
from redis.typing import EncodableT, FieldT
from rq import SimpleWorker
from rq.worker_registration import REDIS_WORKER_KEYS, WORKERS_BY_QUEUE_KEY

from tunehub.worker.outage import Outage
from tunehub.worker.queues import PREFIX, WORKERS_KEY, worker_key

# A worker silent for WORKER_TTL_S is dead: short, so the tuner re-sends a lost job within
# seconds; a heartbeat every HEARTBEAT_S leaves room for two missed beats before that.
WORKER_TTL_S = 6
HEARTBEAT_S = 2

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WorkerInfo:
    """A registered, living worker, as `GET /v1/workers` reports it."""

    name: str
    host: str
    machine: str  # see machine_id: workers with equal machines share the measure lock
    slot: str | None  # the device it measures on alone (`cuda:1`); None: the whole machine
    pid: int
    queues: list[str]
    targets: list[str]
    threads: int  # the OpenMP threads it offers for measurements
    fingerprints: dict[str, dict[str, Any]]  # per target, device.fingerprint
    started_at: datetime
    last_heartbeat: datetime


@cache
def machine_id() -> str:
    """The running kernel's boot id: one per machine, the same in all its containers (whose
    host names differ), so their measurements take turns. The host name where there is none."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return socket.gethostname()


def list_workers(redis: Redis) -> list[WorkerInfo]:
    """The living workers, by name. Names whose registration expired are pruned."""
    names = sorted(_text(n) for n in redis.smembers(WORKERS_KEY))
    with redis.pipeline(transaction=False) as pipe:
        for name in names:
            pipe.hgetall(worker_key(name))
        hashes = pipe.execute()
    dead = [name for name, fields in zip(names, hashes, strict=True) if not fields]
    if dead:
        redis.srem(WORKERS_KEY, *dead)
    return [_info(fields) for fields in hashes if fields]


class Registration:
    """A daemon's entry in the worker registry, kept alive by a heartbeat thread."""

    def __init__(
        self,
        redis: Redis,
        fields: Mapping[str, str],
        *,
        registry: str = WORKERS_KEY,
        key_of: Callable[[str], str] = worker_key,
    ) -> None:
        self.redis = redis
        self.name = fields["name"]
        self.fields: dict[FieldT, EncodableT] = {k: v for k, v in fields.items()}
        # The registry's set of names and each name's hash: the workers', or the tuners'.
        self.registry, self.key = registry, key_of(self.name)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="heartbeat", daemon=True)
        self._outage = Outage(f"Redis (heartbeat of {self.name})", log, (RedisError,), self._stop)

    def start(self) -> None:
        self.write()  # before the first job, so the tuner never sees a job of a stranger
        self._thread.start()

    def write(self) -> None:
        """Rewrite the whole hash (not just the timestamp): one that expired during a stall
        comes back complete."""
        fields = {**self.fields, "last_heartbeat": str(time.time())}
        with self.redis.pipeline() as pipe:
            pipe.hset(self.key, mapping=fields)
            pipe.expire(self.key, WORKER_TTL_S)
            pipe.sadd(self.registry, self.name)
            pipe.execute()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.ident is not None:  # a signal may come before it started
            self._thread.join()
        try:
            with self.redis.pipeline() as pipe:
                pipe.delete(self.key)
                pipe.srem(self.registry, self.name)
                pipe.execute()
        except RedisError as exc:  # gone anyway once its TTL runs out
            log.warning("could not unregister: %s", exc)

    def _beat(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            try:
                self.write()
            except RedisError as exc:  # Redis restarting: keep trying, the TTL decides
                self._outage.failed(exc)
            else:
                self._outage.ok()


def claim_name(redis: Redis, name: str, key_of: Callable[[str], str] = worker_key) -> None:
    """Wait until no living daemon is registered under `name` (`key_of(name)`): a dead one's
    entry expires within WORKER_TTL_S of its last heartbeat, so a daemon restarted under its
    name after a crash starts within seconds. ValueError if the name stays taken: a living
    daemon holds it."""
    deadline = time.monotonic() + WORKER_TTL_S + HEARTBEAT_S
    while redis.exists(key_of(name)):
        if time.monotonic() > deadline:
            raise ValueError(f"a living daemon is registered as {name!r}: pick another --name")
        time.sleep(0.2)


def prune_rq_workers(redis: Redis) -> list[str]:
    """Remove from RQ's registry (`rq:workers`, its per-queue sets, its worker hashes) the
    workers of tunehub's queues that died: RQ unregisters a worker only when it stops, so a
    SIGKILLed one stays listed (in the sets for good). A worker whose registration here has
    expired (within WORKER_TTL_S) is dead; one whose RQ hash is gone too. The names removed."""
    living = {w.name for w in list_workers(redis)}
    keys = sorted(_text(k) for k in redis.smembers(REDIS_WORKER_KEYS))
    with redis.pipeline(transaction=False) as pipe:
        for key in keys:
            pipe.hget(key, "queues")
        queue_lists = pipe.execute()
    dead: dict[str, list[str]] = {}
    for key, queues in zip(keys, queue_lists, strict=True):
        names = [q for q in _text(queues or b"").split(",") if q]
        ours = not names or all(q.startswith(f"{PREFIX}:") for q in names)
        if ours and key.removeprefix(SimpleWorker.redis_worker_namespace_prefix) not in living:
            dead[key] = names
    if dead:
        with redis.pipeline() as pipe:
            for key, names in dead.items():
                pipe.srem(REDIS_WORKER_KEYS, key)
                for queue in names:
                    pipe.srem(WORKERS_BY_QUEUE_KEY % queue, key)
                pipe.delete(key)
            pipe.execute()
    return [key.removeprefix(SimpleWorker.redis_worker_namespace_prefix) for key in dead]


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _info(raw: dict[bytes, bytes]) -> WorkerInfo:
    fields = {_text(k): _text(v) for k, v in raw.items()}
    return WorkerInfo(
        name=fields["name"],
        host=fields["host"],
        machine=fields["machine"],
        slot=fields.get("slot") or None,
        pid=int(fields["pid"]),
        queues=json.loads(fields["queues"]),
        targets=json.loads(fields["targets"]),
        threads=int(fields["threads"]),
        fingerprints=json.loads(fields["fingerprints"]),
        started_at=datetime.fromtimestamp(float(fields["started_at"]), UTC),
        last_heartbeat=datetime.fromtimestamp(float(fields["last_heartbeat"]), UTC),
    )
