"""Data access for tuning groups: a group stores its request; its status is its members'
(`group_statuses`), derived in SQL.

The functions flush but never commit: the caller owns the transaction (`session_scope`).
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import ColumnElement, Select, case, func, select
from sqlalchemy.orm import Session

from tunehub.schemas.record import TuningStatus
from tunehub.schemas.target import Target
from tunehub.server.db.models import Tuning, TuningGroup, utcnow
from tunehub.server.db.tunings import ACTIVE_TUNING_STATUSES


def create_group(
    s: Session,
    *,
    target: str | Target,
    strategy: str,
    trials: int,
    time_limit_s: float | None = None,
) -> TuningGroup:
    """A new, empty group with a budget of `trials` (and of `time_limit_s` seconds, if
    given); its members are tunings that name it."""
    group = TuningGroup(
        target=str(target),
        strategy=strategy,
        trials_requested=trials,
        time_limit_s=time_limit_s,
        created_at=utcnow(),
    )
    s.add(group)
    s.flush()
    return group


def get_group(s: Session, group_id: int) -> TuningGroup | None:
    return s.get(TuningGroup, group_id)


def list_groups(
    s: Session, *, limit: int = 100, offset: int = 0, status: TuningStatus | None = None
) -> list[TuningGroup]:
    """Newest first; only those whose status (`group_statuses`) is `status`, if given."""
    query = select(TuningGroup)
    if status is not None:
        statuses = _group_statuses_query().subquery()
        query = query.join(statuses, statuses.c.group_id == TuningGroup.id).where(
            statuses.c.status == status.value
        )
    query = query.order_by(TuningGroup.id.desc()).limit(limit).offset(offset)
    return list(s.scalars(query))


def group_statuses(s: Session, group_ids: Sequence[int]) -> dict[int, TuningStatus]:
    """Each group's status, derived from its members' in one query (a group without members
    is left out): queued while all are queued, running while any is unfinished, then failed
    if any failed, else cancelled if any was cancelled, else done."""
    if not group_ids:
        return {}
    query = _group_statuses_query().where(Tuning.group_id.in_(set(group_ids)))
    rows = s.execute(query)
    return {group: TuningStatus(status) for group, status in rows if group is not None}


def _group_statuses_query() -> Select[int | None, str]:
    """(group_id, status) of every group; the one definition of a group's status, so that
    views and filters cannot disagree."""

    def members(*statuses: TuningStatus) -> ColumnElement[int]:
        return func.sum(case((Tuning.status.in_(statuses), 1), else_=0))

    status = case(
        (members(TuningStatus.QUEUED) == func.count(), TuningStatus.QUEUED.value),
        (members(*ACTIVE_TUNING_STATUSES) > 0, TuningStatus.RUNNING.value),
        (members(TuningStatus.FAILED) > 0, TuningStatus.FAILED.value),
        (members(TuningStatus.CANCELLED) > 0, TuningStatus.CANCELLED.value),
        else_=TuningStatus.DONE.value,
    )
    return (
        select(Tuning.group_id, status.label("status"))
        .where(Tuning.group_id.is_not(None))
        .group_by(Tuning.group_id)
    )


def group_members(s: Session, group_ids: Sequence[int]) -> dict[int, list[Tuning]]:
    """The tunings of each group, in the order they were submitted, in one query (a group
    without any is left out)."""
    members: dict[int, list[Tuning]] = {}
    if not group_ids:
        return members
    query = select(Tuning).where(Tuning.group_id.in_(set(group_ids))).order_by(Tuning.id)
    for tuning in s.scalars(query):
        assert tuning.group_id is not None  # selected by it
        members.setdefault(tuning.group_id, []).append(tuning)
    return members
