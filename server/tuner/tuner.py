"""The tuner: one tuning's search loop, the same whichever executor runs the candidates.

    space = space_for(program, target); strategy seeded with the database's records
    measure the naive config first (the baseline), the space's seeds and its default, those
    the database does not already have
    loop: batch = strategy.propose(n) -> executor.run(batch) -> records (+ artifacts)
          -> strategy.notify -> tuning progress -> progress callback
    until the trial budget is spent, the space is exhausted or the tuning is cancelled

The model-guided strategy (the default) gets a cost model that it retrains after every batch,
on this workload's records and on the newest records of other workloads of the same target
(transfer: a new workload's first batch is already chosen by a model); the tuning's last model
is saved in the database with its feature version and training-set size.

Every measurement ever made for a workload, target and symbol values is reused: a config in
the database is never measured again, so running a tuning again (or a new tuning of the same
workload) resumes instead of starting over, and the best kernel is the best of all of them.

Many tasks, one budget (`Tuner.run_many`): each task is still its own tuning, stepped one batch
at a time by the same loop body (`_Run.step`) in the order a `TaskScheduler` picks. Each task's
tuning is submitted with the whole budget as its `trials_requested` (the most it could get);
`trials_done` is what the scheduler gave it, and the tunings' `trials_done` add up to at most
the budget.
"""

from __future__ import annotations

import traceback
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from math import prod
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from compiler import features, search
from compiler.analysis import CONTRACTION, analyze
from compiler.canonical import workload_key
from compiler.cost_model import XGBModel, roofline
from compiler.ir import Program
from compiler.program import load
from compiler.space import space_for
from compiler.space.space import Config, Space
from schemas.record import RecordStatus, TuningStatus
from schemas.signature import TaskSignature
from schemas.target import Target
from server.db import store
from server.db.session import session_scope
from server.generations import BestGenerations
from server.tuner.executor import Executor
from server.tuner.scheduler import TaskScheduler
from worker.jobs import CandidateRequest, CandidateResult

# A symbolic workload is tuned for one assignment of its symbols; a symbol nobody named is
# tuned at this value (clamped into its declared range): large enough to exercise tiling,
# small enough that the naive baseline finishes quickly.
DEFAULT_SYMBOL_VALUE = 64

# Feature version of records without a feature vector (the candidate failed before lowering).
NO_FEATURES = 0

# Records of other workloads a cost model trains on besides the tuned one's: the newest ones.
# Enough to transfer (a few workloads' worth), few enough to retrain in well under a second.
TRANSFER_RECORDS = 2000

ARTIFACT_KINDS = {"cpu": "so", "cuda": "cubin"}

# A tuning runs (or resumes) from any status but cancelled.
STARTABLE = tuple(status for status in TuningStatus if status != TuningStatus.CANCELLED)


def resolve_symbols(program: Program, given: Mapping[str, int]) -> dict[str, int]:
    """The symbol values to tune for: `given`, checked against the declared ranges, with every
    symbol not given at DEFAULT_SYMBOL_VALUE (clamped). Raises ValueError on a bad name/value."""
    declared = {s.name: s for s in program.symbols}
    unknown = set(given) - set(declared)
    if unknown:
        names = ", ".join(declared) or "none"
        raise ValueError(f"unknown symbol {', '.join(sorted(unknown))} (declared: {names})")
    values = {}
    for name, sym in declared.items():
        value = given.get(name, min(max(DEFAULT_SYMBOL_VALUE, sym.min), sym.max))
        if not sym.min <= value <= sym.max:
            raise ValueError(f"symbol {name}={value} is outside its range [{sym.min}, {sym.max}]")
        values[name] = value
    return values


