"""What each dashboard page shows, assembled from the database and Redis: plain dataclasses of
display-ready values, so the templates only lay them out (and escape them).

Every page reads a bounded number of queries whatever its number of rows (`queries`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from redis import Redis
from rq import Queue
from rq.registry import StartedJobRegistry
from sqlalchemy.orm import Session

from tunehub.schemas.record import RecordStatus, TuningStatus
from tunehub.schemas.signature import TaskSignature
from tunehub.schemas.target import Target
from tunehub.server.best import dispatch_table
from tunehub.server.db.counts import count_tunings_by_status
from tunehub.server.db.models import Record, Tuning, Workload
from tunehub.server.db.records import get_records
from tunehub.server.db.tunings import ACTIVE_TUNING_STATUSES, list_tunings
from tunehub.server.db.workloads import list_workloads
from tunehub.server.stalls import Stalls, stalled_reasons
from tunehub.server.tuner.reporting import summarize
from tunehub.server.tuner.service import living_tuners
from tunehub.server.ui import format, queries
from tunehub.server.ui.chart import Chart, curve
from tunehub.worker.registry import list_workers

# The newest tunings and workloads a list page shows, and the newest records a tuning's.
PAGE_SIZE = 50
RECORDS_SHOWN = 200
# A worker whose heartbeat is older than this is shown as late (it expires a little later).
LATE_HEARTBEAT_S = 15.0


@dataclass(frozen=True)
class TuningRow:
    id: int
    workload: str  # its name
    workload_key: str
    target: str
    symbols: str
    strategy: str
    status: str
    trials_done: int
    trials_total: int
    best: str
    created: str
    group_id: int | None
    stalled: str | None  # why its tuner cannot advance it now (`server.stalls`)

    @property
    def percent(self) -> int:
        return min(100, round(100 * self.trials_done / max(1, self.trials_total)))


@dataclass(frozen=True)
class RecordRow:
    trial: int
    id: int
    target: str
    symbols: str
    status: str
    ok: bool
    latency: str
    config: str
    build_time: str
    max_error: str
    log: str
    artifact: str | None
    created: str


@dataclass(frozen=True)
class TuningsPage:
    tunings: list[TuningRow]
    more: bool  # older ones follow


@dataclass(frozen=True)
class TuningPage:
    tuning: TuningRow
    active: bool
    error: str | None
    started: str
    elapsed: str
    naive: str
    speedup: str | None
    failures: dict[str, int]
    by_trial: Chart
    by_time: Chart
    records: list[RecordRow]  # newest first
    records_total: int


@dataclass(frozen=True)
class WorkloadRow:
    key: str
    name: str
    created: str
    best: list[RecordRow]  # one per target


@dataclass(frozen=True)
class WorkloadsPage:
    workloads: list[WorkloadRow]
    more: bool  # older ones follow


@dataclass(frozen=True)
class DispatchRow:
    symbols: str
    record: RecordRow


@dataclass(frozen=True)
class TargetTable:
    target: str
    best: RecordRow
    dispatch: list[DispatchRow]


@dataclass(frozen=True)
class WorkloadPage:
    key: str
    name: str
    symbols: str  # the declared ranges
    targets: list[TargetTable]
    tunings: list[TuningRow]


@dataclass(frozen=True)
class WorkerRow:
    name: str
    host: str
    pid: int
    targets: str
    queues: str
    threads: int
    started: str
    heartbeat: str
    heartbeat_age: str
    late: bool


@dataclass(frozen=True)
class QueueRow:
    name: str
    queued: int
    started: int


@dataclass(frozen=True)
class WorkersPage:
    redis: bool  # False: the server has no Redis, so no workers and no queues
    workers: list[WorkerRow]
    queues: list[QueueRow]
    tuners: list[str]  # the living tuner daemons' names
    tunings: QueueRow  # the tuners' queue: the database's queued and running tunings


def tunings_page(s: Session, stalls: Stalls | None, *, offset: int = 0) -> TuningsPage:
    """The newest tunings from `offset` on, with their progress and best so far."""
    tunings = list_tunings(s, limit=PAGE_SIZE + 1, offset=offset)
    return TuningsPage(tuning_rows(s, tunings[:PAGE_SIZE], stalls), len(tunings) > PAGE_SIZE)


def tuning_rows(s: Session, tunings: Sequence[Tuning], stalls: Stalls | None) -> list[TuningRow]:
    """Rows of `tunings`: their workloads' names and best records in one query each, the
    stall marks of the running ones in one Redis call."""
    names = queries.workload_names(s, [t.workload_key for t in tunings])
    best = get_records(s, ids=[t.best_record_id for t in tunings if t.best_record_id])
    stalled = stalled_reasons(stalls, tunings)
    return [
        TuningRow(
            id=t.id,
            workload=names.get(t.workload_key, t.workload_key[:12]),
            workload_key=t.workload_key,
            target=t.target,
            symbols=format.symbols(t.symbols),
            strategy=t.strategy,
            status=str(t.status),
            trials_done=t.trials_done,
            trials_total=t.trials_requested,
            best=format.latency(_latency(best.get(t.best_record_id or 0))),
            created=format.timestamp(t.created_at),
            group_id=t.group_id,
            stalled=stalled.get(t.id),
        )
        for t in tunings
    ]


def tuning_page(
    s: Session, tuning: Tuning, stalls: Stalls | None, *, now: datetime | None = None
) -> TuningPage:
    """A tuning's progress, its curves against trials and wall time with the naive baseline,
    and its newest records."""
    now = now or datetime.now(UTC)
    summary = summarize(s, tuning.id)
    trials = queries.trials(s, tuning.id)
    start = tuning.started_at or (trials[0].created_at if trials else tuning.created_at)
    end = tuning.finished_at or (now if _is_active(tuning) else None)
    latencies = [t.latency_s if t.status == RecordStatus.OK else None for t in trials]
    baselines = []
    if summary.baseline_latency_s is not None:
        baselines.append(("naive", summary.baseline_latency_s))
    by_trial = curve(
        [float(i) for i in range(1, len(trials) + 1)],
        latencies,
        x_label="trial",
        x_format=lambda x: f"{x:.0f}",
        baselines=baselines,
    )
    by_time = curve(
        [max(0.0, (t.created_at - start).total_seconds()) for t in trials],
        latencies,
        x_label="wall time since the tuning started",
        x_format=format.duration,
        baselines=baselines,
    )
    best = summary.best.latency_s if summary.best else None
    speedup = None
    if best and summary.baseline_latency_s:
        speedup = f"{summary.baseline_latency_s / best:.3g}x"
    newest = queries.newest_records(s, tuning.id, trials[-1].id, RECORDS_SHOWN) if trials else []
    return TuningPage(
        tuning=tuning_rows(s, [tuning], stalls)[0],
        active=_is_active(tuning),
        error=tuning.error.splitlines()[0] if tuning.error else None,
        started=format.timestamp(tuning.started_at),
        elapsed="—" if end is None else format.duration((end - start).total_seconds()),
        naive=format.latency(summary.baseline_latency_s),
        speedup=speedup,
        failures=summary.failures,
        by_trial=by_trial,
        by_time=by_time,
        records=[_record_row(r, len(trials) - i) for i, r in enumerate(newest)],
        records_total=len(trials),
    )


def workloads_page(s: Session, *, offset: int = 0) -> WorkloadsPage:
    """The newest workloads from `offset` on, with the best kernel of each on every target."""
    found = list_workloads(s, limit=PAGE_SIZE + 1, offset=offset)
    workloads = found[:PAGE_SIZE]
    best = queries.best_per_target(s, [w.key for w in workloads])
    rows = [
        WorkloadRow(
            key=w.key,
            name=w.name,
            created=format.timestamp(w.created_at),
            best=[_record_row(r) for r in best.get(w.key, [])],
        )
        for w in workloads
    ]
    return WorkloadsPage(rows, len(found) > PAGE_SIZE)


def workload_page(s: Session, workload: Workload, stalls: Stalls | None) -> WorkloadPage:
    """A workload's best kernel and dispatch table on each target, and its tunings: a few
    queries per target it was measured on."""
    declared = TaskSignature.model_validate(workload.signature).symbols
    tables = []
    for target in queries.record_targets(s, workload.key):
        table = dispatch_table(s, workload.key, Target.parse(target))
        if table is None:  # nothing correct on this target yet
            continue
        dispatch = [
            DispatchRow(format.symbols(e.symbols), _record_row(e.record)) for e in table.entries
        ]
        fastest = min(table.entries, key=lambda e: (e.record.latency_s or 0.0, e.record.id))
        tables.append(TargetTable(target, _record_row(fastest.record), dispatch))
    return WorkloadPage(
        key=workload.key,
        name=workload.name,
        symbols=", ".join(f"{n} in [{d.min}, {d.max}]" for n, d in declared.items()) or "—",
        targets=tables,
        tunings=tuning_rows(s, list_tunings(s, limit=PAGE_SIZE, workload_key=workload.key), stalls),
    )


def workers_page(s: Session, redis: Redis | None, *, now: datetime | None = None) -> WorkersPage:
    """The living workers with their heartbeats, the depth of every RQ queue, and the tuners
    with their queue (the tunings the database holds queued and running)."""
    counts = count_tunings_by_status(s)
    tunings = QueueRow(
        "tunings", counts.get(TuningStatus.QUEUED, 0), counts.get(TuningStatus.RUNNING, 0)
    )
    if redis is None:
        return WorkersPage(False, [], [], [], tunings)
    now = now or datetime.now(UTC)
    workers = []
    for w in list_workers(redis):
        age = max(0.0, (now - w.last_heartbeat).total_seconds())
        workers.append(
            WorkerRow(
                name=w.name,
                host=w.host,
                pid=w.pid,
                targets=", ".join(w.targets),
                queues=", ".join(w.queues),
                threads=w.threads,
                started=format.timestamp(w.started_at),
                heartbeat=format.timestamp(w.last_heartbeat),
                heartbeat_age=format.duration(age),
                late=age > LATE_HEARTBEAT_S,
            )
        )
    queues = sorted(Queue.all(connection=redis), key=lambda q: q.name)
    # Counted without RQ's cleanup: a page that reads should not move jobs between registries.
    rows = [
        QueueRow(q.name, q.count, StartedJobRegistry(queue=q).get_job_count(cleanup=False))
        for q in queues
    ]
    return WorkersPage(True, workers, rows, living_tuners(redis), tunings)


class _RecordFields(Protocol):
    """What a row shows of a record: a database row's fields, or an API view's."""

    @property
    def id(self) -> int: ...
    @property
    def target(self) -> str: ...
    @property
    def symbols(self) -> Mapping[str, Any]: ...
    @property
    def status(self) -> RecordStatus: ...
    @property
    def latency_s(self) -> float | None: ...
    @property
    def config(self) -> Mapping[str, Any]: ...
    @property
    def build_time_s(self) -> float | None: ...
    @property
    def max_error(self) -> float | None: ...
    @property
    def error_log(self) -> str | None: ...
    @property
    def artifact_sha256(self) -> str | None: ...
    @property
    def created_at(self) -> datetime: ...


def _record_row(record: _RecordFields, trial: int = 0) -> RecordRow:
    return RecordRow(
        trial=trial,
        id=record.id,
        target=record.target,
        symbols=format.symbols(record.symbols),
        status=str(record.status),
        ok=record.status == RecordStatus.OK,
        latency=format.latency(record.latency_s),
        config=format.config(record.config),
        build_time=format.duration(record.build_time_s) if record.build_time_s else "—",
        max_error="—" if record.max_error is None else f"{record.max_error:.2g}",
        log=format.excerpt(record.error_log),
        artifact=record.artifact_sha256,
        created=format.timestamp(record.created_at),
    )


def _latency(record: Record | None) -> float | None:
    return None if record is None else record.latency_s


def _is_active(tuning: Tuning) -> bool:
    return tuning.status in ACTIVE_TUNING_STATUSES
