"""The `tunehub worker` daemon: detect the device, register, heartbeat, serve its queues.

One daemon is one process and runs one job at a time (an RQ `SimpleWorker`: jobs run in the
daemon itself, so the measuring child, the parsed programs and the reference outputs it keeps
survive from one candidate to the next). Parallel builds come from running several daemons, on
one machine or many: they cooperate through the Redis URL alone and never see the database;
results travel back through Redis to the tuner, which stores them.

Registration is a hash per worker (`queues.worker_key`) that a heartbeat thread rewrites every
HEARTBEAT_S seconds with a WORKER_TTL_S expiry: a daemon that dies, however it dies, vanishes
from `list_workers` within WORKER_TTL_S, and that is how the tuner learns a job it was waiting
for is lost (the job's RQ `worker_name` is no longer registered).

Measurements on one machine take turns under a Redis lock (`queues.measure_lock_key`) that is
renewed while held, so a daemon killed mid-measurement frees the machine within LOCK_TTL_S.
Builds do not take it: they may run in parallel with each other (and with a measurement).
A measuring slot (`worker.slots`: `tunehub worker --gpus`) is a daemon that sees one device
alone and serves that device's kind: its lock is the device's, so each GPU measures in
parallel with the others while two measurements never share a GPU.

A Redis outage (a restart, a network cut) costs no daemon: the heartbeat keeps trying, the RQ
loop is started again once Redis answers (`_serve`), and each logs one line when Redis goes
and one when it is back (`outage.Outage`). A job in progress during the outage finishes; its
result may be lost with a restarted Redis, and the tuner sends the candidate again. A name is
free again WORKER_TTL_S after its daemon died (`claim_name`), RQ's own stale entry included.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from types import FrameType
from typing import Any

from redis import Redis
from redis.exceptions import LockError, RedisError
from redis.typing import EncodableT, FieldT
from rq import SimpleWorker, get_current_job

from tunehub.schemas.target import Target
from tunehub.worker import device, logs
from tunehub.worker.backend import local_targets, worker_backend
from tunehub.worker.jobs import CandidateRequest, CandidateResult, measure_candidate
from tunehub.worker.outage import BACKOFF_MAX_S, Outage
from tunehub.worker.queues import (
    WORKERS_KEY,
    measure_lock_key,
    parse_queue,
    worker_key,
    worker_queues,
)
from tunehub.worker.slots import SLOT_ENV, plan_slots, run_slots

# A worker silent for WORKER_TTL_S is dead: short, so the tuner re-sends a lost job within
# seconds; a heartbeat every HEARTBEAT_S leaves room for two missed beats before that.
WORKER_TTL_S = 6
HEARTBEAT_S = 2
# The measure lock expires this long after its holder stops renewing it.
LOCK_TTL_S = 6
DEFAULT_REDIS_URL = "redis://localhost:6379/0"

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


def measure(request: CandidateRequest, built: CandidateResult) -> CandidateResult:
    """RQ job: `measure_candidate` while holding this machine's measure lock. Waiting for the
    lock is bounded by the job's RQ timeout."""
    job = get_current_job()
    if job is None:
        raise RuntimeError("worker.daemon.measure runs as an RQ job (see measure_candidate)")
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


class Registration:
    """This daemon's entry in the worker registry, kept alive by a heartbeat thread."""

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


def run_worker(
    redis_url: str,
    queues: Sequence[str] | None = None,
    threads: int | None = None,
    name: str | None = None,
    burst: bool = False,
) -> None:
    """Serve build and measure queues until SIGTERM/SIGINT (the job in progress finishes
    first; a second signal stops at once) or, with `burst`, until they are empty.

    `queues` defaults to this machine's targets (`backend.local_targets`); `threads` is what the
    worker offers for measurements (default: its cores), and the tuner measures with the
    smallest offer among a target's workers.
    """
    if threads is not None and threads < 1:
        raise ValueError(f"threads must be at least 1, not {threads}")
    own = slot()
    if own is not None and queues:
        raise ValueError("a measuring slot serves its own device's queues: leave queues out")
    here = local_targets() if own is None else worker_backend(own.partition(":")[0]).local_targets()
    names = list(queues) if queues else worker_queues(here)
    targets = _targets_of(names)
    threads = threads or device.cpu_cores()
    name = name or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    redis = Redis.from_url(redis_url)
    now = str(time.time())
    registration = Registration(
        redis,
        {
            "name": name,
            "host": socket.gethostname(),
            "machine": machine_id(),
            "slot": own or "",
            "pid": str(os.getpid()),
            "queues": json.dumps(names),
            "targets": json.dumps([str(t) for t in targets]),
            "threads": str(threads),
            "fingerprints": json.dumps({str(t): device.fingerprint(t, threads) for t in targets}),
            "started_at": now,
        },
    )
    # RQ installs its own handlers when `work` starts; a signal before that still unregisters.
    _exit_on_signals()
    outage = Outage("Redis", log, (RedisError,))
    try:
        outage.call(lambda: claim_name(redis, name))
        outage.call(registration.start)
        log.info("worker %s serving %s", name, ", ".join(names))
        _serve(redis, names, name, burst, outage)
    finally:
        registration.stop()
        redis.close()


