"""The tuner as a service: `tunehub tuner` runs the queued tunings of the database.

A tuning never runs inside an HTTP request: the API commits a queued Tuning row, and that row
is the queue. A tuner daemon (`run_tuner_daemon`), the one service process besides the API
that holds database credentials, claims the oldest queued unit under a lease (`lease`): a
tuning, or a tuning group's unfinished members, which share one budget (`Tuner.run_many`, as
`tunehub tune A.json B.json` does). It runs the unit in a forked child, so a tuning that
crashes takes only itself down, with the same `Tuner` as `tunehub tune` and an `RQExecutor`:
candidates go to the worker daemons through Redis and their results come back to be stored
here.

What each failure costs:
- Redis restarts: the daemon and the tuning wait for it (one log line each way); the batch in
  flight goes on, the jobs Redis lost are sent again (`RQExecutor`).
- the database goes away or refuses writes (its disk full): the daemon waits for it; the
  tuning in progress stops without failing and is marked stalled with the reason
  (`server.stalls`: the API shows it) while the daemon's own calls keep failing; its lease
  runs out, and it resumes (from its stored records) once the database is back, which
  clears the mark.
- the tuner dies (SIGKILL, a lost machine): its child dies with it, its leases expire within
  `lease.LEASE_TTL_S`, and another tuner (or this one, restarted) resumes its tunings.
- the tuner is stopped (SIGTERM, Ctrl-C): the child hands its tunings back to the queue at
  once (`lease.Lease.release`) for another tuner to resume; a second signal kills the child.
- the child dies alone (out of memory, a signal): its tunings are marked failed with the
  reason (a candidate that kills its tuner would kill the next one too); submitting again
  resumes them.
- the tuning raises: it is marked failed with the error (`Tuner`), as by `tunehub tune`.
"""

from __future__ import annotations

import argparse
import ctypes
import logging
import multiprocessing
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from multiprocessing.process import BaseProcess
from types import FrameType

from redis import Redis
from redis.exceptions import RedisError
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from tunehub.schemas.record import TuningStatus
from tunehub.schemas.target import Target
from tunehub.server.db.groups import get_group, group_members
from tunehub.server.db.session import make_engine, migrate, session_factory, session_scope
from tunehub.server.db.tunings import get_tuning, move_tunings
from tunehub.server.generations import BestGenerations
from tunehub.server.health import database_fault
from tunehub.server.settings import Settings, get_settings
from tunehub.server.stalls import Stalls
from tunehub.server.tuner.lease import Heartbeat, Lease, LeaseLost, claim_next
from tunehub.server.tuner.reporting import TuningSummary
from tunehub.server.tuner.rq_executor import RQExecutor
from tunehub.server.tuner.tuner import Tuner
from tunehub.worker import device, logs
from tunehub.worker.outage import Outage
from tunehub.worker.queues import DEFAULT_REDIS_URL, TUNERS_KEY, tuner_key
from tunehub.worker.registry import Registration, claim_name, prune_rq_workers

# How often an idle tuner looks for queued tunings; how often the daemon's periodic pass
# prunes dead workers from RQ's registry (`prune_rq_workers`), idle or not.
POLL_S = 0.5
MAINTENANCE_S = 30.0
PR_SET_PDEATHSIG = 1

log = logging.getLogger(__name__)


class HandBack(BaseException):
    """Raised in a tuner's child when the daemon stops: give the tunings back to the queue.
    A BaseException, so that the tuner does not record it as the tuning's failure."""


def run_tuning(tuning_id: int, *, settings: Settings | None = None) -> TuningSummary:
    """Run (or resume) one tuning with the worker daemons, in this process, without a lease.

    Redis and the database are the settings'. Any error, before or during the search, leaves
    the tuning failed with it.
    """
    settings = settings or get_settings()
    with _database(settings) as sessions, _redis(settings.redis_url) as redis:
        return _run_tuning(sessions, redis, tuning_id, None)


def run_group(group_id: int, *, settings: Settings | None = None) -> list[TuningSummary]:
    """Run a tuning group's unfinished tunings on what is left of its one budget (each task
    weighted as submitted), as `run_tuning` does. An error leaves every unfinished member
    failed with it."""
    settings = settings or get_settings()
    with _database(settings) as sessions, _redis(settings.redis_url) as redis:
        return _run_group(sessions, redis, group_id, None)


def living_tuners(redis: Redis) -> list[str]:
    """The names of the tuner daemons whose registration is alive; the names of dead ones are
    pruned."""
    names = sorted(n.decode() if isinstance(n, bytes) else n for n in redis.smembers(TUNERS_KEY))
    living = [name for name in names if redis.exists(tuner_key(name))]
    if dead := set(names) - set(living):
        redis.srem(TUNERS_KEY, *dead)
    return living