def submit(
    s: Session,
    *,
    signature: TaskSignature,
    target: Target,
    symbols: Mapping[str, int],
    trials: int,
    strategy: str,
    group_id: int | None = None,
    weight: float | None = None,
) -> int:
    """Register a tuning request (workload upserted, tuning queued) and return its id; a
    group's member names its group and its weight there.

    Validates everything a tuning could fail on late: the program, the strategy name and the
    symbol values (SignatureError / ValueError with a one-line message).
    """
    program = load(signature)
    if strategy not in search.STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r} (one of {', '.join(search.STRATEGIES)})")
    if trials < 1:
        raise ValueError(f"trials must be at least 1, not {trials}")
    key = workload_key(program)
    resolved = resolve_symbols(program, symbols)
    # The signature as submitted (not the canonical form): the tuner loads it back. A later
    # submitter's symbol names may differ; the tuning uses the stored signature's.
    store.upsert_workload(s, key=key, name=signature.name, signature=signature.model_dump())
    tuning = store.create_tuning(
        s,
        workload_key=key,
        target=target,
        symbols=store.workload_symbols(s, key, resolved),
        trials=trials,
        strategy=strategy,
        group_id=group_id,
        weight=weight,
    )
    return tuning.id


@dataclass(frozen=True)
class Progress:
    """Where a running tuning stands, after each batch."""

    tuning_id: int
    trials_done: int
    trials: int
    best_latency_s: float | None
    failures: int


@dataclass(frozen=True)
class Best:
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


ProgressCallback = Callable[[Progress], None]


@dataclass(frozen=True)
class _Job:
    """The tuning row's fields, detached from the session that read them."""

    tuning_id: int
    workload_key: str
    signature: dict[str, Any]
    target: Target
    symbols: dict[str, int]
    trials: int
    trials_done: int
    strategy: str


