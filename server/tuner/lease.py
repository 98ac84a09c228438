"""Leases: which tuner runs a tuning, for as long as it keeps saying so.

The database is the tuners' queue. A tuner daemon claims a unit of work (a tuning, or a
tuning group's unfinished members) with one conditional UPDATE that writes its lease: an owner
token, unique to this claim, and an expiry LEASE_TTL_S ahead. The process running the tuning
renews it every RENEW_S seconds and checks it in the transaction that stores each batch, so:

- a tuner that dies, however (SIGKILL, a lost machine), stops renewing, and within LEASE_TTL_S
  its tunings are claimable again: another tuner takes them over and resumes them from the
  records stored; nothing waits for a cleanup minutes later;
- a tuner that lost its lease (it stalled past the expiry and someone took over) stores
  nothing more: its batch is rolled back (`LeaseLost`), so a config is never recorded twice;
- a submission never joins a tuning nobody runs (`alive`).

Claimable: queued and running tunings without a lease, or whose lease expired.
"""

from __future__ import annotations

import logging
import threading
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Self, cast

from sqlalchemy import ColumnElement, CursorResult, and_, or_, select, update
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from tunehub.schemas.record import TuningStatus
from tunehub.server.db.models import Tuning, utcnow
from tunehub.server.db.session import session_scope
from tunehub.server.db.tunings import ACTIVE_TUNING_STATUSES

# A lease ends this long after its last renewal; renewed every RENEW_S, it survives two
# missed renewals (a busy database, a paused process) before another tuner takes over.
LEASE_TTL_S = 6.0
RENEW_S = 2.0

log = logging.getLogger(__name__)


class LeaseLost(RuntimeError):
    """Another tuner holds the tuning now: this one must stop without storing anything."""


@dataclass(frozen=True)
class Unit:
    """What one tuner job runs: a tuning (`group_id` None), or a group's unfinished members."""

    tuning_ids: tuple[int, ...]
    group_id: int | None = None

    def __str__(self) -> str:
        if self.group_id is not None:
            return f"tuning group {self.group_id}"
        return f"tuning {self.tuning_ids[0]}"


def _expired(now: datetime) -> ColumnElement[bool]:
    return or_(Tuning.lease_expires_at.is_(None), Tuning.lease_expires_at < now)


def _claimable(now: datetime) -> ColumnElement[bool]:
    return and_(Tuning.status.in_(ACTIVE_TUNING_STATUSES), _expired(now))


def alive(tuning: Tuning) -> bool:
    """Whether `tuning` is queued, or running under a lease that has not expired: one that a
    submission may join. A running tuning whose tuner died is not."""
    if tuning.status == TuningStatus.QUEUED:
        return True
    expiry = tuning.lease_expires_at
    return tuning.status == TuningStatus.RUNNING and expiry is not None and expiry > utcnow()


def requeue_orphan(s: Session, tuning: Tuning) -> bool:
    """Put a running tuning whose lease expired back in the queue (lease cleared), so that it
    shows as waiting for a tuner rather than running; whether it did."""
    now = utcnow()
    statement = (
        update(Tuning)
        .where(Tuning.id == tuning.id, Tuning.status == TuningStatus.RUNNING, _expired(now))
        .values(status=TuningStatus.QUEUED, lease_owner=None, lease_expires_at=None)
        .execution_options(synchronize_session="fetch")
    )
    return cast(CursorResult[Any], s.execute(statement)).rowcount > 0


