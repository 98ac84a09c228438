"""How many tunings and records have each status: one grouped query each, for the metrics
and a tuning's summary."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from tunehub.schemas.record import RecordStatus, TuningStatus
from tunehub.server.db.models import Record, Tuning


def count_tunings_by_status(s: Session) -> dict[TuningStatus, int]:
    """How many tunings have each status (absent: none); one grouped query."""
    query = select(Tuning.status, func.count()).group_by(Tuning.status)
    return {TuningStatus(status): n for status, n in s.execute(query)}


def count_records_by_status(s: Session) -> dict[RecordStatus, int]:
    """How many records have each status (absent: none); one grouped query."""
    query = select(Record.status, func.count()).group_by(Record.status)
    return {RecordStatus(status): n for status, n in s.execute(query)}


def count_tuning_records_by_status(s: Session, tuning_id: int) -> dict[RecordStatus, int]:
    """How many of tuning `tuning_id`'s records have each status (absent: none)."""
    query = (
        select(Record.status, func.count())
        .where(Record.tuning_id == tuning_id)
        .group_by(Record.status)
    )
    return {RecordStatus(status): n for status, n in s.execute(query)}
