"""The tuner as a service: each tuning (or tuning group) is an RQ job on `tunehub:tuner`, run
by `tunehub tuner`.

A tuning never runs inside an HTTP request: the API creates the queued Tuning row and calls
`enqueue_tuning`; a tuner daemon (`run_tuner_daemon`), the one service process besides the API
that holds database credentials, runs `run_tuning`: the same `Tuner` as `tunehub tune`, with an
`RQExecutor`, so candidates go to the worker daemons and their results come back to be stored
here. A tuning group is one job (`enqueue_group`, `run_group`) that steps its members on one
budget with `Tuner.run_many`, as `tunehub tune A.json B.json` does. Each job runs in a forked
child of the daemon (RQ's `Worker`), so a tuning that crashes takes only itself down.

A tuning whose process dies is marked failed (with the reason; a group's unfinished members
all are) when the daemon sees its child die or, if the daemon died too, when RQ later finds
the job abandoned; submitting it again resumes it from the records already stored.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from redis import Redis
from rq import Callback, Queue, Worker, get_current_job
from rq.exceptions import DuplicateJobError, NoSuchJobError
from rq.job import Job, JobStatus
from sqlalchemy.orm import Session, sessionmaker

from tunehub.schemas.record import TuningStatus
from tunehub.schemas.target import Target
from tunehub.server.db import store
from tunehub.server.db.models import Tuning
from tunehub.server.db.session import make_engine, migrate, session_factory, session_scope
from tunehub.server.generations import BestGenerations
from tunehub.server.settings import Settings, get_settings
from tunehub.server.tuner.reporting import TuningSummary
from tunehub.server.tuner.rq_executor import RQExecutor
from tunehub.server.tuner.tuner import Tuner
from tunehub.worker import logs
from tunehub.worker.daemon import DEFAULT_REDIS_URL
from tunehub.worker.queues import TUNER_QUEUE, group_job_id, tuning_job_id

# A tuning stops at its trial budget long before this; the timeout catches a stuck tuner.
TUNING_TIMEOUT_S = 24 * 3600
RESULT_TTL_S = 24 * 3600
FAILURE_TTL_S = 7 * 24 * 3600

_ACTIVE_JOB = (JobStatus.QUEUED, JobStatus.STARTED, JobStatus.DEFERRED, JobStatus.SCHEDULED)

log = logging.getLogger(__name__)


def enqueue_tuning(redis: Redis, tuning_id: int) -> str:
    """Queue tuning `tuning_id` for a tuner daemon and return its job id. Idempotent: a tuning
    already queued or running is left alone; a finished one is queued again (and resumes)."""
    return _enqueue(redis, run_tuning, tuning_id, tuning_job_id(tuning_id), "tuning")


def enqueue_group(redis: Redis, group_id: int) -> str:
    """Queue tuning group `group_id` (one job for all its tunings), as `enqueue_tuning` does."""
    return _enqueue(redis, run_group, group_id, group_job_id(group_id), "tuning group")


def tuner_job_id(tuning: Tuning) -> str:
    """The id of the tuner job that runs `tuning`: its group's, or its own."""
    return tuning_job_id(tuning.id) if tuning.group_id is None else group_job_id(tuning.group_id)


def _enqueue(redis: Redis, function: Callable[..., Any], arg: int, job_id: str, what: str) -> str:
    try:
        previous = Job.fetch(job_id, connection=redis)
    except NoSuchJobError:
        previous = None
    if previous is not None:
        if previous.get_status() in _ACTIVE_JOB:
            return job_id
        previous.delete()
    # Enqueued concurrently by someone else (DuplicateJobError): the same job, once.
    with contextlib.suppress(DuplicateJobError):
        Queue(TUNER_QUEUE, connection=redis).enqueue(
            function,
            arg,
            job_id=job_id,
            unique=True,
            job_timeout=TUNING_TIMEOUT_S,
            result_ttl=RESULT_TTL_S,
            failure_ttl=FAILURE_TTL_S,
            on_failure=Callback(tuning_job_failed),
            description=f"{what} {arg}",
        )
    return job_id


def run_tuning(tuning_id: int, *, settings: Settings | None = None) -> TuningSummary:
    """Run (or resume) one tuning with the worker daemons: the RQ job behind `enqueue_tuning`.

    Redis is the one the job came from (else the settings' `redis_url`); the database is the
    settings'. Any error, before or during the search, leaves the tuning failed with it.
    """
    settings = settings or get_settings()
    with (
        _database(settings) as sessions,
        _failing(sessions, [tuning_id]),
        _job_redis(settings) as redis,
    ):
        return _tuner(sessions, redis, tuning_id).run(tuning_id)


