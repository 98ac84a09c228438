"""Data access for tunings: created queued, then only their progress fields change.

The functions flush but never commit: the caller owns the transaction (`session_scope`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

from sqlalchemy import ColumnElement, CursorResult, func, select, update
from sqlalchemy.orm import Session

from tunehub.schemas.record import TuningStatus
from tunehub.schemas.target import Target
from tunehub.server.db.models import Tuning, utcnow
from tunehub.server.db.sql import canonical_json

ACTIVE_TUNING_STATUSES = (TuningStatus.QUEUED, TuningStatus.RUNNING)
FINISHED_TUNING_STATUSES = (TuningStatus.DONE, TuningStatus.FAILED, TuningStatus.CANCELLED)


def create_tuning(
    s: Session,
    *,
    workload_key: str,
    target: str | Target,
    symbols: Mapping[str, Any],
    trials: int,
    strategy: str,
    group_id: int | None = None,
    weight: float | None = None,
    time_limit_s: float | None = None,
) -> Tuning:
    """A new tuning, queued; a group member gets its group's id and its weight there."""
    tuning = Tuning(
        workload_key=workload_key,
        target=str(target),
        symbols=dict(symbols),
        symbols_key=canonical_json(dict(symbols)),
        trials_requested=trials,
        trials_done=0,
        time_limit_s=time_limit_s,
        strategy=strategy,
        status=TuningStatus.QUEUED,
        created_at=utcnow(),
        group_id=group_id,
        weight=weight,
    )
    s.add(tuning)
    s.flush()
    return tuning


def get_tuning(s: Session, tuning_id: int) -> Tuning | None:
    return s.get(Tuning, tuning_id)


def list_tunings(
    s: Session,
    *,
    limit: int = 100,
    offset: int = 0,
    workload_key: str | None = None,
    status: TuningStatus | None = None,
) -> list[Tuning]:
    """Newest first."""
    query = select(Tuning)
    if workload_key is not None:
        query = query.where(Tuning.workload_key == workload_key)
    if status is not None:
        query = query.where(Tuning.status == status)
    query = query.order_by(Tuning.id.desc()).limit(limit).offset(offset)
    return list(s.scalars(query))


def _same_task(
    workload_key: str, target: str | Target, symbols: Mapping[str, Any]
) -> tuple[ColumnElement[bool], ...]:
    """The conditions on tunings of exactly this workload, target and symbol values."""
    return (
        Tuning.workload_key == workload_key,
        Tuning.target == str(target),
        Tuning.symbols_key == canonical_json(dict(symbols)),
    )


def find_active_tuning(
    s: Session, *, workload_key: str, target: str | Target, symbols: Mapping[str, Any]
) -> Tuning | None:
    """The oldest queued or running tuning of exactly this workload, target and symbol values:
    a second identical request joins it instead of measuring the same candidates again."""
    query = (
        select(Tuning)
        .where(
            *_same_task(workload_key, target, symbols),
            Tuning.status.in_(ACTIVE_TUNING_STATUSES),
        )
        .order_by(Tuning.id)
        .limit(1)
    )
    return s.scalars(query).first()


def find_resumable_tuning(
    s: Session,
    *,
    workload_key: str,
    target: str | Target,
    symbols: Mapping[str, Any],
    trials: int,
) -> Tuning | None:
    """The newest failed or cancelled tuning of exactly this task and budget, outside any
    group, with trials left: submitting the task again resumes it rather than starting a new
    tuning, so the budget counts what it measured already."""
    query = (
        select(Tuning)
        .where(
            *_same_task(workload_key, target, symbols),
            Tuning.status.in_((TuningStatus.FAILED, TuningStatus.CANCELLED)),
            Tuning.group_id.is_(None),
            Tuning.trials_requested == trials,
            Tuning.trials_done < trials,
        )
        .order_by(Tuning.id.desc())
        .limit(1)
    )
    return s.scalars(query).first()


def find_done_tuning(
    s: Session, *, workload_key: str, target: str | Target, symbols: Mapping[str, Any]
) -> Tuning | None:
    """The newest done tuning of this task outside any group: a submission the records
    already answer returns it rather than recording another tuning that measured nothing."""
    query = (
        select(Tuning)
        .where(
            *_same_task(workload_key, target, symbols),
            Tuning.status == TuningStatus.DONE,
            Tuning.group_id.is_(None),
        )
        .order_by(Tuning.id.desc())
        .limit(1)
    )
    return s.scalars(query).first()


def update_tuning(
    s: Session,
    tuning_id: int,
    *,
    status: TuningStatus | None = None,
    trials_done: int | None = None,
    best_record_id: int | None = None,
    error: str | None = None,
    stop_reason: str | None = None,
) -> Tuning:
    """Record a tuning's progress; arguments left None stay as they are.

    `started_at` is set the first time it becomes running, `finished_at` whenever it reaches
    done, failed or cancelled (and cleared if it is queued or run again, e.g. on resume).
    `status` is written whatever the row holds: only for a tuning nobody else can be changing
    (one this transaction created); every other status change goes through `move_tunings`.
    Raises `LookupError` for an unknown id.
    """
    tuning = s.get(Tuning, tuning_id)
    if tuning is None:
        raise LookupError(f"no tuning {tuning_id}")
    if status is not None:
        now = utcnow()
        if status == TuningStatus.RUNNING and tuning.started_at is None:
            tuning.started_at = now
        tuning.finished_at = now if status in FINISHED_TUNING_STATUSES else None
        tuning.status = status
    if trials_done is not None:
        tuning.trials_done = trials_done
    if best_record_id is not None:
        tuning.best_record_id = best_record_id
    if error is not None:
        tuning.error = error
    if stop_reason is not None:
        tuning.stop_reason = stop_reason
    s.flush()
    return tuning


def move_tunings(
    s: Session,
    tuning_ids: Sequence[int],
    status: TuningStatus,
    *,
    error: str | None = None,
    only_from: Sequence[TuningStatus] = ACTIVE_TUNING_STATUSES,
) -> int:
    """Set `status` (and `error`) on those of `tuning_ids` whose status is one of `only_from`
    in one conditional UPDATE, and return how many changed. The API and the tuners change a
    tuning's status concurrently; reading it first and then writing would let a tuning that
    finished in between be cancelled (or a cancelled one be marked done), so the database
    decides. Times as in `update_tuning`; the loaded `Tuning` objects it changes follow."""
    if not tuning_ids:
        return 0
    now = utcnow()
    values: dict[str, Any] = {
        "status": status,
        "finished_at": now if status in FINISHED_TUNING_STATUSES else None,
    }
    if status == TuningStatus.RUNNING:
        values["started_at"] = func.coalesce(Tuning.started_at, now)
    if error is not None:
        values["error"] = error
    statement = (
        update(Tuning)
        .where(Tuning.id.in_(set(tuning_ids)), Tuning.status.in_(only_from))
        .values(values)
        .execution_options(synchronize_session="fetch")
    )
    return cast(CursorResult[Any], s.execute(statement)).rowcount
