"""Data access for records: measurements (and failures) are appended and never deleted; an
`ok` one changes only when its kernel is measured again (`add_timings`, `demote`).

The functions flush but never commit: the caller owns the transaction (`session_scope`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Select, func, or_, select
from sqlalchemy.orm import InstrumentedAttribute, Session

from tunehub.schemas.record import UNKNOWN_DEVICE, RecordStatus
from tunehub.schemas.target import Target
from tunehub.server.db.models import Record, utcnow
from tunehub.server.db.sql import canonical_json


@dataclass(frozen=True, kw_only=True)
class NewRecord:
    """One measurement (or failure) to append: a `Record` row's fields but for what is derived
    on storing it (its id, the lookup key of its symbols, its device, its creation time)."""

    workload_key: str
    target: str | Target  # complete: a record says where it ran
    symbols: Mapping[str, Any]
    tuning_id: int | None
    config: Mapping[str, Any]
    # `Space.key(config)`: a config's key is its space's, so whoever made the config gives it.
    config_key: str
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
        config_key=new.config_key,
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


def _target_filter(column: InstrumentedAttribute[str], target: str | Target) -> ColumnElement[bool]:
    """`cuda:sm_90` matches itself; an incomplete `cuda` matches every `cuda:*`."""
    text = str(target)
    kind, _, detail = text.partition(":")
    if detail:
        return column == text
    return or_(column == kind, column.startswith(f"{kind}:", autoescape=True))


def records_query(
    *,
    workload_key: str | None,
    target: str | Target | None,
    status: RecordStatus | None,
    symbols: Mapping[str, Any] | None,
    config_key: str | None,
    tuning_id: int | None,
    feature_version: int | None,
) -> Select[Record]:
    """The records that match every filter given (None: any); an incomplete `target` (`cuda`,
    `cpu`) matches every target of its kind."""
    query = select(Record)
    if workload_key is not None:
        query = query.where(Record.workload_key == workload_key)
    if target is not None:
        query = query.where(_target_filter(Record.target, target))
    if status is not None:
        query = query.where(Record.status == status)
    if symbols is not None:
        query = query.where(Record.symbols_key == canonical_json(dict(symbols)))
    if config_key is not None:
        query = query.where(Record.config_key == config_key)
    if tuning_id is not None:
        query = query.where(Record.tuning_id == tuning_id)
    if feature_version is not None:
        query = query.where(Record.feature_version == feature_version)
    return query


def list_records(
    s: Session,
    *,
    workload_key: str | None = None,
    target: str | Target | None = None,
    status: RecordStatus | None = None,
    symbols: Mapping[str, Any] | None = None,
    config_key: str | None = None,
    tuning_id: int | None = None,
    feature_version: int | None = None,
    limit: int | None = 100,
    offset: int = 0,
) -> list[Record]:
    """Records in the order they were made, filtered by whatever is given (as in
    `records_query`). `limit=None` returns them all (cost-model training)."""
    query = records_query(
        workload_key=workload_key,
        target=target,
        status=status,
        symbols=symbols,
        config_key=config_key,
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
    config_key: str | None = None,
    tuning_id: int | None = None,
    feature_version: int | None = None,
) -> int:
    """How many records `list_records` would return without a limit."""
    query = records_query(
        workload_key=workload_key,
        target=target,
        status=status,
        symbols=symbols,
        config_key=config_key,
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
