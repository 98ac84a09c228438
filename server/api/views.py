"""Database rows as the API's views (`schemas.api`), with the few reads that takes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from sqlalchemy.orm import Session

from schemas.api import MAX_ID, Page, RecordView, Submission, TuningView
from server.db import store
from server.db.models import Record, Tuning
from server.submit import Submitted

ItemT = TypeVar("ItemT")


def tuning_views(s: Session, tunings: Sequence[Tuning]) -> list[TuningView]:
    """Views of `tunings`, their best records read in one query."""
    best = store.get_records(s, ids=[t.best_record_id for t in tunings if t.best_record_id])
    return [_tuning_view(t, best.get(t.best_record_id or 0)) for t in tunings]


def tuning_view(s: Session, tuning: Tuning) -> TuningView:
    return tuning_views(s, [tuning])[0]


def submission(s: Session, submitted: Submitted) -> Submission:
    tuning = store.get_tuning(s, submitted.tuning_id)
    assert tuning is not None  # committed by the submission
    view = tuning_view(s, tuning)
    return Submission(**dict(view), outcome=submitted.outcome)


def page(items: Sequence[ItemT], limit: int, offset: int) -> Page[ItemT]:
    """A page from up to `limit + 1` items: the extra one only says that more follow."""
    more = len(items) > limit and offset + limit <= MAX_ID
    return Page(
        items=list(items[:limit]),
        limit=limit,
        offset=offset,
        next_offset=offset + limit if more else None,
    )


def _tuning_view(tuning: Tuning, best: Record | None) -> TuningView:
    return TuningView(
        id=tuning.id,
        workload_key=tuning.workload_key,
        target=tuning.target,
        symbols=tuning.symbols,
        strategy=tuning.strategy,
        status=tuning.status,
        trials_done=tuning.trials_done,
        trials_total=tuning.trials_requested,
        best=None if best is None else RecordView.model_validate(best),
        # The first line: the tuner stores its traceback after it, for operators.
        error=tuning.error.splitlines()[0] if tuning.error else None,
        created_at=tuning.created_at,
        started_at=tuning.started_at,
        finished_at=tuning.finished_at,
    )