def run_tuner_daemon(redis_url: str, *, name: str | None = None, burst: bool = False) -> None:
    """Run queued tunings until SIGTERM/SIGINT (or, with `burst`, until none is queued). The
    database is the settings' (`TUNEHUB_DATABASE_URL`), migrated first."""
    settings = get_settings()
    name = name or f"{socket.gethostname()}-{os.getpid()}-tuner"
    stop = threading.Event()
    children: list[BaseProcess] = []

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        sig = signal.SIGKILL if stop.is_set() else signal.SIGTERM
        stop.set()
        for child in children:
            if child.pid is not None and child.is_alive():
                os.kill(child.pid, sig)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    database = Outage("the database", log, (OperationalError,), stop)
    database.call(lambda: migrate(settings.database_url))
    redis = Redis.from_url(redis_url)
    registry = Outage("Redis", log, (RedisError,), stop)
    registry.call(lambda: claim_name(redis, name, tuner_key))
    registration = Registration(
        redis,
        {"name": name, "host": socket.gethostname(), "pid": str(os.getpid())},
        registry=TUNERS_KEY,
        key_of=tuner_key,
    )
    registry.call(registration.start)
    engine = make_engine(settings.database_url)
    sessions = session_factory(engine)
    stalls = Stalls(redis)
    maintenance = _Maintenance(redis)
    log.info("tuner %s running queued tunings", name)
    try:
        while not stop.is_set():
            maintenance.due()
            try:
                lease = claim_next(sessions, name[:100])
            except OperationalError as exc:
                stalls.refresh()  # still refused: the stalled tunings stay marked
                database.failed(exc)
                continue
            database.ok()
            if lease is None:
                if burst:
                    break
                stop.wait(POLL_S)
                continue
            engine.dispose()  # the child must not share the parent's connections
            child = multiprocessing.get_context("fork").Process(
                target=_child, args=(lease, settings, redis_url), name=str(lease.unit)
            )
            children.append(child)
            child.start()
            log.info("running %s (lease %s, pid %s)", lease.unit, lease.owner, child.pid)
            while child.is_alive():
                child.join(MAINTENANCE_S)
                maintenance.due()
            children.remove(child)
            settle(sessions, lease, child.exitcode, stopping=stop.is_set())
    finally:
        registration.stop()
        redis.close()
        engine.dispose()


class _Maintenance:
    """The daemon's periodic pass, at most once per MAINTENANCE_S: RQ's registry loses the
    workers that died (RQ unregisters only those that stop)."""

    def __init__(self, redis: Redis) -> None:
        self.redis = redis
        self._next = 0.0

    def due(self) -> None:
        if time.monotonic() < self._next:
            return
        self._next = time.monotonic() + MAINTENANCE_S
        try:
            if pruned := prune_rq_workers(self.redis):
                log.info("pruned dead workers from RQ's registry: %s", ", ".join(pruned))
        except RedisError as exc:
            log.warning("could not prune RQ's registry: %s", exc)


def main(argv: Sequence[str] | None = None) -> None:
    """`python -m tunehub.server.tuner.service`: the tuner daemon (`tunehub tuner`)."""
    parser = argparse.ArgumentParser(
        prog="tunehub tuner", description="Run queued tunings (needs the database's settings)."
    )
    parser.add_argument(
        "--redis",
        default=get_settings().redis_url or DEFAULT_REDIS_URL,
        help=f"Redis URL (default: TUNEHUB_REDIS_URL, else {DEFAULT_REDIS_URL})",
    )
    parser.add_argument("--name", help="tuner name (default: host-pid-tuner)")
    parser.add_argument("--burst", action="store_true", help="quit when no tuning is queued")
    args = parser.parse_args(argv)
    try:
        logs.configure()
    except ValueError as exc:
        parser.error(str(exc))
    try:
        run_tuner_daemon(args.redis, name=args.name, burst=args.burst)
    except ValueError as exc:  # the name is taken
        raise SystemExit(f"tunehub tuner: {exc}") from None


