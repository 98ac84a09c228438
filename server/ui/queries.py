"""The reads only the dashboard makes: a page's worth of rows in one query each, never one
query per row."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import Row, func, select
from sqlalchemy.orm import Session, aliased, load_only

from tunehub.schemas.record import RecordStatus
from tunehub.server.db.models import Record, Workload


def workload_names(s: Session, keys: Sequence[str]) -> dict[str, str]:
    """The name of each workload, by key."""
    if not keys:
        return {}
    query = select(Workload.key, Workload.name).where(Workload.key.in_(set(keys)))
    return {key: name for key, name in s.execute(query)}


def best_per_target(s: Session, keys: Sequence[str]) -> dict[str, list[Record]]:
    """The fastest `ok` record of each of these workloads on each target it was measured on
    (whatever its symbol values), by workload key, ordered by target."""
    if not keys:
        return {}
    rank = (
        func.row_number()
        .over(
            partition_by=(Record.workload_key, Record.target),
            order_by=(Record.latency_s, Record.id),
        )
        .label("rank")
    )
    ranked = (
        select(Record)
        .where(
            Record.workload_key.in_(set(keys)),
            Record.status == RecordStatus.OK,
            Record.latency_s.is_not(None),
        )
        .add_columns(rank)
        .subquery()
    )
    best = aliased(Record, ranked)
    query = select(best).where(ranked.c.rank == 1).order_by(best.target)
    out: dict[str, list[Record]] = {}
    for record in s.scalars(query):
        out.setdefault(record.workload_key, []).append(record)
    return out


def record_targets(s: Session, key: str) -> list[str]:
    """Every target the workload has records on, sorted."""
    query = select(Record.target).where(Record.workload_key == key).distinct()
    return sorted(s.scalars(query))


def trials(
    s: Session, tuning_id: int
) -> list[Row[tuple[int, RecordStatus, float | None, datetime]]]:
    """Each record of the tuning in order, as its charts need it (id, status, latency, time):
    four columns, not whole rows with their JSON, for a page that a running tuning's pollers
    read again after every batch."""
    query = (
        select(Record.id, Record.status, Record.latency_s, Record.created_at)
        .where(Record.tuning_id == tuning_id)
        .order_by(Record.id)
    )
    return list(s.execute(query))


def newest_records(s: Session, tuning_id: int, last_id: int, limit: int) -> list[Record]:
    """The tuning's newest `limit` records up to id `last_id`, newest first (a batch stored
    since its trials were read is left for the next page), with only the fields a row shows
    (not the features, timings and machine, JSON to decode)."""
    shown = load_only(
        Record.target,
        Record.symbols_key,
        Record.status,
        Record.latency_s,
        Record.config,
        Record.build_time_s,
        Record.max_error,
        Record.error_log,
        Record.artifact_sha256,
        Record.created_at,
        raiseload=True,
    )
    query = (
        select(Record)
        .options(shown)
        .where(Record.tuning_id == tuning_id, Record.id <= last_id)
        .order_by(Record.id.desc())
        .limit(limit)
    )
    return list(s.scalars(query))
