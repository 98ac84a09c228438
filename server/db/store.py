"""Data access for the tuning database: keyword-only functions over a `Session`.

The functions flush but never commit: the caller owns the transaction (`session_scope`).
Nothing here deletes or overwrites a record, an artifact or a cost model; only a tuning's
progress fields change.
"""

from __future__ import annotations

import hashlib
import json
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from sqlalchemy import ColumnElement, CursorResult, Select, case, func, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import InstrumentedAttribute, Session, aliased

from tunehub.compiler.space.space import Space
from tunehub.schemas.api import RecordView
from tunehub.schemas.dispatch import DispatchEntry, DispatchTable
from tunehub.schemas.record import UNKNOWN_DEVICE, RecordStatus, TuningStatus
from tunehub.schemas.signature import TaskSignature
from tunehub.schemas.target import Target
from tunehub.server.db.models import (
    Artifact,
    Record,
    StoredCostModel,
    Tuning,
    TuningGroup,
    Workload,
    utcnow,
)

KEY_LENGTH = 64  # a workload key: sha256 hex
ACTIVE_TUNING_STATUSES = (TuningStatus.QUEUED, TuningStatus.RUNNING)
FINISHED_TUNING_STATUSES = (TuningStatus.DONE, TuningStatus.FAILED, TuningStatus.CANCELLED)


