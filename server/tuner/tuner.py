"""The tuner: one tuning's search loop, the same whichever executor runs the candidates.

    space = space_for(program, target); strategy seeded with the database's records
    measure the naive config first (the baseline), the space's seeds and its default, those
    the database does not already have
    loop: batch = strategy.propose(n) -> executor.run(batch) -> records (+ artifacts)
          -> strategy.notify -> tuning progress -> progress callback
    until the trial budget is spent, the time limit (if any) has passed, the space is
    exhausted or the tuning is cancelled; why it stopped early is kept (`stop_reason`)
    unless cancelled: the best few configs measured again (`confirmation`), then done

A model-guided strategy (the default) learns from the featurizer's vectors and the transfer
set (`featurizer`); the tuning's last model is saved in the database with its feature version
and training-set size.

Every measurement ever made for a workload, target and symbol values is reused: a config in
the database is never measured again, so running a tuning again (or a new tuning of the same
workload) resumes instead of starting over, and the best kernel is the best of all of them.

Many tasks, one budget (`Tuner.run_many`): each task is still its own tuning, stepped one batch
at a time by the same loop body (`_Run.step`) in the order a `TaskScheduler` picks. Each task's
tuning is registered with the whole budget as its `trials_requested` (the most it could get);
`trials_done` is what the scheduler gave it, and the tunings' `trials_done` add up to at most
the budget.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from tunehub.compiler import features, search
from tunehub.compiler.backend import compiler_backend
from tunehub.compiler.cost_model import XGBModel
from tunehub.compiler.program import load
from tunehub.compiler.space import space_for
from tunehub.compiler.space.space import Config, Space
from tunehub.schemas.record import RecordStatus, TuningStatus
from tunehub.schemas.target import Target
from tunehub.server.best import best_record
from tunehub.server.db.cost_models import add_cost_model
from tunehub.server.db.records import get_records, list_records
from tunehub.server.db.session import session_scope
from tunehub.server.db.tunings import get_tuning, move_tunings, update_tuning
from tunehub.server.db.workloads import get_workload
from tunehub.server.generations import BestGenerations
from tunehub.server.stalls import Stalls
from tunehub.server.tuner import confirmation
from tunehub.server.tuner.executor import Executor
from tunehub.server.tuner.featurizer import FeaturePool, Featurizer, learned, transfer_set
from tunehub.server.tuner.lease import Lease, LeaseLost
from tunehub.server.tuner.persistence import RecordContext, persist
from tunehub.server.tuner.registration import resolve_symbols
from tunehub.server.tuner.reporting import Progress, ProgressCallback, TuningSummary, summarize
from tunehub.server.tuner.scheduler import TaskScheduler
from tunehub.worker.jobs import CandidateRequest

# A tuning runs (or resumes) from any status but cancelled.
STARTABLE = tuple(status for status in TuningStatus if status != TuningStatus.CANCELLED)


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
    time_limit_s: float | None


# Why a tuning stopped before its trials when the space ran out.
SPACE_EXHAUSTED = "every valid config of the space is measured"


@dataclass(frozen=True)
class _Clock:
    """A wall-clock budget, from when a run starts. It is checked between batches, so a run
    measures at least one batch and ends at most one batch (and its confirmation) after its
    limit."""

    limit_s: float | None
    start: float = field(default_factory=time.monotonic)

    def passed(self) -> bool:
        return self.limit_s is not None and time.monotonic() - self.start >= self.limit_s

    def reason(self, done: int, trials: int) -> str:
        return f"time limit of {self.limit_s:g} s reached after {done} of {trials} trials"


class Tuner:
    """Runs tunings from the database through one executor.

    `batch_size` defaults to 2 candidates per parallel build slot (at least 8), so builds keep
    every core busy while a batch is small enough to re-plan from fresh results often.
    `threads` is the OpenMP thread count kernels are measured with. `repeats` and
    `min_repeat_s` set the measurement effort per candidate (timed batches, and the least
    duration of each; the defaults are the workers'): fewer, shorter batches trade latency
    precision for time, which suits tests and quick looks. `generations`, in the service, are
    bumped after every stored batch, so that the API's cached bests follow at once; `stalls`,
    in the service, lose the tuning's stall mark with it (`server.stalls`). A `lease`,
    in the service, is checked in the transaction that stores each batch: a tuner that lost
    its tunings to another stores nothing more (`lease.LeaseLost`). `feature_workers`
    processes extract the feature vectors a model-guided proposal scores (1: this process);
    they start with a tuning's first proposal and stop when `run` or `run_many` returns.
    `contenders`: how many of the best records a tuning measures again at its end, not
    counted as trials (`confirmation`; 0: none).
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
        stalls: Stalls | None = None,
        lease: Lease | None = None,
        feature_workers: int = 1,
        contenders: int = confirmation.CONTENDERS,
    ) -> None:
        self.sessions = sessions
        self.executor = executor
        self.threads = threads
        self.seed = seed
        self.batch_size = batch_size or max(8, 2 * executor.parallelism)
        self.repeats = repeats
        self.min_repeat_s = min_repeat_s
        self.generations = generations
        self.stalls = stalls
        self.lease = lease
        self.feature_pool = FeaturePool(feature_workers)
        self.contenders = contenders

    def run(self, tuning_id: int, progress: ProgressCallback | None = None) -> TuningSummary:
        """Run (or resume) tuning `tuning_id` to its budget and mark it done; on an internal
        error mark it failed, with the error, and re-raise. A cancelled tuning stops at the
        next batch boundary and stays cancelled; an interrupted one (Ctrl-C) is cancelled."""
        with self._guard([tuning_id]), self.feature_pool:
            job = self._start(tuning_id)
            if job is not None:
                run, clock = _Run(self, job), _Clock(job.time_limit_s)
                reason = None
                while run.done < job.trials and not self.cancelled(job.tuning_id):
                    if not run.step(min(self.batch_size, job.trials - run.done), progress):
                        reason = SPACE_EXHAUSTED
                        break
                    if clock.passed() and run.done < job.trials:
                        reason = clock.reason(run.done, job.trials)
                        break
                run.finish(reason)
        with session_scope(self.sessions) as s:
            return summarize(s, tuning_id)

    def run_many(
        self,
        tuning_ids: Sequence[int],
        weights: Sequence[float],
        total_trials: int,
        progress: ProgressCallback | None = None,
        scheduler: TaskScheduler | None = None,
        *,
        time_limit_s: float | None = None,
    ) -> list[TuningSummary]:
        """Run several tunings on one budget of `total_trials` (and of `time_limit_s`
        seconds, if given), a batch at a time, each batch to the task a `TaskScheduler` picks
        (weights: how many times each task runs in the model). Every tuning is marked done
        when the budget is spent, the time has passed or the scheduler stops; errors and
        interrupts mark them as `run` does."""
        clock = _Clock(time_limit_s)
        scheduler = scheduler or TaskScheduler(
            weights, total_trials=total_trials, batch_size=self.batch_size, seed=self.seed
        )
        with self._guard(tuning_ids), self.feature_pool:
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
                cancelled = n <= 0 or self.cancelled(run.job.tuning_id)
                ran = 0 if cancelled else run.step(n, progress)
                scheduler.record(i, ran, run.best_latency_s, exhausted=cancelled or ran < n)
                if clock.passed():
                    break
            reason = None
            if clock.passed() and scheduler.next_task() is not None:
                done = sum(run.done - run.job.trials_done for run in runs if run is not None)
                reason = clock.reason(done, total_trials)
            for run in runs:
                if run is not None:
                    run.finish(reason)
        with session_scope(self.sessions) as s:
            return [summarize(s, tuning_id) for tuning_id in tuning_ids]

    @contextmanager
    def _guard(self, tuning_ids: Sequence[int]) -> Iterator[None]:
        """Ctrl-C cancels the unfinished tunings, any other error fails them (and re-raises).
        Under a lease, a lost lease or a database that went away fails nothing: the tunings
        are another tuner's now, or will be once the lease runs out (and resume then)."""
        try:
            yield
        except KeyboardInterrupt:
            self._mark(tuning_ids, TuningStatus.CANCELLED, "interrupted")
            raise
        except (LeaseLost, OperationalError):
            if self.lease is None:
                self._mark(tuning_ids, TuningStatus.FAILED, traceback.format_exc())
            raise
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"
            self._mark(tuning_ids, TuningStatus.FAILED, error)
            raise

    def _mark(self, tuning_ids: Sequence[int], status: TuningStatus, error: str) -> None:
        with session_scope(self.sessions) as s:
            move_tunings(s, tuning_ids, status, error=error)

    def _start(self, tuning_id: int) -> _Job | None:
        """Mark the tuning running and read what it needs; None when it was cancelled."""
        with session_scope(self.sessions) as s:
            if not move_tunings(s, [tuning_id], TuningStatus.RUNNING, only_from=STARTABLE):
                if get_tuning(s, tuning_id) is None:
                    raise LookupError(f"no tuning {tuning_id}")
                return None
            tuning = get_tuning(s, tuning_id)
            assert tuning is not None  # just updated
            workload = get_workload(s, tuning.workload_key)
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
                time_limit_s=tuning.time_limit_s,
            )

    def cancelled(self, tuning_id: int) -> bool:
        """Re-read from the database: the API cancels a tuning by setting its status."""
        with session_scope(self.sessions) as s:
            tuning = get_tuning(s, tuning_id)
            return tuning is None or tuning.status == TuningStatus.CANCELLED