def _child(lease: Lease, settings: Settings, redis_url: str) -> None:
    """The forked child that runs one claimed unit under its lease: dies with the daemon,
    hands the unit back when the daemon stops it (SIGTERM), exits 0 unless the tuning
    raised (the tuner has recorded that failure)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the daemon, which decides
    signal.signal(signal.SIGTERM, _hand_back)
    if os.getppid() == 1:  # the daemon died before the line above
        os._exit(0)
    with _database(settings) as sessions, _redis(redis_url) as redis:
        try:
            with Heartbeat(sessions, lease):
                if lease.unit.group_id is None:
                    _run_tuning(sessions, redis, lease.unit.tuning_ids[0], lease)
                else:
                    _run_group(sessions, redis, lease.unit.group_id, lease)
        except HandBack:
            with session_scope(sessions) as s:
                lease.release(s, requeue=True)
            log.info("%s handed back to the queue", lease.unit)
        except LeaseLost as exc:
            log.warning("%s stopped: %s", lease.unit, exc)
        except OperationalError as exc:
            log.warning("%s stopped, to resume when the database is back: %s", lease.unit, exc)
            Stalls(redis).mark(lease.unit.tuning_ids, f"{database_fault(exc)}; retrying")
        except Exception:
            log.exception("%s failed", lease.unit)
            raise SystemExit(1) from None


def _hand_back(_signum: int, _frame: FrameType | None) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM ends the child at once
    raise HandBack


def settle(
    sessions: sessionmaker[Session], lease: Lease, exitcode: int | None, *, stopping: bool
) -> None:
    """Settle a unit after its child ended: a child that died on its own fails the tunings it
    still held (the tuner records the errors it raises itself); one killed because the daemon
    stops hands them back. Best effort: if the database is down, the lease runs out anyway."""
    try:
        with session_scope(sessions) as s:
            if exitcode and not stopping:
                how = f"signal {-exitcode}" if exitcode < 0 else f"status {exitcode}"
                error = f"the tuner process died ({how}); submit it again to resume"
                move_tunings(s, lease.held_ids(s), TuningStatus.FAILED, error=error)
            lease.release(s, requeue=stopping)
    except OperationalError as exc:
        log.warning("could not release %s (%s); its lease runs out", lease.unit, exc)


def _run_tuning(
    sessions: sessionmaker[Session], redis: Redis, tuning_id: int, lease: Lease | None
) -> TuningSummary:
    with _failing(sessions, [tuning_id], lease):
        return _tuner(sessions, redis, tuning_id, lease).run(tuning_id)


def _run_group(
    sessions: sessionmaker[Session], redis: Redis, group_id: int, lease: Lease | None
) -> list[TuningSummary]:
    """The group's unfinished members (those of `lease`, under one) on what is left of its
    budget: a group taken over after its tuner died goes on where it stopped."""
    with session_scope(sessions) as s:
        group = get_group(s, group_id)
        members = group_members(s, [group_id]).get(group_id, [])
        if group is None or not members:
            raise LookupError(f"no tuning group {group_id}")
        held = set(lease.unit.tuning_ids) if lease is not None else {t.id for t in members}
        running = [t for t in members if t.id in held]
        ids = [t.id for t in running]
        weights = [t.weight or 1.0 for t in running]
        trials = group.trials_requested - sum(t.trials_done for t in members)
        time_limit_s = group.time_limit_s
    with _failing(sessions, ids, lease):
        tuner = _tuner(sessions, redis, ids[0], lease)
        return tuner.run_many(ids, weights, max(trials, 0), time_limit_s=time_limit_s)


@contextmanager
def _database(settings: Settings) -> Iterator[sessionmaker[Session]]:
    engine = make_engine(settings.database_url)
    try:
        yield session_factory(engine)
    finally:
        engine.dispose()


@contextmanager
def _redis(url: str | None) -> Iterator[Redis]:
    if not url:
        raise RuntimeError("TUNEHUB_REDIS_URL is not set: the tuner service needs Redis")
    redis = Redis.from_url(url)
    try:
        yield redis
    finally:
        redis.close()


@contextmanager
def _failing(
    sessions: sessionmaker[Session], tuning_ids: Sequence[int], lease: Lease | None
) -> Iterator[None]:
    """Any error in the block leaves the unfinished tunings failed with it (the tuner records
    its own errors with their traceback first; this catches the ones before it starts).
    Under a lease, a lost lease or a database outage fails nothing (see `Tuner`)."""
    try:
        yield
    except Exception as exc:
        if lease is None or not isinstance(exc, LeaseLost | OperationalError):
            _fail(sessions, tuning_ids, f"{type(exc).__name__}: {exc}")
        raise


def _tuner(
    sessions: sessionmaker[Session], redis: Redis, tuning_id: int, lease: Lease | None
) -> Tuner:
    """A tuner on the worker daemons, measuring with the threads the target's workers offer
    (`tuning_id`'s target: a group's members share theirs), that tells the API's best caches
    of every batch it stores."""
    with session_scope(sessions) as s:
        tuning = get_tuning(s, tuning_id)
        if tuning is None:
            raise LookupError(f"no tuning {tuning_id}")
        target = Target.parse(tuning.target)
    executor = RQExecutor(redis)
    threads = executor.measure_threads(executor.resolve(target))
    return Tuner(
        sessions,
        executor,
        threads=threads,
        generations=BestGenerations(redis),
        stalls=Stalls(redis),
        lease=lease,
        feature_workers=device.cpu_cores(),
    )


def _fail(sessions: sessionmaker[Session], tuning_ids: Sequence[int], error: str) -> None:
    with session_scope(sessions) as s:
        move_tunings(s, tuning_ids, TuningStatus.FAILED, error=error)


if __name__ == "__main__":
    main()
