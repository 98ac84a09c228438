"""The reads only the dashboard makes: a page's worth of rows in one query each, never one
query per row."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import func, select
from sqlalchemy.orm import Session, aliased

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
