"""A tuning group's progress, derived from its member tunings whenever it is read.

A group stores only its request (target, strategy, budget); its status
(`db.groups.group_statuses`, one SQL definition that listings filter by too), progress, error
and times are its members', so that nothing can make the two disagree: a member cancelled on
its own, a tuner that died between two updates.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from tunehub.schemas.record import TuningStatus
from tunehub.server.db.models import Tuning
from tunehub.server.db.tunings import ACTIVE_TUNING_STATUSES


@dataclass(frozen=True)
class GroupState:
    status: TuningStatus
    trials_done: int
    error: str | None  # failed or cancelled: the first error of a member with that status
    started_at: datetime | None
    finished_at: datetime | None


def group_state(members: Sequence[Tuning], status: TuningStatus) -> GroupState:
    """The state of a group with these member tunings and this (derived) status."""
    ended_badly = status in (TuningStatus.FAILED, TuningStatus.CANCELLED)
    errors = [t.error for t in members if ended_badly and t.status == status and t.error]
    started = [t.started_at for t in members if t.started_at is not None]
    finished = [t.finished_at for t in members if t.finished_at is not None]
    return GroupState(
        status=status,
        trials_done=sum(t.trials_done for t in members),
        error=errors[0] if errors else None,
        started_at=min(started, default=None),
        finished_at=None if status in ACTIVE_TUNING_STATUSES else max(finished, default=None),
    )
