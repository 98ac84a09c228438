"""Tuning groups as tuner units: a tuner claims a group's members together, and failures that
reach every unfinished member (the runs themselves are in tests/e2e/test_tuning_groups.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy.orm import Session, sessionmaker

from tests.service.test_tuner_service import SIGNATURE
from tunehub.schemas.record import TuningStatus
from tunehub.schemas.target import Target
from tunehub.server.db.groups import create_group
from tunehub.server.db.session import session_scope
from tunehub.server.db.tunings import get_tuning, update_tuning
from tunehub.server.settings import Settings, get_settings
from tunehub.server.tuner import SearchPlan, register_tuning, validate_task
from tunehub.server.tuner.lease import Unit, claim_next
from tunehub.server.tuner.service import run_group, settle


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
        group = create_group(s, target=target, strategy="random", trials=8)
        members = [
            register_tuning(
                s,
                validate_task(SIGNATURE, {"M": m}),
                SearchPlan("random", 8),
                target=target,
                group_id=group.id,
                weight=m,
            )
            for m in values
        ]
        return [group.id, *members]


def statuses(sessions: sessionmaker[Session], ids: list[int]) -> list[tuple[str, str | None]]:
    with session_scope(sessions) as s:
        tunings = [get_tuning(s, i) for i in ids]
        return [(t.status, t.error) for t in tunings if t is not None]


def test_a_tuner_claims_a_group_as_one_unit_and_a_tuning_alone(
    sessions: sessionmaker[Session],
) -> None:
    group_id, *members = queue_group(sessions, Target(kind="cpu"), 1, 8)
    with session_scope(sessions) as s:
        single = register_tuning(
            s, validate_task(SIGNATURE, {}), SearchPlan("random", 1), target=Target(kind="cpu")
        )
    first = claim_next(sessions, "tuner-a")
    second = claim_next(sessions, "tuner-b")
    assert claim_next(sessions, "tuner-c") is None  # both held
    assert first is not None and first.unit == Unit(tuple(members), group_id)
    assert second is not None and second.unit == Unit((single,))
    assert first.owner.startswith("tuner-a/") and second.owner.startswith("tuner-b/")


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


def test_a_tuner_process_that_dies_fails_only_the_unfinished_members(
    sessions: sessionmaker[Session],
) -> None:
    _, done, running = queue_group(sessions, Target(kind="cpu"), 1, 8)
    lease = claim_next(sessions, "tuner")
    assert lease is not None
    with session_scope(sessions) as s:
        update_tuning(s, done, status=TuningStatus.DONE)
        update_tuning(s, running, status=TuningStatus.RUNNING)
    settle(sessions, lease, -9, stopping=False)
    assert statuses(sessions, [done, running]) == [
        (TuningStatus.DONE, None),
        (TuningStatus.FAILED, "the tuner process died (signal 9); submit it again to resume"),
    ]


def test_a_stopping_tuner_hands_its_unfinished_tunings_back(
    sessions: sessionmaker[Session],
) -> None:
    group_id, done, running = queue_group(sessions, Target(kind="cpu"), 1, 8)
    lease = claim_next(sessions, "tuner")
    assert lease is not None
    with session_scope(sessions) as s:
        update_tuning(s, done, status=TuningStatus.DONE)
        update_tuning(s, running, status=TuningStatus.RUNNING)
    settle(sessions, lease, -9, stopping=True)
    assert statuses(sessions, [done, running]) == [
        (TuningStatus.DONE, None),
        (TuningStatus.QUEUED, None),
    ]
    again = claim_next(sessions, "another")
    assert again is not None and again.unit == Unit((running,), group_id)
