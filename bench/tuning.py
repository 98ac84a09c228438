"""Tuning inside a benchmark: the real tuner and local executor on a throwaway database.

A benchmark tunes from scratch, so that no record of an earlier run makes a tuning look
cheaper than it is: a fresh SQLite file per run, migrated as the service's own database is.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from tunehub.schemas import TaskSignature
from tunehub.schemas.api import DEFAULT_STRATEGY
from tunehub.schemas.target import Target
from tunehub.server.db.session import make_engine, migrate, session_factory, session_scope
from tunehub.server.tuner import (
    Executor,
    LocalExecutor,
    SearchPlan,
    Tuner,
    TuningSummary,
    register_tuning,
    validate_task,
)
from tunehub.worker.device import cpu_cores
from tunehub.worker.jobs import CandidateRequest


def scratch_database(directory: Path) -> sessionmaker[Session]:
    """Sessions of a new, migrated SQLite database in `directory`."""
    url = f"sqlite:///{directory}/bench.db"
    migrate(url)
    return session_factory(make_engine(url))


def tune(
    sessions: sessionmaker[Session],
    executor: Executor,
    signature: TaskSignature,
    target: Target,
    *,
    trials: int,
    symbols: dict[str, int] | None = None,
    strategy: str = DEFAULT_STRATEGY,
    threads: int = 1,
    seed: int = 0,
) -> tuple[TuningSummary, float]:
    """Submit and run one tuning; its summary and the wall time of the run."""
    with session_scope(sessions) as s:
        tuning_id = register_tuning(
            s, validate_task(signature, symbols or {}), SearchPlan(strategy, trials), target=target
        )
    start = time.perf_counter()
    tuner = Tuner(sessions, executor, threads=threads, seed=seed, feature_workers=cpu_cores())
    summary = tuner.run(tuning_id)
    return summary, time.perf_counter() - start


@dataclass(frozen=True)
class Tuned:
    """A workload's best kernel from a tuning on this machine's CPU (one thread)."""

    signature: TaskSignature
    symbols: dict[str, int]
    config: dict[str, Any]
    latency_s: float  # as the tuning measured it

    def knobs(self) -> str:
        """The config as one line, for a report."""
        return ", ".join(f"{k}={v}" for k, v in sorted(self.config.items()))


def tune_cpu(
    document: dict[str, Any],
    trials: int,
    symbols: dict[str, int] | None = None,
    threads: int = 1,
) -> Tuned:
    """Tune a signature document (without its version) from scratch on this machine's CPU,
    on `threads` threads (one by default); exits where no candidate was verified."""
    signature = TaskSignature.model_validate({"version": 1, **document})
    with tempfile.TemporaryDirectory(prefix="tunehub-bench-") as tmp:
        sessions = scratch_database(Path(tmp))
        with LocalExecutor() as executor:
            target = executor.resolve(Target(kind="cpu"))
            summary, _ = tune(
                sessions,
                executor,
                signature,
                target,
                trials=trials,
                symbols=symbols,
                threads=threads,
            )
    if summary.best is None:
        raise SystemExit(f"{document['name']}: no verified kernel ({summary.failures})")
    return Tuned(signature, symbols or {}, dict(summary.best.config), summary.best.latency_s)


def median_latency(kernel: Tuned, repeats: int = 9, min_repeat_s: float = 0.05) -> float:
    """The kernel timed once more by the rule a peer's timer uses (the median of `repeats`
    batches of at least `min_repeat_s`), rather than the tuning's own bookkeeping (the lesser
    median where a contender was measured twice)."""
    with LocalExecutor(workers=1) as executor:
        target = executor.resolve(Target(kind="cpu"))
        (result,) = executor.run([_request(target, kernel, repeats, min_repeat_s)])
    if result.latency_s is None:
        raise SystemExit(f"timing {kernel.signature.name}: {result.log}")
    return result.latency_s


def retime(kernels: Sequence[Tuned], rounds: int = 7, threads: int = 1) -> list[float]:
    """Each kernel's fastest repeat over `rounds` rounds that time every kernel once in turn
    (on `threads` threads, one by default). A shared machine's speed drifts over minutes (a
    VM's AVX-512 Xeon ran one kernel at 0.55 and at 0.86 ms a few minutes apart) and its
    neighbours slow it in bursts
    (the same kernel timed twice in a row, seven rounds each, came out 0.20 and 0.28 ms by
    the fastest round's median), so kernels compared with each other are timed side by side,
    not minutes apart in their own tunings, and by their fastest repeat (a batch of calls of
    at least 10 ms): the one least slowed by the machine's neighbours."""
    with LocalExecutor(workers=1) as executor:
        target = executor.resolve(Target(kind="cpu"))
        requests = [_request(target, k, threads=threads) for _ in range(rounds) for k in kernels]
        results = executor.run(requests)
    times: list[list[float]] = [[] for _ in kernels]
    for n, result in enumerate(results):
        if result.latency_s is None:
            raise SystemExit(f"retiming {kernels[n % len(kernels)].signature.name}: {result.log}")
        times[n % len(kernels)].extend(result.latencies_s)
    return [min(t) for t in times]


def _request(
    target: Target,
    kernel: Tuned,
    repeats: int = CandidateRequest.repeats,
    min_repeat_s: float = CandidateRequest.min_repeat_s,
    threads: int = 1,
) -> CandidateRequest:
    """`kernel` to build and time for `target` (complete) on `threads` threads."""
    return CandidateRequest(
        signature=kernel.signature.model_dump(mode="json"),
        target=target.model_dump(),
        config=kernel.config,
        symbols=kernel.symbols,
        repeats=repeats,
        min_repeat_s=min_repeat_s,
        threads=threads,
    )