def canonical_json(value: Any) -> str:
    """The one canonical text of a JSON value (sorted keys, no spaces): equal values, equal
    strings. Symbol values are looked up by it; configs use `Space.key`, which is the same."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _target_filter(column: InstrumentedAttribute[str], target: str | Target) -> ColumnElement[bool]:
    """`cuda:sm_90` matches itself; an incomplete `cuda` matches every `cuda:*`."""
    text = str(target)
    kind, _, detail = text.partition(":")
    if detail:
        return column == text
    return or_(column == kind, column.startswith(f"{kind}:", autoescape=True))


def _insert_if_absent(s: Session, model: type[Any], values: Mapping[str, Any]) -> None:
    """INSERT ... ON CONFLICT DO NOTHING on the primary key: safe when two writers add the same
    content-addressed row at once (a check-then-insert would race)."""
    dialect = s.get_bind().dialect.name
    if dialect == "postgresql":
        insert: Any = postgresql.insert
    elif dialect == "sqlite":
        insert = sqlite.insert
    else:
        raise NotImplementedError(f"unsupported database {dialect!r} (SQLite or PostgreSQL)")
    s.execute(insert(model).values(**values).on_conflict_do_nothing())


# Workloads


def upsert_workload(s: Session, *, key: str, name: str, signature: Mapping[str, Any]) -> Workload:
    """The workload `key`, created on first sight. A known workload keeps its first name and
    signature: the key is a hash of the canonical signature, so they cannot differ."""
    values = {"key": key, "name": name, "signature": dict(signature), "created_at": utcnow()}
    _insert_if_absent(s, Workload, values)
    return s.get_one(Workload, key)


def get_workload(s: Session, key: str) -> Workload | None:
    return s.get(Workload, key)


def workload_symbols(s: Session, key: str, values: Mapping[str, int]) -> dict[str, int]:
    """`values` (every symbol, in declaration order, under some submitter's names) under the
    names workload `key` keeps, its first signature's: signatures that differ only in names
    are one workload, and their symbols correspond by position, as in the workload key.
    As given for a workload not stored yet."""
    workload = get_workload(s, key)
    if workload is None:
        return dict(values)
    names = list(workload.signature.get("symbols", {}))
    return dict(zip(names, values.values(), strict=True))


def workloads_with_prefix(s: Session, prefix: str, *, limit: int | None = 2) -> list[str]:
    """The keys of (at most `limit`, None: all) workloads whose key starts with `prefix`."""
    return [w.key for w in list_workloads(s, limit=limit, prefix=prefix)]


def resolve_workload_key(s: Session, text: str) -> str:
    """The one stored workload whose key is `text` or starts with it (the 12 characters `best`
    prints are enough); LookupError saying why not (none, or several: give more)."""
    keys = workloads_with_prefix(s, text, limit=3)
    if not keys and len(text) == KEY_LENGTH:
        raise LookupError(f"unknown workload {text!r}")
    if not keys:
        raise LookupError(f"no workload has a key starting with {text!r}")
    if len(keys) > 1 and text.lower() not in keys:
        shown = ", ".join(key[:16] for key in keys[:2])
        raise LookupError(f"workload key {text!r} is ambiguous ({shown}, ...): give more of it")
    return text.lower() if text.lower() in keys else keys[0]


def list_workloads(
    s: Session, *, limit: int | None = 100, offset: int = 0, prefix: str | None = None
) -> list[Workload]:
    """Newest first; only those whose key starts with `prefix`, if given."""
    query = select(Workload).order_by(Workload.created_at.desc(), Workload.key)
    if prefix is not None:
        query = query.where(Workload.key.startswith(prefix.lower(), autoescape=True))
    return list(s.scalars(query.limit(limit).offset(offset)))


# Tunings


def create_tuning(
    s: Session,
    *,
    workload_key: str,
    target: str | Target,
    symbols: Mapping[str, Any],
    trials: int,
    strategy: str,
    group_id: int | None = None,
    weight: float | None = None,
    time_limit_s: float | None = None,
) -> Tuning:
    """A new tuning, queued; a group member gets its group's id and its weight there."""
    tuning = Tuning(
        workload_key=workload_key,
        target=str(target),
        symbols=dict(symbols),
        symbols_key=canonical_json(dict(symbols)),
        trials_requested=trials,
        trials_done=0,
        time_limit_s=time_limit_s,
        strategy=strategy,
        status=TuningStatus.QUEUED,
        created_at=utcnow(),
        group_id=group_id,
        weight=weight,
    )
    s.add(tuning)
    s.flush()
    return tuning


def get_tuning(s: Session, tuning_id: int) -> Tuning | None:
    return s.get(Tuning, tuning_id)


def list_tunings(
    s: Session,
    *,
    limit: int = 100,
    offset: int = 0,
    workload_key: str | None = None,
    status: TuningStatus | None = None,
) -> list[Tuning]:
    """Newest first."""
    query = select(Tuning)
    if workload_key is not None:
        query = query.where(Tuning.workload_key == workload_key)
    if status is not None:
        query = query.where(Tuning.status == status)
    query = query.order_by(Tuning.id.desc()).limit(limit).offset(offset)
    return list(s.scalars(query))


def find_active_tuning(
    s: Session, *, workload_key: str, target: str | Target, symbols: Mapping[str, Any]
) -> Tuning | None:
    """The oldest queued or running tuning of exactly this workload, target and symbol values:
    a second identical request joins it instead of measuring the same candidates again."""
    query = (
        select(Tuning)
        .where(
            Tuning.workload_key == workload_key,
            Tuning.target == str(target),
            Tuning.symbols_key == canonical_json(dict(symbols)),
            Tuning.status.in_(ACTIVE_TUNING_STATUSES),
        )
        .order_by(Tuning.id)
        .limit(1)
    )
    return s.scalars(query).first()


def find_resumable_tuning(
    s: Session,
    *,
    workload_key: str,
    target: str | Target,
    symbols: Mapping[str, Any],
    trials: int,
) -> Tuning | None:
    """The newest failed or cancelled tuning of exactly this task and budget, outside any
    group, with trials left: submitting the task again resumes it rather than starting a new
    tuning, so the budget counts what it measured already."""
    query = (
        select(Tuning)
        .where(
            Tuning.workload_key == workload_key,
            Tuning.target == str(target),
            Tuning.symbols_key == canonical_json(dict(symbols)),
            Tuning.status.in_((TuningStatus.FAILED, TuningStatus.CANCELLED)),
            Tuning.group_id.is_(None),
            Tuning.trials_requested == trials,
            Tuning.trials_done < trials,
        )
        .order_by(Tuning.id.desc())
        .limit(1)
    )
    return s.scalars(query).first()


def update_tuning(
    s: Session,
    tuning_id: int,
    *,
    status: TuningStatus | None = None,
    trials_done: int | None = None,
    best_record_id: int | None = None,
    error: str | None = None,
    stop_reason: str | None = None,
) -> Tuning:
    """Record a tuning's progress; arguments left None stay as they are.

    `started_at` is set the first time it becomes running, `finished_at` whenever it reaches
    done, failed or cancelled (and cleared if it is queued or run again, e.g. on resume).
    `status` is written whatever the row holds: only for a tuning nobody else can be changing
    (one this transaction created); every other status change goes through `move_tunings`.
    Raises `LookupError` for an unknown id.
    """
    tuning = s.get(Tuning, tuning_id)
    if tuning is None:
        raise LookupError(f"no tuning {tuning_id}")
    if status is not None:
        now = utcnow()
        if status == TuningStatus.RUNNING and tuning.started_at is None:
            tuning.started_at = now
        tuning.finished_at = now if status in FINISHED_TUNING_STATUSES else None
        tuning.status = status
    if trials_done is not None:
        tuning.trials_done = trials_done
    if best_record_id is not None:
        tuning.best_record_id = best_record_id
    if error is not None:
        tuning.error = error
    if stop_reason is not None:
        tuning.stop_reason = stop_reason
    s.flush()
    return tuning


def move_tunings(
    s: Session,
    tuning_ids: Sequence[int],
    status: TuningStatus,
    *,
    error: str | None = None,
    only_from: Sequence[TuningStatus] = ACTIVE_TUNING_STATUSES,
) -> int:
    """Set `status` (and `error`) on those of `tuning_ids` whose status is one of `only_from`
    in one conditional UPDATE, and return how many changed. The API and the tuners change a
    tuning's status concurrently; reading it first and then writing would let a tuning that
    finished in between be cancelled (or a cancelled one be marked done), so the database
    decides. Times as in `update_tuning`; the loaded `Tuning` objects it changes follow."""
    if not tuning_ids:
        return 0
    now = utcnow()
    values: dict[str, Any] = {
        "status": status,
        "finished_at": now if status in FINISHED_TUNING_STATUSES else None,
    }
    if status == TuningStatus.RUNNING:
        values["started_at"] = func.coalesce(Tuning.started_at, now)
    if error is not None:
        values["error"] = error
    statement = (
        update(Tuning)
        .where(Tuning.id.in_(set(tuning_ids)), Tuning.status.in_(only_from))
        .values(values)
        .execution_options(synchronize_session="fetch")
    )
    return cast(CursorResult[Any], s.execute(statement)).rowcount


# Tuning groups


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


# Artifacts


def put_artifact(
    s: Session, *, data: bytes, kind: str, source: str | None, meta: Mapping[str, Any]
) -> str:
    """Store `data` under its sha256 and return that; storing the same bytes again is a no-op
    (the first kind, source and metadata stay: artifacts are immutable)."""
    sha256 = hashlib.sha256(data).hexdigest()
    _insert_if_absent(
        s,
        Artifact,
        {
            "sha256": sha256,
            "kind": kind,
            "data": data,
            "source": source,
            "meta": dict(meta),
            "size": len(data),
            "created_at": utcnow(),
        },
    )
    return sha256


def get_artifact(s: Session, sha256: str) -> Artifact | None:
    return s.get(Artifact, sha256)


def artifact_workloads(s: Session, sha256: str, *, limit: int) -> list[str]:
    """The keys of the workloads (at most `limit`) whose records have artifact `sha256`."""
    query = select(Record.workload_key).where(Record.artifact_sha256 == sha256).distinct()
    return list(s.scalars(query.order_by(Record.workload_key).limit(limit)))


def workload_has_artifact(s: Session, key: str, sha256: str) -> bool:
    """Whether a record of workload `key` has artifact `sha256`."""
    query = select(Record.id).where(Record.workload_key == key, Record.artifact_sha256 == sha256)
    return s.scalars(query.limit(1)).first() is not None


# Records


@dataclass(frozen=True, kw_only=True)
class NewRecord:
    """One measurement (or failure) to append: a `Record` row's fields but for what the store
    derives (its id, the lookup keys of its symbols and config, its creation time)."""

    workload_key: str
    target: str | Target  # complete: a record says where it ran
    symbols: Mapping[str, Any]
    tuning_id: int | None
    config: Mapping[str, Any]
    features: Sequence[float]
    feature_version: int
    status: RecordStatus
    latency_s: float | None  # needed by an `ok` record; any record may carry one
    latencies_s: Sequence[float]
    build_time_s: float | None
    max_error: float | None
    error_log: str | None
    machine: Mapping[str, Any]
    artifact_sha256: str | None
    created_at: datetime | None = None  # now; an imported record keeps its own


def device_identity(machine: Mapping[str, Any]) -> tuple[str, str | None, str | None]:
    """(device model, driver, toolkit) a fingerprint names (`worker.device.fingerprint`); a
    fingerprint older than these fields names the device `unknown`."""
    device = machine.get("device")
    driver, toolkit = machine.get("driver"), machine.get("toolkit")
    return (
        str(device) if device else UNKNOWN_DEVICE,
        None if driver is None else str(driver),
        None if toolkit is None else str(toolkit),
    )


def add_record(s: Session, new: NewRecord) -> Record:
    """Append `new`; ValueError for a record that cannot say where it ran (an incomplete
    target) or an `ok` one without its latency."""
    target_text = str(new.target)
    if ":" not in target_text:
        raise ValueError(f"a record needs a complete target, not {target_text!r}")
    if new.status == RecordStatus.OK and new.latency_s is None:
        raise ValueError("an ok record needs its latency")
    device, driver, toolkit = device_identity(new.machine)
    record = Record(
        workload_key=new.workload_key,
        target=target_text,
        symbols_key=canonical_json(dict(new.symbols)),
        tuning_id=new.tuning_id,
        config=dict(new.config),
        config_key=Space.key(dict(new.config)),
        features=[float(f) for f in new.features],
        feature_version=new.feature_version,
        status=new.status,
        latency_s=new.latency_s,
        latencies_s=[float(t) for t in new.latencies_s],
        build_time_s=new.build_time_s,
        max_error=new.max_error,
        error_log=new.error_log,
        machine=dict(new.machine),
        device=device,
        driver=driver,
        toolkit=toolkit,
        artifact_sha256=new.artifact_sha256,
        created_at=new.created_at or utcnow(),
    )
    s.add(record)
    s.flush()
    return record


def add_timings(record: Record, latencies_s: Sequence[float], max_error: float | None) -> None:
    """Give an `ok` record the repeats of another measurement of its kernel. Its latency is
    the least median of its measurements: a shared machine's neighbours only ever add time,
    so the quietest measurement is the truest (and a best can only get better)."""
    if record.status != RecordStatus.OK or not latencies_s:
        raise ValueError(f"record {record.id}: only an ok record gains timings, and some")
    record.latencies_s = [*record.latencies_s, *(float(t) for t in latencies_s)]
    record.latency_s = min(record.latency_s or math.inf, statistics.median(latencies_s))
    if max_error is not None:
        record.max_error = max(record.max_error or 0.0, max_error)


def demote(record: Record, status: RecordStatus, log: str) -> None:
    """An `ok` record whose kernel failed when measured again (`status`, why in `log`): right
    only sometimes, so never the best; its timings stay."""
    if record.status != RecordStatus.OK or status == RecordStatus.OK:
        raise ValueError(f"record {record.id}: only an ok record is demoted, to a failure")
    record.status = status
    record.error_log = f"measured again: {log}"


def get_records(s: Session, *, ids: Sequence[int]) -> dict[int, Record]:
    """The records with these ids, by id, in one query (ids that name none are left out)."""
    if not ids:
        return {}
    return {r.id: r for r in s.scalars(select(Record).where(Record.id.in_(set(ids))))}


def _records_query(
    *,
    workload_key: str | None,
    target: str | Target | None,
    status: RecordStatus | None,
    symbols: Mapping[str, Any] | None,
    config: Mapping[str, Any] | None,
    tuning_id: int | None,
    feature_version: int | None,
) -> Select[Record]:
    query = select(Record)
    if workload_key is not None:
        query = query.where(Record.workload_key == workload_key)
    if target is not None:
        query = query.where(_target_filter(Record.target, target))
    if status is not None:
        query = query.where(Record.status == status)
    if symbols is not None:
        query = query.where(Record.symbols_key == canonical_json(dict(symbols)))
    if config is not None:
        query = query.where(Record.config_key == Space.key(dict(config)))
    if tuning_id is not None:
        query = query.where(Record.tuning_id == tuning_id)
    if feature_version is not None:
        query = query.where(Record.feature_version == feature_version)
    return query


def best_record(
    s: Session,
    *,
    workload_key: str,
    target: str | Target,
    symbols: Mapping[str, Any] | None = None,
    device: str | None = None,
) -> Record | None:
    """The fastest `ok` record; wrong answers and failures never qualify, however fast.

    An incomplete `target` (`cuda`, `cpu`) means any architecture of that kind; `symbols=None`
    means any symbol values; `device`, if given, only records measured on that device model.
    Ties go to the older record.
    """
    query = _records_query(
        workload_key=workload_key,
        target=target,
        status=RecordStatus.OK,
        symbols=symbols,
        config=None,
        tuning_id=None,
        feature_version=None,
    )
    query = query.where(Record.latency_s.is_not(None)).order_by(Record.latency_s, Record.id)
    if device is not None:
        query = query.where(Record.device == device)
    return s.scalars(query.limit(1)).first()


@dataclass(frozen=True)
class DeviceBest:
    """The best record for a caller on `device`, and why it is not of that device (None when
    it is, or when no device was asked for)."""

    record: Record | None
    fallback: str | None


def best_for_device(
    s: Session,
    *,
    workload_key: str,
    target: str | Target,
    symbols: Mapping[str, Any] | None = None,
    device: str | None = None,
) -> DeviceBest:
    """The best record measured on the caller's `device` model; without one, the best of the
    target's arch on any device, saying so: two GPUs of one arch (an H100 PCIe and an SXM)
    differ enough that a kernel timed on the caller's own model is worth preferring."""
    if device is not None:
        own = best_record(
            s, workload_key=workload_key, target=target, symbols=symbols, device=device
        )
        if own is not None:
            return DeviceBest(own, None)
    best = best_record(s, workload_key=workload_key, target=target, symbols=symbols)
    if best is None or device is None or best.device == device:
        return DeviceBest(best, None)
    return DeviceBest(best, device_fallback(device, target, best.device))


def device_fallback(device: str, target: str | Target, measured_on: str) -> str:
    """The reason shown when a lookup for `device` answers with another device's record."""
    return f"no record measured on {device}; best on {target} measured on {measured_on}"


def dispatch_table(
    s: Session, workload_key: str, target: Target, device: str | None = None
) -> DispatchTable | None:
    """The best `ok` record of every symbol assignment measured for the workload on `target`
    (incomplete: any ISA or arch of its kind, as in `best_record`), in one query, as a
    dispatch table over the symbols' declared ranges; None without any such record (or
    workload). Entries are ordered by their symbol values. With `device`, an assignment
    measured on that device model takes its best from those records, and one that was not
    falls back to any device of the target, its `fallback` saying so."""
    workload = get_workload(s, workload_key)
    if workload is None:
        return None
    ranked = _records_query(
        workload_key=workload_key,
        target=target,
        status=RecordStatus.OK,
        symbols=None,
        config=None,
        tuning_id=None,
        feature_version=None,
    ).where(Record.latency_s.is_not(None))
    order: tuple[ColumnElement[Any], ...] = (Record.latency_s.expression, Record.id.expression)
    if device is not None:  # the caller's device model first
        order = (case((Record.device == device, 0), else_=1), *order)
    rank = func.row_number().over(partition_by=Record.symbols_key, order_by=order).label("rank")
    ranked_records = ranked.add_columns(rank).subquery()
    best = aliased(Record, ranked_records)
    records = list(s.scalars(select(best).where(ranked_records.c.rank == 1)))
    if not records:
        return None
    declared = TaskSignature.model_validate(workload.signature).symbols
    entries = [
        DispatchEntry(
            symbols=r.symbols,
            record=RecordView.model_validate(r),
            fallback=None
            if device is None or r.device == device
            else device_fallback(device, target, r.device),
        )
        for r in sorted(records, key=lambda r: [r.symbols.get(name, 0) for name in declared])
    ]
    return DispatchTable(
        workload_key=workload_key, target=str(target), ranges=dict(declared), entries=entries
    )


def list_records(
    s: Session,
    *,
    workload_key: str | None = None,
    target: str | Target | None = None,
    status: RecordStatus | None = None,
    symbols: Mapping[str, Any] | None = None,
    config: Mapping[str, Any] | None = None,
    tuning_id: int | None = None,
    feature_version: int | None = None,
    limit: int | None = 100,
    offset: int = 0,
) -> list[Record]:
    """Records in the order they were made, filtered by whatever is given (`target` as in
    `best_record`). `limit=None` returns them all (cost-model training)."""
    query = _records_query(
        workload_key=workload_key,
        target=target,
        status=status,
        symbols=symbols,
        config=config,
        tuning_id=tuning_id,
        feature_version=feature_version,
    )
    query = query.order_by(Record.id).limit(limit).offset(offset)
    return list(s.scalars(query))


def count_records(
    s: Session,
    *,
    workload_key: str | None = None,
    target: str | Target | None = None,
    status: RecordStatus | None = None,
    symbols: Mapping[str, Any] | None = None,
    config: Mapping[str, Any] | None = None,
    tuning_id: int | None = None,
    feature_version: int | None = None,
) -> int:
    """How many records `list_records` would return without a limit."""
    query = _records_query(
        workload_key=workload_key,
        target=target,
        status=status,
        symbols=symbols,
        config=config,
        tuning_id=tuning_id,
        feature_version=feature_version,
    )
    return s.scalar(select(func.count()).select_from(query.subquery())) or 0


def measured_config_keys(
    s: Session, *, workload_key: str, target: str | Target, symbols: Mapping[str, Any]
) -> set[str]:
    """`Space.key` of every config already measured here, whatever its outcome: a tuning skips
    them (a failed config fails again) and a resumed tuning picks up where it stopped.
    Pass a complete target: a config measured on sm_80 says little about sm_90."""
    query = select(Record.config_key).where(
        Record.workload_key == workload_key,
        _target_filter(Record.target, target),
        Record.symbols_key == canonical_json(dict(symbols)),
    )
    return set(s.scalars(query.distinct()))


# Cost models


def add_cost_model(
    s: Session, *, target: str | Target, feature_version: int, n_train: int, blob: bytes
) -> StoredCostModel:
    """Append a trained model; older ones stay (a model is never overwritten)."""
    model = StoredCostModel(
        target=str(target),
        feature_version=feature_version,
        n_train=n_train,
        blob=blob,
        created_at=utcnow(),
    )
    s.add(model)
    s.flush()
    return model


def latest_cost_model(
    s: Session, *, target: str | Target, feature_version: int
) -> StoredCostModel | None:
    """The newest model trained for exactly this target and feature version."""
    query = (
        select(StoredCostModel)
        .where(
            StoredCostModel.target == str(target),
            StoredCostModel.feature_version == feature_version,
        )
        .order_by(StoredCostModel.id.desc())
        .limit(1)
    )
    return s.scalars(query).first()


# Statistics


def count_tunings_by_status(s: Session) -> dict[TuningStatus, int]:
    """How many tunings have each status (absent: none); one grouped query."""
    query = select(Tuning.status, func.count()).group_by(Tuning.status)
    return {TuningStatus(status): n for status, n in s.execute(query)}


def count_records_by_status(s: Session) -> dict[RecordStatus, int]:
    """How many records have each status (absent: none); one grouped query."""
    query = select(Record.status, func.count()).group_by(Record.status)
    return {RecordStatus(status): n for status, n in s.execute(query)}