def run_group(group_id: int, *, settings: Settings | None = None) -> list[TuningSummary]:
    """Run a tuning group's tunings on its one budget (`Tuner.run_many`, each task weighted as
    submitted): the RQ job behind `enqueue_group`. Redis, the database and errors as in
    `run_tuning`; an error leaves every unfinished member failed with it."""
    settings = settings or get_settings()
    with _database(settings) as sessions:
        with session_scope(sessions) as s:
            group = store.get_group(s, group_id)
            members = store.group_members(s, [group_id]).get(group_id, [])
            if group is None or not members:
                raise LookupError(f"no tuning group {group_id}")
            ids = [t.id for t in members]
            weights = [t.weight or 1.0 for t in members]
            trials, time_limit_s = group.trials_requested, group.time_limit_s
        with _failing(sessions, ids), _job_redis(settings) as redis:
            tuner = _tuner(sessions, redis, ids[0])
            return tuner.run_many(ids, weights, trials, time_limit_s=time_limit_s)


def tuning_job_failed(job: Job, connection: Redis, exc_type: Any, *_: Any) -> None:
    """RQ failure callback of a tuner job: run when it raised (already recorded) and when RQ
    finds the job abandoned by a dead tuner daemon."""
    name = getattr(exc_type, "__name__", str(exc_type))
    fail_job(job, f"the tuning job failed ({name}); submit it again to resume")


def fail_job(job: Job, error: str) -> None:
    """Mark the tunings a tuner job runs (one, or a group's) failed with `error`, unless they
    have ended; with the settings' database."""
    with _database(get_settings()) as sessions:
        if job.id == group_job_id(job.args[0]):
            with session_scope(sessions) as s:
                members = store.group_members(s, [job.args[0]]).get(job.args[0], [])
                tuning_ids = [t.id for t in members]
        else:
            tuning_ids = [job.args[0]]
        _fail(sessions, tuning_ids, error)


def run_tuner_daemon(redis_url: str, *, name: str | None = None, burst: bool = False) -> None:
    """Serve the tuner queue until SIGTERM/SIGINT (or, with `burst`, until it is empty). The
    database is the settings' (`TUNEHUB_DATABASE_URL`), migrated first."""
    migrate(get_settings().database_url)
    redis = Redis.from_url(redis_url)
    worker = Worker(
        [TUNER_QUEUE], name=name, connection=redis, work_horse_killed_handler=_tuner_killed
    )
    try:
        worker.work(burst=burst, logging_level="INFO")
    finally:
        redis.close()


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
    parser.add_argument("--name", help="RQ worker name (default: random)")
    parser.add_argument("--burst", action="store_true", help="quit when the queue is empty")
    args = parser.parse_args(argv)
    try:
        logs.configure()
    except ValueError as exc:
        parser.error(str(exc))
    run_tuner_daemon(args.redis, name=args.name, burst=args.burst)


def _redis(settings: Settings) -> Redis:
    if not settings.redis_url:
        raise RuntimeError("TUNEHUB_REDIS_URL is not set: the tuner service needs Redis")
    return Redis.from_url(settings.redis_url)


@contextmanager
def _database(settings: Settings) -> Iterator[sessionmaker[Session]]:
    engine = make_engine(settings.database_url)
    try:
        yield session_factory(engine)
    finally:
        engine.dispose()


@contextmanager
def _job_redis(settings: Settings) -> Iterator[Redis]:
    """The Redis of the current RQ job (left open: RQ owns it), else the settings' one."""
    job = get_current_job()
    if job is not None:
        yield job.connection
        return
    redis = _redis(settings)
    try:
        yield redis
    finally:
        redis.close()


@contextmanager
def _failing(sessions: sessionmaker[Session], tuning_ids: Sequence[int]) -> Iterator[None]:
    """Any error in the block leaves the unfinished tunings failed with it (the tuner records
    its own errors with their traceback first; this catches the ones before it starts)."""
    try:
        yield
    except Exception as exc:
        _fail(sessions, tuning_ids, f"{type(exc).__name__}: {exc}")
        raise


def _tuner(sessions: sessionmaker[Session], redis: Redis, tuning_id: int) -> Tuner:
    """A tuner on the worker daemons, measuring with the threads the target's workers offer
    (`tuning_id`'s target: a group's members share theirs), that tells the API's best caches
    of every batch it stores."""
    with session_scope(sessions) as s:
        tuning = store.get_tuning(s, tuning_id)
        if tuning is None:
            raise LookupError(f"no tuning {tuning_id}")
        target = Target.parse(tuning.target)
    executor = RQExecutor(redis)
    threads = executor.measure_threads(executor.resolve(target))
    return Tuner(sessions, executor, threads=threads, generations=BestGenerations(redis))


def _fail(sessions: sessionmaker[Session], tuning_ids: Sequence[int], error: str) -> None:
    with session_scope(sessions) as s:
        store.move_tunings(s, tuning_ids, TuningStatus.FAILED, error=error)


def _tuner_killed(job: Job, _pid: int, status: int, _rusage: Any) -> None:
    """The child running a tuner job died (out of memory, a signal): say so in its tunings."""
    how = f"signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else f"status {status}"
    fail_job(job, f"the tuner process died ({how}); submit it again to resume")


if __name__ == "__main__":
    main()