def _serve(redis: Redis, queues: Sequence[str], name: str, burst: bool, outage: Outage) -> None:
    """RQ's work loop, started again after Redis failed under it: RQ rides out a refused
    connection only while it waits for a job, and quits on one anywhere else (after a job,
    in its maintenance), so each RQ worker here lives until a stop request, or an error."""
    level = logging.getLevelName(log.getEffectiveLevel())
    while True:
        # The RQ worker has our name: a job's `worker_name` is then a key of the registry.
        rq_worker = SimpleWorker(queues, name=name, connection=redis)
        rq_worker.max_connection_wait_time = BACKOFF_MAX_S
        try:
            # RQ's entry of this name is stale: ours, from before an outage, or a dead
            # predecessor's (`claim_name` waited for it to stop beating). RQ would refuse it
            # for minutes ("There exists an active worker named ...").
            redis.delete(rq_worker.key)
            rq_worker.work(burst=burst, logging_level=level)
        except RedisError as exc:
            _exit_on_signals()  # RQ's handlers would ask a worker that is gone
            outage.failed(exc)
        else:
            _exit_on_signals()
            if burst:
                return
            if rq_worker._shutdown_requested_date is None:
                # RQ quit on an error it logged: start again, but not in a tight loop.
                log.warning("RQ's work loop ended; starting it again")
                time.sleep(BACKOFF_MAX_S)
        if rq_worker._shutdown_requested_date is not None:  # SIGTERM/SIGINT: RQ's warm stop
            return
        outage.call(redis.ping)


def _exit_on_signals() -> None:
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _exit_on_signal)


def _exit_on_signal(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(0)


def main(argv: Sequence[str] | None = None) -> None:
    """`python -m tunehub.worker.daemon`: the daemon without the service stack (the GPU machine
    runs it from a plain checkout); `tunehub worker` is the same with the same options."""
    parser = argparse.ArgumentParser(
        prog="tunehub worker",
        description="Build and measure candidates for the tuners: serve this machine's queues.",
    )
    parser.add_argument(
        "--redis",
        default=os.environ.get("TUNEHUB_REDIS_URL", DEFAULT_REDIS_URL),
        help=f"Redis URL (default: TUNEHUB_REDIS_URL, else {DEFAULT_REDIS_URL})",
    )
    parser.add_argument("--queues", nargs="+", help="queue names (default: this machine's)")
    parser.add_argument("--threads", type=int, help="threads offered for measurements")
    parser.add_argument("--name", help="worker name (default: host-pid-random)")
    parser.add_argument("--burst", action="store_true", help="quit when the queues are empty")
    parser.add_argument("--gpus", help=GPUS_HELP)
    args = parser.parse_args(argv)
    try:
        logs.configure()
        code = serve(args.redis, args.queues, args.threads, args.name, args.burst, args.gpus)
    except ValueError as exc:
        parser.error(str(exc))
    raise SystemExit(code)


GPUS_HELP = (
    "measure on these GPUs in parallel, a daemon per GPU: `all`, or ids like 0,1 "
    "(default: one daemon, measurements take turns on the machine)"
)


def serve(
    redis_url: str,
    queues: Sequence[str] | None,
    threads: int | None,
    name: str | None,
    burst: bool,
    gpus: str | None,
) -> int:
    """`tunehub worker`: one daemon (`run_worker`), or with `gpus` a measuring slot per GPU
    (`slots.run_slots`); its exit status. ValueError for options that do not fit."""
    if gpus is None:
        run_worker(redis_url, queues, threads, name, burst)
        return 0
    if queues:
        raise ValueError("--gpus: each GPU's daemon serves its own queues: leave --queues out")
    if threads is not None and threads < 1:
        raise ValueError(f"threads must be at least 1, not {threads}")
    planned = plan_slots(gpus)
    log.info("measuring slots: %s", ", ".join(slot.label for slot in planned))
    return run_slots(redis_url, planned, threads=threads, name=name, burst=burst)


def _targets_of(names: Sequence[str]) -> list[Target]:
    """The targets of build/measure queue names; ValueError for any other name (a worker has
    no database credentials, so it cannot run tunings)."""
    targets: list[Target] = []
    for name in names:
        parsed = parse_queue(name)
        if parsed is None:
            raise ValueError(f"{name!r} is not a build or measure queue (tunehub:build:<target>)")
        if parsed[1] not in targets:
            targets.append(parsed[1])
    return targets


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


if __name__ == "__main__":
    main()