def claim_next(sessions: sessionmaker[Session], owner_name: str, *, scan: int = 8) -> Lease | None:
    """Claim the oldest claimable unit for a tuner named `owner_name` and return its lease;
    None when there is nothing to run. Safe against tuners claiming at once: the UPDATE's
    condition is checked again by the database, so exactly one of them gets each unit.

    The candidates are read in a transaction of their own, and each claim is a transaction
    that starts with its UPDATE: on SQLite a transaction that reads and then writes fails at
    once ("database is locked") when another connection wrote in between, while one that
    starts by writing waits its turn.
    """
    with session_scope(sessions) as s:
        candidates = s.execute(
            select(Tuning.id, Tuning.group_id)
            .where(_claimable(utcnow()))
            .order_by(Tuning.id)
            .limit(scan)
        ).all()
    seen: set[tuple[str, int]] = set()
    for tuning_id, group_id in candidates:
        key = ("group", group_id) if group_id is not None else ("tuning", tuning_id)
        if key in seen:
            continue
        seen.add(key)
        owner = f"{owner_name}/{uuid.uuid4().hex[:12]}"
        member = Tuning.group_id == group_id if group_id is not None else Tuning.id == tuning_id
        now = utcnow()
        with session_scope(sessions) as s:
            statement = (
                update(Tuning)
                .where(member, _claimable(now))
                .values(lease_owner=owner, lease_expires_at=now + timedelta(seconds=LEASE_TTL_S))
                .execution_options(synchronize_session=False)
            )
            if cast(CursorResult[Any], s.execute(statement)).rowcount == 0:
                continue  # another tuner was first
            query = select(Tuning.id).where(Tuning.lease_owner == owner).order_by(Tuning.id)
            return Lease(owner, Unit(tuple(s.scalars(query)), group_id))
    return None


@dataclass(frozen=True)
class Lease:
    """A claim on a unit's tunings under a unique owner token."""

    owner: str
    unit: Unit

    def renew(self, s: Session) -> bool:
        """Move the expiry LEASE_TTL_S ahead for the unit's active tunings still held; whether
        any is (none: every one ended, or another tuner took them over)."""
        statement = (
            update(Tuning)
            .where(
                Tuning.id.in_(self.unit.tuning_ids),
                Tuning.lease_owner == self.owner,
                Tuning.status.in_(ACTIVE_TUNING_STATUSES),
            )
            .values(lease_expires_at=utcnow() + timedelta(seconds=LEASE_TTL_S))
            .execution_options(synchronize_session=False)
        )
        return cast(CursorResult[Any], s.execute(statement)).rowcount > 0

    def check(self, s: Session, tuning_id: int) -> None:
        """In the transaction that stores a batch of `tuning_id`, as its first statement:
        renew the lease, or raise LeaseLost (rolling the batch back) if another tuner holds
        the tuning now."""
        statement = (
            update(Tuning)
            .where(Tuning.id == tuning_id, Tuning.lease_owner == self.owner)
            .values(lease_expires_at=utcnow() + timedelta(seconds=LEASE_TTL_S))
            .execution_options(synchronize_session=False)
        )
        if cast(CursorResult[Any], s.execute(statement)).rowcount == 0:
            raise LeaseLost(f"tuning {tuning_id} is held by another tuner now")

    def release(self, s: Session, *, requeue: bool = False) -> None:
        """Give the tunings back: the lease cleared and, with `requeue`, running ones queued
        again for any tuner to resume (a tuner stopping in the middle of them)."""
        values: dict[str, Any] = {"lease_owner": None, "lease_expires_at": None}
        where = [Tuning.id.in_(self.unit.tuning_ids), Tuning.lease_owner == self.owner]
        if requeue:
            s.execute(
                update(Tuning)
                .where(*where, Tuning.status == TuningStatus.RUNNING)
                .values(status=TuningStatus.QUEUED, finished_at=None, **values)
                .execution_options(synchronize_session=False)
            )
        s.execute(update(Tuning).where(*where).values(values))

    def held_ids(self, s: Session) -> list[int]:
        """The unit's tunings this lease still holds."""
        query = select(Tuning.id).where(
            Tuning.id.in_(self.unit.tuning_ids), Tuning.lease_owner == self.owner
        )
        return list(s.scalars(query))


class Heartbeat:
    """Renews a lease every RENEW_S seconds from a thread, in sessions of its own, for as long
    as the tuning runs; a database outage costs one log line, not the tuning (the lease
    simply runs out if the outage outlasts it, and `Lease.check` then stops the tuning)."""

    def __init__(self, sessions: sessionmaker[Session], lease: Lease) -> None:
        self.sessions, self.lease = sessions, lease
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="lease", daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _beat(self) -> None:
        failing = False
        while not self._stop.wait(RENEW_S):
            try:
                with session_scope(self.sessions) as s:
                    held = self.lease.renew(s)
            except SQLAlchemyError as exc:
                if not failing:
                    log.warning("could not renew the lease of %s: %s", self.lease.unit, exc)
                failing = True
                continue
            if failing:
                log.info("renewing the lease of %s again", self.lease.unit)
            failing = False
            if not held:
                return  # ended, or taken over: `Lease.check` stops the tuning