class _Run:
    """One tuning in progress, advanced a batch at a time: its space, strategy (and model),
    pending baseline and counters. `Tuner.run` steps one to its budget, `Tuner.run_many`
    steps several as a scheduler decides."""

    def __init__(self, tuner: Tuner, job: _Job) -> None:
        self.tuner, self.job = tuner, job
        program = load(job.signature)
        target = tuner.executor.resolve(job.target)
        symbols = resolve_symbols(program, job.symbols)
        self.context = RecordContext(job.workload_key, job.tuning_id, target, symbols)
        space = space_for(program, target)
        with session_scope(tuner.sessions) as s:
            records = list_records(
                s, workload_key=job.workload_key, target=target, symbols=symbols, limit=None
            )
            known = [(r.config, learned(r.status, r.latency_s)) for r in records]
            self.featurize = Featurizer(job.signature, target, symbols, tuner.feature_pool)
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
                # A target's zero-data estimate where it has a validated one (a CPU core's
                # roofline); elsewhere the first batch stays random until timings say otherwise.
                estimate=compiler_backend(target).zero_data_estimate(),
            )
        self.strategy = search.create(
            job.strategy, space, seed=tuner.seed, known=known, guide=self.guide
        )
        # The baseline goes first, once per workload, target and symbols; then the seeds and
        # the space's default (a fused softmax's default was never drawn by a short search).
        default = space.default()
        firsts = (space.naive(), *space.seeds(symbols), default)
        self.default_key = Space.key(default)  # a standing contender (`confirmation`)
        self.pending = [c for c in firsts if self.strategy.take(c)]
        self.done, self.failures = job.trials_done, 0
        self.best_latency_s: float | None = None

    def step(self, n: int, progress: ProgressCallback | None) -> int:
        """Measure one batch of at most `n` configs and persist it; the number measured, fewer
        than `n` only when the space has no unseen valid config left."""
        job, context = self.job, self.context
        batch, self.pending = self.pending[:n], self.pending[n:]
        batch += self.strategy.propose(n - len(batch))
        if not batch:
            return 0
        results = self.tuner.executor.run([self._request(c) for c in batch])
        with self._storing() as s:
            for config, result in zip(batch, results, strict=True):
                record = persist(s, context, config, result)
                self.featurize.remember(config, record.features, record.feature_version)
            self.done += len(batch)
            self._name_best(s)
        self.strategy.notify(
            [(c, learned(r.status, r.latency_s)) for c, r in zip(batch, results, strict=True)]
        )
        self.failures += sum(r.status is not RecordStatus.OK for r in results)
        if progress is not None:
            progress(
                Progress(job.tuning_id, self.done, job.trials, self.best_latency_s, self.failures)
            )
        return len(batch)

    def finish(self, reason: str | None = None) -> None:
        """Measure the contenders again, save the last cost model and mark the tuning done,
        if it is still running: one cancelled (or failed) meanwhile keeps that status
        (`db.tunings.move_tunings`). `reason`: why it stopped before its trials, kept for its
        status."""
        if not self.tuner.cancelled(self.job.tuning_id):
            self._confirm()
        with session_scope(self.tuner.sessions) as s:
            if reason is not None:
                update_tuning(s, self.job.tuning_id, stop_reason=reason)
            if self.guide is not None and self.guide.model.trained:
                add_cost_model(
                    s,
                    target=self.context.target,
                    feature_version=features.FEATURE_VERSION,
                    n_train=self.guide.model.n_train,
                    blob=self.guide.model.save(),
                )
            move_tunings(s, [self.job.tuning_id], TuningStatus.DONE)

    def _confirm(self) -> None:
        """Measure the best few records again, in one batch (`confirmation`)."""
        job, context = self.job, self.context
        with session_scope(self.tuner.sessions) as s:
            records = list_records(
                s,
                workload_key=job.workload_key,
                target=context.target,
                symbols=context.symbols,
                status=RecordStatus.OK,
                limit=None,
            )
            chosen = [
                (r.id, dict(r.config))
                for r in confirmation.contenders(records, self.tuner.contenders, self.default_key)
            ]
        if not chosen:
            return
        results = self.tuner.executor.run([self._request(config) for _, config in chosen])
        with self._storing() as s:
            found = get_records(s, ids=[record_id for record_id, _ in chosen])
            for (record_id, _), result in zip(chosen, results, strict=True):
                confirmation.settle(found[record_id], result)
            self._name_best(s)

    @contextmanager
    def _storing(self) -> Iterator[Session]:
        """The transaction that stores results: under the lease, if any; once it commits,
        the executor may drop them and the API may look again (the workload's generation is
        bumped)."""
        with session_scope(self.tuner.sessions) as s:
            if self.tuner.lease is not None:
                self.tuner.lease.check(s, self.job.tuning_id)
            yield s
        self.tuner.executor.stored()
        if self.tuner.stalls is not None:
            self.tuner.stalls.clear([self.job.tuning_id])
        if self.tuner.generations is not None:
            self.tuner.generations.bump(self.job.workload_key)

    def _name_best(self, s: Session) -> None:
        """Point the tuning at the workload's best record, with its trials done so far."""
        job, context = self.job, self.context
        best = best_record(
            s, workload_key=job.workload_key, target=context.target, symbols=context.symbols
        )
        update_tuning(
            s, job.tuning_id, trials_done=self.done, best_record_id=best.id if best else None
        )
        self.best_latency_s = best.latency_s if best else None

    def _request(self, config: Config) -> CandidateRequest:
        tuner, context = self.tuner, self.context
        return CandidateRequest(
            signature=self.job.signature,
            target=context.target.model_dump(),
            config=dict(config),
            symbols=context.symbols,
            threads=tuner.threads,
            repeats=tuner.repeats,
            min_repeat_s=tuner.min_repeat_s,
        )
