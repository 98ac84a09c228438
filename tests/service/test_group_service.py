"""Tuning groups as tuner jobs: one RQ job per group, and failures that reach every unfinished
member (the runs themselves are in tests/e2e/test_tuning_groups.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from redis import Redis
from rq import Queue
from rq.job import Job
from sqlalchemy.orm import Session, sessionmaker

from tests.service.test_tuner_service import SIGNATURE
from tunehub.schemas.record import TuningStatus
from tunehub.schemas.target import Target
from tunehub.server.db import store
from tunehub.server.db.models import Tuning
from tunehub.server.db.session import session_scope
from tunehub.server.settings import Settings, get_settings
from tunehub.server.tuner import register_tuning
from tunehub.server.tuner.service import enqueue_group, fail_job, run_group, tuner_job_id
from tunehub.worker.queues import TUNER_QUEUE, group_job_id, tuning_job_id


@pytest.fixture
def database_settings(database_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The process-wide settings name this test's database, as they do for RQ's failure
    callbacks in a tuner daemon."""
    monkeypatch.setenv("TUNEHUB_DATABASE_URL", database_url)
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


def queue_group(sessions: sessionmaker[Session], target: Target, *values: int) -> list[int]:
    """A group of SIGNATURE at each value of M; its id, then its members' ids."""
    with session_scope(sessions) as s:
        group = store.create_group(s, target=target, strategy="random", trials=8)
        members = [
            register_tuning(
                s,
                signature=SIGNATURE,
                target=target,
                symbols={"M": m},
                trials=8,
                strategy="random",
                group_id=group.id,
                weight=m,
            )
            for m in values
        ]
        return [group.id, *members]


def statuses(sessions: sessionmaker[Session], ids: list[int]) -> list[tuple[str, str | None]]:
    with session_scope(sessions) as s:
        tunings = [store.get_tuning(s, i) for i in ids]
        return [(t.status, t.error) for t in tunings if t is not None]


def test_a_group_is_one_job_that_names_its_members_tuner_job(
    redis: Redis, sessions: sessionmaker[Session]
) -> None:
    group_id, *members = queue_group(sessions, Target(kind="cpu"), 1, 8)
    job_id = enqueue_group(redis, group_id)
    assert enqueue_group(redis, group_id) == job_id == group_job_id(group_id)
    assert Queue(TUNER_QUEUE, connection=redis).job_ids == [job_id]
    with session_scope(sessions) as s:
        tunings = [s.get_one(Tuning, i) for i in members]
        assert [tuner_job_id(t) for t in tunings] == [job_id, job_id]
        single = register_tuning(
            s,
            signature=SIGNATURE,
            target=Target(kind="cpu"),
            symbols={},
            trials=1,
            strategy="random",
        )
        assert tuner_job_id(s.get_one(Tuning, single)) == tuning_job_id(single)


def test_a_group_without_workers_fails_every_member_with_the_reason(
    redis_url: str, database_url: str, sessions: sessionmaker[Session]
) -> None:
    group_id, *members = queue_group(sessions, Target(kind="cuda", arch="sm_90"), 1, 8)
    settings = Settings(database_url=database_url, redis_url=redis_url)
    with pytest.raises(ValueError, match="no living worker serves cuda:sm_90"):
        run_group(group_id, settings=settings)
    for status, error in statuses(sessions, members):
        assert status == TuningStatus.FAILED
        assert error is not None and "no living worker serves cuda:sm_90" in error
    with pytest.raises(LookupError, match="no tuning group 999"):
        run_group(999, settings=settings)


def test_a_failed_group_job_fails_only_the_unfinished_members(
    redis: Redis, sessions: sessionmaker[Session], database_settings: None
) -> None:
    group_id, done, running = queue_group(sessions, Target(kind="cpu"), 1, 8)
    with session_scope(sessions) as s:
        store.update_tuning(s, done, status=TuningStatus.DONE)
        store.update_tuning(s, running, status=TuningStatus.RUNNING)
    job = Job.fetch(enqueue_group(redis, group_id), connection=redis)
    fail_job(job, "the tuner process died (signal 9); submit it again to resume")
    assert statuses(sessions, [done, running]) == [
        (TuningStatus.DONE, None),
        (TuningStatus.FAILED, "the tuner process died (signal 9); submit it again to resume"),
    ]
