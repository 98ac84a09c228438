"""Data access for the tuning database: keyword-only functions over a `Session`.

The functions flush but never commit: the caller owns the transaction (`session_scope`).
Nothing here deletes or overwrites a record, an artifact or a cost model; only a tuning's
progress fields change.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import ColumnElement, Select, func, or_, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import InstrumentedAttribute, Session

from compiler.space.space import Space
from schemas.record import RecordStatus, TuningStatus
from schemas.target import Target
from server.db.models import Artifact, CostModel, Record, Tuning, Workload, utcnow

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


def list_workloads(s: Session, *, limit: int = 100, offset: int = 0) -> list[Workload]:
    """Newest first."""
    query = select(Workload).order_by(Workload.created_at.desc(), Workload.key)
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
) -> Tuning:
    """A new tuning, queued."""
    tuning = Tuning(
        workload_key=workload_key,
        target=str(target),
        symbols=dict(symbols),
        symbols_key=canonical_json(dict(symbols)),
        trials_requested=trials,
        trials_done=0,
        strategy=strategy,
        status=TuningStatus.QUEUED,
        created_at=utcnow(),
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


def update_tuning(
    s: Session,
    tuning_id: int,
    *,
    status: TuningStatus | None = None,
    trials_done: int | None = None,
    best_record_id: int | None = None,
    error: str | None = None,
) -> Tuning:
    """Record a tuning's progress; arguments left None stay as they are.

    `started_at` is set the first time it becomes running, `finished_at` whenever it reaches
    done, failed or cancelled (and cleared if it is queued or run again, e.g. on resume).
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
    s.flush()
    return tuning


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


# Records


def add_record(
    s: Session,
    *,
    workload_key: str,
    target: str | Target,
    symbols: Mapping[str, Any],
    tuning_id: int | None,
    config: Mapping[str, Any],
    features: Sequence[float],
    feature_version: int,
    status: RecordStatus,
    latency_s: float | None,
    latencies_s: Sequence[float],
    build_time_s: float | None,
    max_error: float | None,
    error_log: str | None,
    machine: Mapping[str, Any],
    artifact_sha256: str | None,
) -> Record:
    """Append one measurement (or failure). `target` must be complete: a record says where it
    ran. Only `ok` records need a latency; any record may carry one."""
    target_text = str(target)
    if ":" not in target_text:
        raise ValueError(f"a record needs a complete target, not {target_text!r}")
    if status == RecordStatus.OK and latency_s is None:
        raise ValueError("an ok record needs its latency")
    record = Record(
        workload_key=workload_key,
        target=target_text,
        symbols_key=canonical_json(dict(symbols)),
        tuning_id=tuning_id,
        config=dict(config),
        config_key=Space.key(dict(config)),
        features=[float(f) for f in features],
        feature_version=feature_version,
        status=status,
        latency_s=latency_s,
        latencies_s=[float(t) for t in latencies_s],
        build_time_s=build_time_s,
        max_error=max_error,
        error_log=error_log,
        machine=dict(machine),
        artifact_sha256=artifact_sha256,
        created_at=utcnow(),
    )
    s.add(record)
    s.flush()
    return record


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
) -> Record | None:
    """The fastest `ok` record; wrong answers and failures never qualify, however fast.

    An incomplete `target` (`cuda`, `cpu`) means any architecture of that kind; `symbols=None`
    means any symbol values. Ties go to the older record.
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
    return s.scalars(query.limit(1)).first()


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
) -> CostModel:
    """Append a trained model; older ones stay (a model is never overwritten)."""
    model = CostModel(
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
) -> CostModel | None:
    """The newest model trained for exactly this target and feature version."""
    query = (
        select(CostModel)
        .where(CostModel.target == str(target), CostModel.feature_version == feature_version)
        .order_by(CostModel.id.desc())
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
