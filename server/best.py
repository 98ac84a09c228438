"""The best kernel of a workload, read from the records: the fastest verified record
(`best_record`), the caller's own device model preferred (`best_for_device`), and the best of
every symbol assignment measured as a dispatch table (`dispatch_table`).

A lookup for a device model that has no record of its own answers with another device's best
of the same target, saying so (`device_fallback`): two GPUs of one arch (an H100 PCIe and an
SXM) differ enough that a kernel timed on the caller's own model is worth preferring, but a
kernel of the arch beats none. The API answers these through its cache (`server.best_cache`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, case, func, select
from sqlalchemy.orm import Session, aliased

from tunehub.schemas.api import RecordView
from tunehub.schemas.dispatch import DispatchEntry, DispatchTable
from tunehub.schemas.record import RecordStatus
from tunehub.schemas.signature import TaskSignature
from tunehub.schemas.target import Target
from tunehub.server.db.models import Record
from tunehub.server.db.records import records_query
from tunehub.server.db.workloads import get_workload


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
    query = records_query(
        workload_key=workload_key,
        target=target,
        status=RecordStatus.OK,
        symbols=symbols,
        config_key=None,
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
    ranked = records_query(
        workload_key=workload_key,
        target=target,
        status=RecordStatus.OK,
        symbols=None,
        config_key=None,
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


def no_kernel(key: str, target: Target, symbols: Mapping[str, int] | None) -> str:
    """Why a known workload has no kernel to answer with."""
    where = f"{target}" + (f" with {_text(symbols)}" if symbols else "")
    return f"no verified kernel of workload {key} for {where} yet"


def _text(symbols: Mapping[str, int]) -> str:
    return ", ".join(f"{name}={value}" for name, value in sorted(symbols.items()))
