"""Time budgets: a tuning (or a group) with `time_limit_s` stops at the first batch boundary
after its wall-clock limit, however many trials remain, is marked done, and says why."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy.orm import Session, sessionmaker

from tests.signatures import row_matmul
from tunehub.schemas.record import TuningStatus
from tunehub.schemas.signature import TaskSignature
from tunehub.schemas.target import Target
from tunehub.server.db.session import session_scope
from tunehub.server.db.tunings import get_tuning
from tunehub.server.tuner import LocalExecutor, SearchPlan, Tuner, register_tuning, validate_task

SIGNATURE = TaskSignature.model_validate(row_matmul("limited_matmul", k=32, n=24, max_m=256))
# Far more trials than the limit lets run: the limit, not the trials, must end it.
TRIALS = 500
# Less than any batch takes: the limit has passed by the end of the first batch.
LIMIT_S = 1e-3


@pytest.fixture(scope="module")
def executor() -> Iterator[LocalExecutor]:
    with LocalExecutor() as executor:
        yield executor


def _register(
    sessions: sessionmaker[Session], target: Target, symbols: dict[str, int], limit: float | None
) -> int:
    with session_scope(sessions) as s:
        return register_tuning(
            s, validate_task(SIGNATURE, symbols), SearchPlan("random", TRIALS, limit), target=target
        )


def test_a_tuning_stops_at_its_time_limit(
    sessions: sessionmaker[Session], executor: LocalExecutor
) -> None:
    target = executor.resolve(Target(kind="cpu"))
    tuning_id = _register(sessions, target, {}, LIMIT_S)
    summary = Tuner(sessions, executor, batch_size=2).run(tuning_id)
    assert summary.status == TuningStatus.DONE
    assert summary.trials == 2  # one batch, then the limit
    assert summary.stop_reason == f"time limit of 0.001 s reached after 2 of {TRIALS} trials"
    with session_scope(sessions) as s:
        tuning = get_tuning(s, tuning_id)
        assert tuning is not None and tuning.time_limit_s == LIMIT_S
        assert tuning.stop_reason == summary.stop_reason


def test_a_group_stops_at_its_time_limit(
    sessions: sessionmaker[Session], executor: LocalExecutor
) -> None:
    target = executor.resolve(Target(kind="cpu"))
    ids = [_register(sessions, target, {"M": m}, LIMIT_S) for m in (8, 64)]
    tuner = Tuner(sessions, executor, batch_size=2)
    summaries = tuner.run_many(ids, [1.0, 1.0], TRIALS, time_limit_s=LIMIT_S)
    assert [s.status for s in summaries] == [TuningStatus.DONE, TuningStatus.DONE]
    assert sum(s.trials for s in summaries) == 2
    reason = f"time limit of 0.001 s reached after 2 of {TRIALS} trials"
    assert [s.stop_reason for s in summaries] == [reason, reason]


def test_without_a_limit_nothing_is_said(
    sessions: sessionmaker[Session], executor: LocalExecutor
) -> None:
    target = executor.resolve(Target(kind="cpu"))
    with session_scope(sessions) as s:
        tuning_id = register_tuning(
            s, validate_task(SIGNATURE, {}), SearchPlan("random", 2), target=target
        )
    summary = Tuner(sessions, executor, batch_size=2).run(tuning_id)
    assert (summary.trials, summary.stop_reason) == (2, None)


def test_a_limit_must_be_positive(sessions: sessionmaker[Session]) -> None:
    with pytest.raises(ValueError, match="a time limit must be positive"):
        _register(sessions, Target.parse("cpu:x86_64-avx2"), {}, 0.0)
