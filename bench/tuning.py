"""Tuning inside a benchmark: the real tuner and local executor on a throwaway database.

A benchmark tunes from scratch, so that no record of an earlier run makes a tuning look
cheaper than it is: a fresh SQLite file per run, migrated as the service's own database is.
"""

from __future__ import annotations

import time
from pathlib import Path

from sqlalchemy.orm import Session, sessionmaker

from tunehub.schemas import TaskSignature
from tunehub.schemas.api import DEFAULT_STRATEGY
from tunehub.schemas.target import Target
from tunehub.server.db.session import make_engine, migrate, session_factory, session_scope
from tunehub.server.tuner import Executor, Tuner, TuningSummary, register_tuning


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
            s,
            signature=signature,
            target=target,
            symbols=symbols or {},
            trials=trials,
            strategy=strategy,
        )
    start = time.perf_counter()
    summary = Tuner(sessions, executor, threads=threads, seed=seed).run(tuning_id)
    return summary, time.perf_counter() - start
