"""What a tuning reports: its progress after each batch, and its outcome as the CLI and the API
show it, read from the database.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.orm import Session

from tunehub.compiler.flops import contraction_flops
from tunehub.compiler.program import load
from tunehub.compiler.space import space_for
from tunehub.compiler.space.space import Config, Space
from tunehub.schemas.record import RecordStatus, TuningStatus
from tunehub.schemas.target import Target
from tunehub.server.best import best_record
from tunehub.server.db.counts import count_tuning_records_by_status
from tunehub.server.db.records import list_records
from tunehub.server.db.tunings import get_tuning
from tunehub.server.db.workloads import get_workload


@dataclass(frozen=True)
class Progress:
    """Where a running tuning stands, after each batch."""

    tuning_id: int
    trials_done: int
    trials: int
    best_latency_s: float | None
    failures: int


ProgressCallback = Callable[[Progress], None]


@dataclass(frozen=True)
class Best:
    """The fastest correct record of the tuned workload, target and symbol values."""

    record_id: int
    latency_s: float
    config: dict[str, Any]
    artifact_sha256: str | None


@dataclass(frozen=True)
class TuningSummary:
    """A tuning's outcome, as the CLI and the API report it.

    `best` and `baseline_latency_s` (the naive config) come from every record of this workload,
    target and symbols, not only this tuning's: that is the kernel a client would get.
    """

    tuning_id: int
    workload_key: str
    target: str
    symbols: dict[str, int]
    strategy: str
    status: TuningStatus
    trials: int
    trials_requested: int
    baseline_latency_s: float | None
    best: Best | None
    failures: dict[str, int] = field(default_factory=dict)
    error: str | None = None
    flops: int | None = None  # of the contractions (2 per multiply-add); None without any
    stop_reason: str | None = None  # why it ended before its trials (a time limit, the space)


def summarize(s: Session, tuning_id: int) -> TuningSummary:
    """The summary of tuning `tuning_id` as the database has it now."""
    tuning = get_tuning(s, tuning_id)
    if tuning is None:
        raise LookupError(f"no tuning {tuning_id}")
    # Counted and looked up in the database, not by loading every record: the dashboard's
    # live page summarizes a running tuning after each batch.
    first = list_records(s, tuning_id=tuning_id, limit=1)
    failures = {
        str(status): n
        for status, n in count_tuning_records_by_status(s, tuning_id).items()
        if status != RecordStatus.OK
    }
    # Records name the complete target the tuning resolved to; take it from them.
    target = first[0].target if first else tuning.target
    symbols = dict(tuning.symbols)
    workload = get_workload(s, tuning.workload_key)
    assert workload is not None  # a foreign key
    program = load(workload.signature)
    best = best_record(s, workload_key=tuning.workload_key, target=target, symbols=symbols)
    baseline = None
    if first:
        naive = space_for(program, Target.parse(target)).naive()
        baseline = _latency_of(s, tuning.workload_key, target, symbols, naive)
    return TuningSummary(
        tuning_id=tuning.id,
        workload_key=tuning.workload_key,
        target=target,
        symbols=symbols,
        strategy=tuning.strategy,
        status=TuningStatus(tuning.status),
        trials=tuning.trials_done,
        trials_requested=tuning.trials_requested,
        baseline_latency_s=baseline,
        best=None
        if best is None or best.latency_s is None
        else Best(best.id, best.latency_s, dict(best.config), best.artifact_sha256),
        failures=dict(sorted(failures.items())),
        error=tuning.error,
        flops=contraction_flops(program, symbols),
        stop_reason=tuning.stop_reason,
    )


def _latency_of(
    s: Session, workload_key: str, target: str, symbols: dict[str, int], config: Config
) -> float | None:
    """The latency `config` measured here (None if it never ran correctly)."""
    key = Space.key(config)
    ok = list_records(
        s,
        workload_key=workload_key,
        target=target,
        symbols=symbols,
        status=RecordStatus.OK,
        config_key=key,
        limit=1,
    )
    return ok[0].latency_s if ok else None
