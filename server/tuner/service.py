"""The tuner as a service: each tuning is an RQ job on `tunehub:tuner`, run by `tunehub tuner`.

A tuning never runs inside an HTTP request: the API creates the queued Tuning row and calls
`enqueue_tuning`; a tuner daemon (`run_tuner_daemon`), the one service process besides the API
that holds database credentials, runs `run_tuning`: the same `Tuner` as `tunehub tune`, with an
`RQExecutor`, so candidates go to the worker daemons and their results come back to be stored
here. Each tuning runs in a forked child of the daemon (RQ's `Worker`), so a tuning that
crashes takes only itself down.

A tuning whose process dies is marked failed (with the reason) when the daemon sees its child
die or, if the daemon died too, when RQ later finds the job abandoned; running it again
resumes it from the records already stored.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
from collections.abc import Sequence
from typing import Any

from redis import Redis
from rq import Callback, Queue, Worker, get_current_job
from rq.exceptions import DuplicateJobError, NoSuchJobError
from rq.job import Job, JobStatus
from sqlalchemy.orm import Session, sessionmaker

from schemas.record import TuningStatus
from schemas.target import Target
from server.db import store
from server.db.session import make_engine, migrate, session_factory, session_scope
from server.settings import Settings, get_settings
from server.tuner.rq_executor import RQExecutor
from server.tuner.tuner import Tuner, TuningSummary
from worker.daemon import DEFAULT_REDIS_URL
from worker.queues import TUNER_QUEUE, tuning_job_id

# A tuning stops at its trial budget long before this; the timeout catches a stuck tuner.
TUNING_TIMEOUT_S = 24 * 3600
RESULT_TTL_S = 24 * 3600
FAILURE_TTL_S = 7 * 24 * 3600

_ACTIVE_JOB = (JobStatus.QUEUED, JobStatus.STARTED, JobStatus.DEFERRED, JobStatus.SCHEDULED)

log = logging.getLogger(__name__)


def enqueue_tuning(redis: Redis, tuning_id: int) -> str:
    """Queue tuning `tuning_id` for a tuner daemon and return its job id. Idempotent: a tuning
    already queued or running is left alone; a finished one is queued again (and resumes)."""
    job_id = tuning_job_id(tuning_id)
    try:
        previous = Job.fetch(job_id, connection=redis)
    except NoSuchJobError:
        previous = None
    if previous is not None:
        if previous.get_status() in _ACTIVE_JOB:
            return job_id
        previous.delete()
    # Enqueued concurrently by someone else (DuplicateJobError): the same tuning, once.
    with contextlib.suppress(DuplicateJobError):
        Queue(TUNER_QUEUE, connection=redis).enqueue(
            run_tuning,
            tuning_id,
            job_id=job_id,
            unique=True,
            job_timeout=TUNING_TIMEOUT_S,
            result_ttl=RESULT_TTL_S,
            failure_ttl=FAILURE_TTL_S,
            on_failure=Callback(tuning_job_failed),
            description=f"tuning {tuning_id}",
        )
    return job_id


def run_tuning(tuning_id: int, *, settings: Settings | None = None) -> TuningSummary:
    """Run (or resume) one tuning with the worker daemons: the RQ job behind `enqueue_tuning`.

    Redis is the one the job came from (else the settings' `redis_url`); the database is the
    settings'. Any error, before or during the search, leaves the tuning failed with it.
    """
    settings = settings or get_settings()
    engine = make_engine(settings.database_url)
    sessions = session_factory(engine)
    job = get_current_job()
    redis = job.connection if job is not None else _redis(settings)
    try:
        with session_scope(sessions) as s:
            tuning = store.get_tuning(s, tuning_id)
            if tuning is None:
                raise LookupError(f"no tuning {tuning_id}")
            target = Target.parse(tuning.target)
        executor = RQExecutor(redis)
        threads = executor.measure_threads(executor.resolve(target))
        return Tuner(sessions, executor, threads=threads).run(tuning_id)
    except Exception as exc:
        _fail(sessions, tuning_id, f"{type(exc).__name__}: {exc}")
        raise
    finally:
        if job is None:
            redis.close()
        engine.dispose()


def tuning_job_failed(job: Job, connection: Redis, exc_type: Any, *_: Any) -> None:
    """RQ failure callback of a tuning job: run when `run_tuning` raised (already recorded)
    and when RQ finds the job abandoned by a dead tuner daemon."""
    name = getattr(exc_type, "__name__", str(exc_type))
    fail_tuning(job.args[0], f"the tuning job failed ({name}); run it again to resume")


def fail_tuning(tuning_id: int, error: str) -> None:
    """Mark a tuning failed with `error`, with the settings' database, unless it has ended."""
    engine = make_engine(get_settings().database_url)
    try:
        _fail(session_factory(engine), tuning_id, error)
    finally:
        engine.dispose()


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
    """`python -m server.tuner.service`: the tuner daemon (`tunehub tuner`)."""
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
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    run_tuner_daemon(args.redis, name=args.name, burst=args.burst)


def _redis(settings: Settings) -> Redis:
    if not settings.redis_url:
        raise RuntimeError("TUNEHUB_REDIS_URL is not set: the tuner service needs Redis")
    return Redis.from_url(settings.redis_url)


def _fail(sessions: sessionmaker[Session], tuning_id: int, error: str) -> None:
    with session_scope(sessions) as s:
        tuning = store.get_tuning(s, tuning_id)
        if tuning is not None and tuning.status in store.ACTIVE_TUNING_STATUSES:
            store.update_tuning(s, tuning_id, status=TuningStatus.FAILED, error=error)


def _tuner_killed(job: Job, _pid: int, status: int, _rusage: Any) -> None:
    """The child running a tuning died (out of memory, a signal): say so in the tuning."""
    how = f"signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else f"status {status}"
    fail_tuning(job.args[0], f"the tuner process died ({how}); run it again to resume")


if __name__ == "__main__":
    main()
