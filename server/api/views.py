"""Database rows as the API's views (`schemas.api`), with the few reads that takes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from sqlalchemy.orm import Session

from tunehub.schemas.api import MAX_ID, Page, RecordView, Submission, TuningGroupView, TuningView
from tunehub.server.db.groups import group_members, group_statuses
from tunehub.server.db.models import Record, Tuning, TuningGroup
from tunehub.server.db.records import get_records
from tunehub.server.db.tunings import get_tuning
from tunehub.server.groups import group_state
from tunehub.server.stalls import Stalls, stalled_reasons
from tunehub.server.submit import Submitted

ItemT = TypeVar("ItemT")


def tuning_views(s: Session, tunings: Sequence[Tuning], stalls: Stalls | None) -> list[TuningView]:
    """Views of `tunings`, their best records read in one query, the stall marks of the
    running ones in one Redis call (`stalled_reasons`)."""
    best = get_records(s, ids=[t.best_record_id for t in tunings if t.best_record_id])
    stalled = stalled_reasons(stalls, tunings)
    return [_tuning_view(t, best.get(t.best_record_id or 0), stalled.get(t.id)) for t in tunings]


def tuning_view(s: Session, tuning: Tuning, stalls: Stalls | None) -> TuningView:
    return tuning_views(s, [tuning], stalls)[0]


def submission(s: Session, submitted: Submitted, stalls: Stalls | None) -> Submission:
    tuning = get_tuning(s, submitted.tuning_id)
    assert tuning is not None  # committed by the submission
    view = tuning_view(s, tuning, stalls)
    return Submission(**dict(view), outcome=submitted.outcome)


def group_views(
    s: Session, groups: Sequence[TuningGroup], stalls: Stalls | None
) -> list[TuningGroupView]:
    """Views of `groups`: their members, statuses and best records in three queries."""
    ids = [g.id for g in groups]
    members, statuses = group_members(s, ids), group_statuses(s, ids)
    tunings = tuning_views(s, [t for g in groups for t in members.get(g.id, [])], stalls)
    by_id = {view.id: view for view in tunings}
    views = []
    for group in groups:
        own = members.get(group.id, [])
        state = group_state(own, statuses[group.id])
        views.append(
            TuningGroupView(
                id=group.id,
                target=group.target,
                strategy=group.strategy,
                status=state.status,
                trials_done=state.trials_done,
                trials_total=group.trials_requested,
                time_limit_s=group.time_limit_s,
                weights=[t.weight or 1.0 for t in own],
                tunings=[by_id[t.id] for t in own],
                error=_first_line(state.error),
                created_at=group.created_at,
                started_at=state.started_at,
                finished_at=state.finished_at,
            )
        )
    return views


def group_view(s: Session, group: TuningGroup, stalls: Stalls | None) -> TuningGroupView:
    return group_views(s, [group], stalls)[0]


def page(items: Sequence[ItemT], limit: int, offset: int) -> Page[ItemT]:
    """A page from up to `limit + 1` items: the extra one only says that more follow."""
    more = len(items) > limit and offset + limit <= MAX_ID
    return Page(
        items=list(items[:limit]),
        limit=limit,
        offset=offset,
        next_offset=offset + limit if more else None,
    )


def _tuning_view(tuning: Tuning, best: Record | None, stalled: str | None) -> TuningView:
    return TuningView(
        id=tuning.id,
        workload_key=tuning.workload_key,
        target=tuning.target,
        symbols=tuning.symbols,
        strategy=tuning.strategy,
        status=tuning.status,
        trials_done=tuning.trials_done,
        trials_total=tuning.trials_requested,
        time_limit_s=tuning.time_limit_s,
        stop_reason=tuning.stop_reason,
        best=None if best is None else RecordView.model_validate(best),
        error=_first_line(tuning.error),
        stalled=stalled,
        created_at=tuning.created_at,
        started_at=tuning.started_at,
        finished_at=tuning.finished_at,
    )


def _first_line(error: str | None) -> str | None:
    """The first line: the tuner stores its traceback after it, for operators."""
    return error.splitlines()[0] if error else None