class Tuner:
    """Runs tunings from the database through one executor.

    `batch_size` defaults to 2 candidates per parallel build slot (at least 8), so builds keep
    every core busy while a batch is small enough to re-plan from fresh results often.
    `threads` is the OpenMP thread count kernels are measured with. `repeats` and
    `min_repeat_s` set the measurement effort per candidate (timed batches, and the least
    duration of each; the defaults are the workers'): fewer, shorter batches trade latency
    precision for time, which suits tests and quick looks. `generations`, in the service, are
    bumped after every stored batch, so that the API's cached bests follow at once.
    """

    def __init__(
        self,
        sessions: sessionmaker[Session],
        executor: Executor,
        *,
        threads: int = 1,
        seed: int = 0,
        batch_size: int | None = None,
        repeats: int = CandidateRequest.repeats,
        min_repeat_s: float = CandidateRequest.min_repeat_s,
        generations: BestGenerations | None = None,
    ) -> None:
        self.sessions = sessions
        self.executor = executor
        self.threads = threads
        self.seed = seed
        self.batch_size = batch_size or max(8, 2 * executor.parallelism)
        self.repeats = repeats
        self.min_repeat_s = min_repeat_s
        self.generations = generations

    def run(self, tuning_id: int, progress: ProgressCallback | None = None) -> TuningSummary:
        """Run (or resume) tuning `tuning_id` to its budget and mark it done; on an internal
        error mark it failed, with the error, and re-raise. A cancelled tuning stops at the
        next batch boundary and stays cancelled; an interrupted one (Ctrl-C) is cancelled."""
        with self._guard([tuning_id]):
            job = self._start(tuning_id)
            if job is not None:
                run = _Run(self, job)
                while run.done < job.trials and not self._cancelled(job.tuning_id):
                    if not run.step(min(self.batch_size, job.trials - run.done), progress):
                        break  # every valid config of the space is measured
                run.finish()
        with session_scope(self.sessions) as s:
            return summarize(s, tuning_id)

    def run_many(
        self,
        tuning_ids: Sequence[int],
        weights: Sequence[float],
        total_trials: int,
        progress: ProgressCallback | None = None,
        scheduler: TaskScheduler | None = None,
    ) -> list[TuningSummary]:
        """Run several tunings on one budget of `total_trials`, a batch at a time, each batch
        to the task a `TaskScheduler` picks (weights: how many times each task runs in the
        model). Every tuning is marked done when the budget is spent or the scheduler stops;
        errors and interrupts mark them as `run` does."""
        scheduler = scheduler or TaskScheduler(
            weights, total_trials=total_trials, batch_size=self.batch_size, seed=self.seed
        )
        with self._guard(tuning_ids):
            runs: list[_Run | None] = []
            for i, tuning_id in enumerate(tuning_ids):
                job = self._start(tuning_id)
                runs.append(None if job is None else _Run(self, job))
                if job is None:
                    scheduler.record(i, 0, None, exhausted=True)  # cancelled before it began
            while (task := scheduler.next_task()) is not None:
                i, run = task, runs[task]
                assert run is not None  # a cancelled task is exhausted
                n = min(scheduler.batch_for(i), run.job.trials - run.done)
                cancelled = n <= 0 or self._cancelled(run.job.tuning_id)
                ran = 0 if cancelled else run.step(n, progress)
                scheduler.record(i, ran, run.best_latency_s, exhausted=cancelled or ran < n)
            for run in runs:
                if run is not None:
                    run.finish()
        with session_scope(self.sessions) as s:
            return [summarize(s, tuning_id) for tuning_id in tuning_ids]

    @contextmanager
    def _guard(self, tuning_ids: Sequence[int]) -> Iterator[None]:
        """Ctrl-C cancels the unfinished tunings, any other error fails them (and re-raises)."""
        try:
            yield
        except KeyboardInterrupt:
            self._mark(tuning_ids, TuningStatus.CANCELLED, "interrupted")
            raise
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"
            self._mark(tuning_ids, TuningStatus.FAILED, error)
            raise

    def _mark(self, tuning_ids: Sequence[int], status: TuningStatus, error: str) -> None:
        with session_scope(self.sessions) as s:
            store.move_tunings(s, tuning_ids, status, error=error)

    def _start(self, tuning_id: int) -> _Job | None:
        """Mark the tuning running and read what it needs; None when it was cancelled."""
        with session_scope(self.sessions) as s:
            if not store.move_tunings(s, [tuning_id], TuningStatus.RUNNING, only_from=STARTABLE):
                if store.get_tuning(s, tuning_id) is None:
                    raise LookupError(f"no tuning {tuning_id}")
                return None
            tuning = store.get_tuning(s, tuning_id)
            assert tuning is not None  # just updated
            workload = store.get_workload(s, tuning.workload_key)
            assert workload is not None  # a foreign key
            return _Job(
                tuning_id=tuning.id,
                workload_key=tuning.workload_key,
                signature=dict(workload.signature),
                target=Target.parse(tuning.target),
                symbols=dict(tuning.symbols),
                trials=tuning.trials_requested,
                trials_done=tuning.trials_done,
                strategy=tuning.strategy,
            )

    def _cancelled(self, tuning_id: int) -> bool:
        """Re-read from the database: the API cancels a tuning by setting its status."""
        with session_scope(self.sessions) as s:
            tuning = store.get_tuning(s, tuning_id)
            return tuning is None or tuning.status == TuningStatus.CANCELLED

    def _request(
        self, job: _Job, target: Target, symbols: dict[str, int], config: Config
    ) -> CandidateRequest:
        return CandidateRequest(
            signature=job.signature,
            target=target.model_dump(),
            config=dict(config),
            symbols=symbols,
            threads=self.threads,
            repeats=self.repeats,
            min_repeat_s=self.min_repeat_s,
        )


