"""What the service does with a tuning request: validate it, and then join, answer or queue it.

    validate: trials against the server's cap, the strategy, the program (SignatureError),
              the symbol values (filled in as the tuner would), once: what was found is
              what the tuning is registered with (`server.tuner.registration`)
    target:   an incomplete one (`cpu`, `cuda`) is completed from the worker registry: the
              ISA or arch most living workers measure for. With no living worker of that kind
              it stays incomplete, queued as it is; the tuner completes it when it starts
              (`RQExecutor.resolve`), and fails the tuning if there is still no worker then.
    join:     a tuning of the same workload, target and symbols already queued or running is
              returned instead of measuring the same candidates twice ("joined"); one whose
              tuner died (its lease expired) is queued again first, for a living tuner;
    answer:   if the database already holds at least `trials` measurements of them, nothing
              runs: the newest done tuning of them is the answer, or, when there is none
              (the records were imported), a tuning is recorded as done at once, with the
              best so far ("cached"); resubmitting a tuned workload adds no row;
    queue:    otherwise a failed or cancelled tuning of them with the same budget is queued
              again, to resume where it stopped (its records count toward the budget), or a
              new tuning is created ("created"). The committed row is the tuners' queue
              (`server.tuner.lease`). Queuing needs Redis (the workers do); without it the
              request is `Unavailable`.

A tuning group (`submit_group`) is validated task by task, then queued as a whole: one
tuning per task, run by one tuner on one budget. It never joins or answers from the database
(see `submit_group`).

Two API processes could both find no active tuning and both create one; a Redis lock per
workload (held from the check to the commit) makes the check and the creation one step. The
check is made first without it: concurrent submissions of one workload join the tuning the
first one queues, waiting for it rather than being refused, and only a dependency that is
down makes a submission `Unavailable`.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass
from typing import Literal

from redis import Redis
from redis.exceptions import LockError
from sqlalchemy.orm import Session, sessionmaker

from tunehub.compiler.errors import SignatureError
from tunehub.schemas.api import GroupTask, TuningGroupRequest, TuningRequest
from tunehub.schemas.record import TuningStatus
from tunehub.schemas.signature import TaskSignature
from tunehub.schemas.target import Target
from tunehub.server.best import best_record
from tunehub.server.db.groups import create_group, group_members, group_statuses
from tunehub.server.db.models import Tuning, TuningGroup
from tunehub.server.db.records import count_records
from tunehub.server.db.session import session_scope
from tunehub.server.db.sql import canonical_json
from tunehub.server.db.tunings import (
    FINISHED_TUNING_STATUSES,
    find_active_tuning,
    find_done_tuning,
    find_resumable_tuning,
    move_tunings,
    update_tuning,
)
from tunehub.server.db.workloads import workload_symbols
from tunehub.server.errors import Conflict, InvalidRequest, Unavailable
from tunehub.server.tuner import SearchPlan, ValidTask, register_tuning, validate_task
from tunehub.server.tuner.lease import alive, requeue_orphan
from tunehub.server.tuner.rq_executor import RQExecutor
from tunehub.worker.queues import submit_lock_key

# How long one submission may hold its workload's lock; how long another waits for it (a
# submission holds it for one short transaction: only a stalled database makes this run out),
# and how often it looks again meanwhile.
SUBMIT_LOCK_TTL_S = 30
SUBMIT_WAIT_S = 60
SUBMIT_POLL_S = 0.02

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
    _check_trials(request.trials, max_trials)
    plan = _plan(request.strategy, request.trials, request.time_limit_s)
    task = _validate_task(request.task, request.symbols)
    target = resolve_target(redis, request.target)
    deadline = time.monotonic() + SUBMIT_WAIT_S
    while True:
        with session_scope(sessions) as s:
            answered = _join_or_answer(s, task, plan, target)
        if answered is not None:
            return answered
        if redis is None:
            raise _no_redis("tunings")
        lock = redis.lock(submit_lock_key(task.key), timeout=SUBMIT_LOCK_TTL_S)
        if lock.acquire(blocking=False):
            try:
                with session_scope(sessions) as s:
                    return _join_or_answer(s, task, plan, target) or _queue(s, task, plan, target)
            finally:
                # It may have expired during a stall; whoever holds it now keeps it.
                with suppress(LockError):
                    lock.release()
        # Another submission of this workload is queuing it: wait until it has committed
        # (watching Redis only: a waiter holds no database connection), then join it.
        while redis.exists(submit_lock_key(task.key)):
            if time.monotonic() > deadline:
                raise Unavailable(f"workload {task.key}: another submission has held it too long")
            time.sleep(SUBMIT_POLL_S)


def _join_or_answer(
    s: Session, task: ValidTask, plan: SearchPlan, target: Target
) -> Submitted | None:
    """The living tuning of this task to join (an orphaned one is queued again first: its
    tuner died), or the answer from the records already stored; None when neither."""
    stored = workload_symbols(s, task.key, task.symbols)
    active = find_active_tuning(s, workload_key=task.key, target=target, symbols=stored)
    if active is not None:
        if not alive(active):
            requeue_orphan(s, active)
        return Submitted(active.id, "joined")
    measured = count_records(s, workload_key=task.key, target=target, symbols=stored)
    if measured < plan.trials:
        return None
    best = best_record(s, workload_key=task.key, target=target, symbols=stored)
    best_id = best.id if best is not None else None
    done = find_done_tuning(s, workload_key=task.key, target=target, symbols=stored)
    if done is not None:  # the answer is that tuning's: no new row per resubmission
        if done.best_record_id != best_id:
            update_tuning(s, done.id, best_record_id=best_id)
        return Submitted(done.id, "cached")
    tuning_id = register_tuning(s, task, plan, target=target)
    update_tuning(s, tuning_id, status=TuningStatus.DONE, best_record_id=best_id)
    return Submitted(tuning_id, "cached")


def _queue(s: Session, task: ValidTask, plan: SearchPlan, target: Target) -> Submitted:
    """Queue the task (under its workload's lock): the failed or cancelled tuning of it with
    the same budget resumes where it stopped (its records count), else a new one is created.
    The committed row is the tuners' queue."""
    stored = workload_symbols(s, task.key, task.symbols)
    stopped = find_resumable_tuning(
        s, workload_key=task.key, target=target, symbols=stored, trials=plan.trials
    )
    if stopped is not None:
        move_tunings(s, [stopped.id], TuningStatus.QUEUED, only_from=FINISHED_TUNING_STATUSES)
        stopped.error = None
        return Submitted(stopped.id, "created")
    return Submitted(register_tuning(s, task, plan, target=target), "created")


def submit_group(
    sessions: sessionmaker[Session],
    redis: Redis | None,
    request: TuningGroupRequest,
    *,
    max_trials: int,
) -> int:
    """Queue a tuning group: one tuning per task, each with the whole budget as its cap, and
    one tuner job that shares the budget among them. Returns the group's id.

    Every task is validated first (an error names its index: `tasks[2]: ...`). A group never
    joins or answers from the database: a task whose workload, target and symbols are already
    being tuned makes it a Conflict, since two tunings of one task would measure the same
    candidates; measurements already stored are reused by the tuner as always.
    """
    _check_trials(request.trials, max_trials * len(request.tasks), per_task=max_trials)
    plan = _plan(request.strategy, request.trials, request.time_limit_s)
    tasks = [_validate_group_task(i, task) for i, task in enumerate(request.tasks)]
    seen: dict[tuple[str, str], int] = {}
    for i, task in enumerate(tasks):
        # By position: two signatures of one workload may name its symbols differently.
        first = seen.setdefault((task.key, canonical_json(list(task.symbols.values()))), i)
        if first != i:
            raise InvalidRequest(
                f"tasks[{i}]: the same workload and symbols as tasks[{first}]; "
                "give that task a larger weight instead"
            )
    if redis is None:
        raise _no_redis("tuning groups")
    target = resolve_target(redis, request.target)
    with _workload_locks(redis, [task.key for task in tasks]), session_scope(sessions) as s:
        for i, task in enumerate(tasks):
            stored = workload_symbols(s, task.key, task.symbols)
            active = find_active_tuning(s, workload_key=task.key, target=target, symbols=stored)
            if active is not None:
                raise Conflict(
                    f"tasks[{i}]: tuning {active.id} of the same workload, target and "
                    f"symbols is {active.status}; submit the group when it has ended"
                )
        group_id = create_group(
            s,
            target=target,
            strategy=plan.strategy,
            trials=plan.trials,
            time_limit_s=plan.time_limit_s,
        ).id
        for member, task in zip(request.tasks, tasks, strict=True):
            register_tuning(s, task, plan, target=target, group_id=group_id, weight=member.weight)
    return group_id


def resolve_target(redis: Redis | None, target: Target) -> Target:
    """`target` completed from the worker registry when it is incomplete and a living worker
    of its kind exists; otherwise `target` as it is (see the module's docstring)."""
    if target.complete or redis is None:
        return target
    try:
        return RQExecutor(redis, wait_for_redis=False).resolve(target)
    except ValueError:  # no living worker of this kind (yet)
        return target


def cancel_tuning(s: Session, tuning: Tuning) -> None:
    """Cancel a queued or running tuning. A running one stops at its next batch boundary (the
    tuner re-reads its status); a queued one ends as soon as a tuner picks it up. Conflict
    when it has ended, also when its tuner finished it a moment ago (`db.tunings.move_tunings`)."""
    if not move_tunings(s, [tuning.id], TuningStatus.CANCELLED, error="cancelled"):
        s.refresh(tuning)
        raise Conflict(f"tuning {tuning.id} has already ended ({tuning.status})")


def cancel_group(s: Session, group: TuningGroup) -> None:
    """Cancel a group's unfinished tunings (as `cancel_tuning`; finished ones keep their
    results). Conflict when none is left."""
    members = group_members(s, [group.id]).get(group.id, [])
    ids = [t.id for t in members]
    if not move_tunings(s, ids, TuningStatus.CANCELLED, error="cancelled"):
        ended = group_statuses(s, [group.id])[group.id]
        raise Conflict(f"tuning group {group.id} has already ended ({ended})")


def _check_trials(trials: int, cap: int, *, per_task: int | None = None) -> None:
    if trials > cap:
        each = "" if per_task is None else f" ({per_task} per task)"
        raise InvalidRequest(f"trials: {trials} is over this server's limit of {cap}{each}")


def _plan(strategy: str, trials: int, time_limit_s: float | None) -> SearchPlan:
    """The request's `SearchPlan`, or InvalidRequest. Its model has checked the trials and the
    time limit already: what is left for the plan to refuse is the strategy."""
    try:
        return SearchPlan(strategy, trials, time_limit_s)
    except ValueError as exc:
        raise InvalidRequest(f"strategy: {exc}") from None


def _validate_task(task: TaskSignature, symbols: Mapping[str, int]) -> ValidTask:
    """Everything a tuning could fail on late, checked now (`validate_task`): its workload key
    and the symbol values to tune for, or InvalidRequest / SignatureError with a one-line
    message."""
    try:
        return validate_task(task, symbols)
    except SignatureError:
        raise
    except ValueError as exc:
        raise InvalidRequest(f"symbols: {exc}") from None


def _validate_group_task(index: int, task: GroupTask) -> ValidTask:
    """`_validate_task`, with the task's index in the message."""
    try:
        return _validate_task(task.task, task.symbols)
    except (SignatureError, InvalidRequest) as exc:
        raise InvalidRequest(f"tasks[{index}]: {exc}") from None


def _no_redis(what: str) -> Unavailable:
    return Unavailable(
        f"this server has no Redis (TUNEHUB_REDIS_URL), so it cannot queue {what}; "
        "run `tunehub tune` on a machine instead"
    )


@contextmanager
def _workload_locks(redis: Redis | None, keys: Iterable[str]) -> Iterator[None]:
    """Hold the submission locks of workloads `keys`, taken in sorted order so that two
    submissions never wait on each other in a cycle (nothing to hold without Redis: such a
    server never creates a queued tuning, so there is nothing to duplicate)."""
    with ExitStack() as held:
        if redis is not None:
            for key in sorted(set(keys)):
                held.enter_context(_workload_lock(redis, key))
        yield


@contextmanager
def _workload_lock(redis: Redis, key: str) -> Iterator[None]:
    lock = redis.lock(
        submit_lock_key(key),
        timeout=SUBMIT_LOCK_TTL_S,
        blocking_timeout=SUBMIT_WAIT_S,
        sleep=SUBMIT_POLL_S,
    )
    if not lock.acquire():
        raise Unavailable(f"workload {key} is busy with another submission; try again")
    try:
        yield
    finally:
        # It may have expired during a stall; whoever holds it now keeps it.
        with suppress(LockError):
            lock.release()
