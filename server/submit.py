"""What the service does with a tuning request: validate it, and then join, answer or queue it.

    validate: the program (SignatureError), trials against the server's cap, the strategy,
              the symbol values (filled in as the tuner would)
    target:   an incomplete one (`cpu`, `cuda`) is completed from the worker registry: the
              ISA or arch most living workers measure for. With no living worker of that kind
              it stays incomplete, queued as it is; the tuner completes it when it starts
              (`RQExecutor.resolve`), and fails the tuning if there is still no worker then.
    join:     a tuning of the same workload, target and symbols already queued or running is
              returned instead of measuring the same candidates twice ("joined");
    answer:   if the database already holds at least `trials` measurements of them, nothing
              runs: a tuning is recorded as done at once, with the best so far ("cached");
    queue:    otherwise a new tuning is created, committed, then put on the tuner queue
              ("created"). Queuing needs Redis; without it the request is `Unavailable`.

Two API processes could both find no active tuning and both create one; a Redis lock per
workload (held from the check to the commit) makes the check and the creation one step.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import Literal

from redis import Redis
from redis.exceptions import LockError, RedisError
from sqlalchemy.orm import Session, sessionmaker

from compiler import search
from compiler.canonical import workload_key
from compiler.program import load
from schemas.api import TuningRequest
from schemas.record import TuningStatus
from schemas.target import Target
from server.db import store
from server.db.models import Tuning
from server.db.session import session_scope
from server.errors import Conflict, InvalidRequest, Unavailable
from server.tuner import resolve_symbols
from server.tuner import submit as register_tuning
from server.tuner.rq_executor import RQExecutor
from server.tuner.service import enqueue_tuning
from worker.queues import submit_lock_key

# How long one submission may hold its workload's lock, and wait for it.
SUBMIT_LOCK_TTL_S = 30
SUBMIT_LOCK_WAIT_S = 10

Outcome = Literal["created", "joined", "cached"]


@dataclass(frozen=True)
class Submitted:
    tuning_id: int
    outcome: Outcome


def submit_tuning(
    sessions: sessionmaker[Session],
    redis: Redis | None,
    request: TuningRequest,
    *,
    max_trials: int,
) -> Submitted:
    """Join, answer or queue `request` (see the module's docstring)."""
    key, symbols = _validate(request, max_trials)
    target = resolve_target(redis, request.target)
    with _workload_lock(redis, key):
        with session_scope(sessions) as s:
            active = store.find_active_tuning(s, workload_key=key, target=target, symbols=symbols)
            if active is not None:
                return Submitted(active.id, "joined")
            measured = store.count_records(s, workload_key=key, target=target, symbols=symbols)
            if redis is None and measured < request.trials:
                raise Unavailable(
                    "this server has no Redis (TUNEHUB_REDIS_URL), so it cannot queue tunings; "
                    "run `tunehub tune` on a machine instead"
                )
            tuning_id = register_tuning(
                s,
                signature=request.task,
                target=target,
                symbols=symbols,
                trials=request.trials,
                strategy=request.strategy,
            )
            if measured >= request.trials:
                best = store.best_record(s, workload_key=key, target=target, symbols=symbols)
                store.update_tuning(
                    s,
                    tuning_id,
                    status=TuningStatus.DONE,
                    best_record_id=best.id if best is not None else None,
                )
                return Submitted(tuning_id, "cached")
        # Queued only once committed: a tuner that picks it up at once must find the row.
        assert redis is not None
        try:
            enqueue_tuning(redis, tuning_id)
        except RedisError as exc:
            with session_scope(sessions) as s:
                store.update_tuning(
                    s, tuning_id, status=TuningStatus.FAILED, error=f"could not queue it: {exc}"
                )
            raise Unavailable(f"could not queue the tuning (Redis: {exc})") from None
    return Submitted(tuning_id, "created")


def _validate(request: TuningRequest, max_trials: int) -> tuple[str, dict[str, int]]:
    """Everything a tuning could fail on late, checked now: its workload key and the symbol
    values to tune for, or InvalidRequest / SignatureError with a one-line message."""
    if request.trials > max_trials:
        raise InvalidRequest(
            f"trials: {request.trials} is over this server's limit of {max_trials}"
        )
    if request.strategy not in search.STRATEGIES:
        choices = ", ".join(sorted(search.STRATEGIES))
        raise InvalidRequest(f"strategy: unknown strategy {request.strategy!r} (one of {choices})")
    program = load(request.task)
    try:
        symbols = resolve_symbols(program, request.symbols)
    except ValueError as exc:
        raise InvalidRequest(f"symbols: {exc}") from None
    return workload_key(program), symbols


def resolve_target(redis: Redis | None, target: Target) -> Target:
    """`target` completed from the worker registry when it is incomplete and a living worker
    of its kind exists; otherwise `target` as it is (see the module's docstring)."""
    if target.complete or redis is None:
        return target
    try:
        return RQExecutor(redis).resolve(target)
    except ValueError:  # no living worker of this kind (yet)
        return target


def cancel_tuning(s: Session, tuning: Tuning) -> None:
    """Cancel a queued or running tuning. A running one stops at its next batch boundary (the
    tuner re-reads its status); a queued one ends as soon as a tuner picks it up."""
    if tuning.status not in store.ACTIVE_TUNING_STATUSES:
        raise Conflict(f"tuning {tuning.id} has already ended ({tuning.status})")
    store.update_tuning(s, tuning.id, status=TuningStatus.CANCELLED, error="cancelled")


@contextmanager
def _workload_lock(redis: Redis | None, key: str) -> Iterator[None]:
    """Hold workload `key`'s submission lock (nothing to hold without Redis: such a server
    never creates a queued tuning, so there is nothing to duplicate)."""
    if redis is None:
        yield
        return
    lock = redis.lock(
        submit_lock_key(key), timeout=SUBMIT_LOCK_TTL_S, blocking_timeout=SUBMIT_LOCK_WAIT_S
    )
    if not lock.acquire():
        raise Unavailable(f"workload {key} is busy with another submission; try again")
    try:
        yield
    finally:
        # It may have expired during a stall; whoever holds it now keeps it.
        with suppress(LockError):
            lock.release()