class _Run:
    """One tuning in progress, advanced a batch at a time: its space, strategy (and model),
    pending baseline and counters. `Tuner.run` steps one to its budget, `Tuner.run_many`
    steps several as a scheduler decides."""

    def __init__(self, tuner: Tuner, job: _Job) -> None:
        self.tuner, self.job = tuner, job
        program = load(job.signature)
        self.target = target = tuner.executor.resolve(job.target)
        self.symbols = symbols = resolve_symbols(program, job.symbols)
        space = space_for(program, target)
        with session_scope(tuner.sessions) as s:
            records = store.list_records(
                s, workload_key=job.workload_key, target=target, symbols=symbols, limit=None
            )
            known = [(r.config, _learned(r.status, r.latency_s)) for r in records]
            self.featurize = Featurizer(program, target, symbols)
            for r in records:
                self.featurize.remember(r.config, r.features, r.feature_version)
        self.guide = None
        if search.guided(job.strategy):
            with session_scope(tuner.sessions) as s:
                prior = transfer_set(s, job.workload_key, target, symbols)
            self.guide = search.Guide(
                self.featurize,
                XGBModel(seed=tuner.seed),
                prior,
                # The zero-data estimate models a CPU core; on GPUs it is unvalidated, so
                # their first batch stays random until GPU timings say otherwise.
                estimate=roofline.estimate if target.kind == "cpu" else None,
            )
        self.strategy = search.create(
            job.strategy, space, seed=tuner.seed, known=known, guide=self.guide
        )
        # The baseline goes first, once per workload, target and symbols; then the seeds and
        # the space's default (a fused softmax's default was never drawn by a short search).
        firsts = (space.naive(), *space.seeds(), space.default())
        self.pending = [c for c in firsts if self.strategy.take(c)]
        self.done, self.failures = job.trials_done, 0
        self.best_latency_s: float | None = None

    def step(self, n: int, progress: ProgressCallback | None) -> int:
        """Measure one batch of at most `n` configs and persist it; the number measured, fewer
        than `n` only when the space has no unseen valid config left."""
        job, target, symbols = self.job, self.target, self.symbols
        batch, self.pending = self.pending[:n], self.pending[n:]
        batch += self.strategy.propose(n - len(batch))
        if not batch:
            return 0
        requests = [self.tuner._request(job, target, symbols, c) for c in batch]
        results = self.tuner.executor.run(requests)
        with session_scope(self.tuner.sessions) as s:
            for config, result in zip(batch, results, strict=True):
                _persist(s, job, target, symbols, config, result)
                if result.feature_version is not None:
                    vector = list(result.features.values())
                    self.featurize.remember(config, vector, int(result.feature_version))
            self.done += len(batch)
            best = store.best_record(
                s, workload_key=job.workload_key, target=target, symbols=symbols
            )
            store.update_tuning(
                s, job.tuning_id, trials_done=self.done, best_record_id=best.id if best else None
            )
            self.best_latency_s = best.latency_s if best else None
        if self.tuner.generations is not None:  # committed: now the API may look again
            self.tuner.generations.bump(job.workload_key)
        self.strategy.notify(
            [(c, _learned(r.status, r.latency_s)) for c, r in zip(batch, results, strict=True)]
        )
        self.failures += sum(r.status is not RecordStatus.OK for r in results)
        if progress is not None:
            progress(
                Progress(job.tuning_id, self.done, job.trials, self.best_latency_s, self.failures)
            )
        return len(batch)

    def finish(self) -> None:
        """Save the last cost model and mark the tuning done, if it is still running: one
        cancelled (or failed) meanwhile keeps that status (`store.move_tunings`)."""
        with session_scope(self.tuner.sessions) as s:
            if self.guide is not None and self.guide.model.trained:
                store.add_cost_model(
                    s,
                    target=self.target,
                    feature_version=features.FEATURE_VERSION,
                    n_train=self.guide.model.n_train,
                    blob=self.guide.model.save(),
                )
            store.move_tunings(s, [self.job.tuning_id], TuningStatus.DONE)


class Featurizer:
    """Feature vectors of one workload's configs: the vector a record stored, where one of
    this feature version exists, else extracted from the config. A built record's vector holds
    what only the build knows (ptxas's register, spill and stack counts replace the
    estimates), so the model learns from the real values; unbuilt candidates are scored on
    the estimates."""

    def __init__(self, program: Program, target: Target, symbols: dict[str, int]) -> None:
        self.program, self.target, self.symbols = program, target, symbols
        self._stored: dict[str, list[float]] = {}

    def remember(self, config: Config, vector: Sequence[float], version: int) -> None:
        if version == features.FEATURE_VERSION and vector:
            self._stored[Space.key(config)] = list(vector)

    def __call__(self, config: Config) -> list[float]:
        stored = self._stored.get(Space.key(config))
        if stored is not None:
            return stored
        return list(features.extract(self.program, self.target, config, self.symbols).values())


def _learned(status: RecordStatus, latency_s: float | None) -> float | None:
    """What a strategy learns from a result: its latency, or None for any kind of failure (a
    wrong answer's latency means nothing)."""
    return latency_s if status == RecordStatus.OK else None


def transfer_set(
    s: Session, workload_key: str, target: Target, symbols: dict[str, int]
) -> search.TrainingSet:
    """The newest TRANSFER_RECORDS records of this target with features of this version,
    less the tuned workload's own (the strategy learns those from `known`), grouped by
    workload and symbol values: a model only compares records within a group."""
    version = features.FEATURE_VERSION
    total = store.count_records(s, target=target, feature_version=version)
    records = store.list_records(
        s,
        target=target,
        feature_version=version,
        limit=TRANSFER_RECORDS,
        offset=max(0, total - TRANSFER_RECORDS),
    )
    own = (workload_key, store.canonical_json(symbols))
    others = [r for r in records if (r.workload_key, r.symbols_key) != own]
    return search.TrainingSet(
        [list(r.features) for r in others],
        [_learned(r.status, r.latency_s) for r in others],
        [f"{r.workload_key}/{r.symbols_key}" for r in others],
    )


def _persist(
    s: Session,
    job: _Job,
    target: Target,
    symbols: dict[str, int],
    config: Config,
    result: CandidateResult,
) -> None:
    """One record per result, failures included; the artifact with it when it ran correctly."""
    sha256 = None
    ok = result.status is RecordStatus.OK
    if ok and result.artifact is not None:
        sha256 = store.put_artifact(
            s,
            data=result.artifact,
            kind=ARTIFACT_KINDS[target.kind],
            source=result.source,
            meta=result.metadata,
        )
    store.add_record(
        s,
        workload_key=job.workload_key,
        target=target,
        symbols=symbols,
        tuning_id=job.tuning_id,
        config=config,
        features=list(result.features.values()),
        feature_version=NO_FEATURES
        if result.feature_version is None
        else int(result.feature_version),
        status=result.status,
        latency_s=result.latency_s,
        latencies_s=result.latencies_s,
        build_time_s=result.build_time_s,
        max_error=result.max_error,
        error_log=None if ok else result.log,
        machine=result.machine,
        artifact_sha256=sha256,
    )


def summarize(s: Session, tuning_id: int) -> TuningSummary:
    """The summary of tuning `tuning_id` as the database has it now."""
    tuning = store.get_tuning(s, tuning_id)
    if tuning is None:
        raise LookupError(f"no tuning {tuning_id}")
    records = store.list_records(s, tuning_id=tuning_id, limit=None)
    failures = Counter(str(r.status) for r in records if r.status != RecordStatus.OK)
    # Records name the complete target the tuning resolved to; take it from them.
    target = records[0].target if records else tuning.target
    symbols = dict(tuning.symbols)
    workload = store.get_workload(s, tuning.workload_key)
    assert workload is not None  # a foreign key
    program = load(workload.signature)
    best = store.best_record(s, workload_key=tuning.workload_key, target=target, symbols=symbols)
    baseline = None
    if records:
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
    )


def contraction_flops(program: Program, symbols: dict[str, int]) -> int | None:
    """Floating-point operations of the program's contractions (a multiply and an add per
    term), the usual GFLOP/s numerator; None when it has none (softmax, elementwise)."""
    total = 0
    for stage in analyze(program).stages:
        if stage.kind == CONTRACTION:
            points = prod(program.extent(e, symbols) for e in stage.shape)
            terms = prod(program.extent(r.extent, symbols) for r in stage.anchor.reduce_axes)
            total += 2 * points * terms
    return total or None


def _latency_of(
    s: Session, workload_key: str, target: str, symbols: dict[str, int], config: Config
) -> float | None:
    """The latency `config` measured here (None if it never ran correctly)."""
    key = Space.key(config)
    ok = store.list_records(
        s,
        workload_key=workload_key,
        target=target,
        symbols=symbols,
        status=RecordStatus.OK,
        limit=None,
    )
    return next((r.latency_s for r in ok if r.config_key == key), None)
