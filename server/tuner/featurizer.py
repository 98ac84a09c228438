"""What the model-guided strategy learns from: feature vectors of configs, and the records of
other workloads it trains on besides the tuned one's.

The strategy's cost model is retrained after every batch on this workload's records and on the
newest records of other workloads of the same target (transfer: a new workload's first batch
is already chosen by a model).

Scoring a proposal extracts a few hundred vectors (each lowers the config to loop IR, 2 to 10
ms in Python), as much of a tuning's time as building and measuring on a small machine, while
the build pool sits idle. A `FeaturePool` spreads them over processes.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from functools import lru_cache
from typing import Any

from sqlalchemy.orm import Session

from tunehub.compiler import features, search
from tunehub.compiler.errors import InvalidConfig
from tunehub.compiler.ir import Program
from tunehub.compiler.program import load
from tunehub.compiler.space.space import Config, Space
from tunehub.schemas.record import RecordStatus
from tunehub.schemas.target import Target
from tunehub.server.db.records import count_records, list_records
from tunehub.server.db.sql import canonical_json
from tunehub.server.tuner.executor import spawn_pool

# Records of other workloads a cost model trains on besides the tuned one's: the newest ones.
# Enough to transfer (a few workloads' worth), few enough to retrain in well under a second.
TRANSFER_RECORDS = 2000

Vector = list[float] | None
MIN_SHARE = 16


class FeaturePool:
    """Processes that extract feature vectors, a share of the configs each (`spawn_pool`, as
    the builds'); with one worker, this process. A context manager; its processes start on
    first use."""

    def __init__(self, workers: int = 1) -> None:
        self.workers = workers
        self._pool: ProcessPoolExecutor | None = None

    def extract(
        self, signature: str, target: Target, symbols: dict[str, int], configs: Sequence[Config]
    ) -> list[Vector]:
        """The feature vector of each config, in order; None where the compiler rejects it."""
        if self.workers < 2 or len(configs) <= MIN_SHARE:
            return _extract_share(signature, str(target), symbols, configs)
        if self._pool is None:
            self._pool = spawn_pool(self.workers)
        # Two shares a process (a slow share keeps the others waiting less), of at least
        # MIN_SHARE configs (each share costs a round trip and a pickled signature).
        size = max(MIN_SHARE, -(-len(configs) // (2 * self.workers)))
        shares = [configs[n : n + size] for n in range(0, len(configs), size)]
        futures = [
            self._pool.submit(_extract_share, signature, str(target), symbols, share)
            for share in shares
        ]
        try:
            return [vector for future in futures for vector in future.result()]
        except BrokenProcessPool:  # a process died (memory, a signal): this one does it
            self.close()
            return _extract_share(signature, str(target), symbols, configs)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def __enter__(self) -> FeaturePool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@lru_cache(maxsize=8)
def _program(signature: str) -> Program:
    return load(signature)


def _extract_share(
    signature: str, target: str, symbols: dict[str, int], configs: Sequence[Config]
) -> list[Vector]:
    """A share of a pool's extraction (the program parsed once per process and workload)."""
    program, parsed = _program(signature), Target.parse(target)
    vectors: list[Vector] = []
    for config in configs:
        try:
            vectors.append(list(features.extract(program, parsed, config, symbols).values()))
        except InvalidConfig:
            vectors.append(None)
    return vectors


class Featurizer:
    """Feature vectors of one workload's configs: the vector a record stored, where one of
    this feature version exists, else extracted from the config by `pool`. A built record's
    vector holds what only the build knows (ptxas's register, spill and stack counts replace
    the estimates), so the model learns from the real values; unbuilt candidates are scored
    on the estimates."""

    def __init__(
        self,
        signature: dict[str, Any],
        target: Target,
        symbols: dict[str, int],
        pool: FeaturePool | None = None,
    ) -> None:
        self.signature = json.dumps(signature, sort_keys=True)
        self.target, self.symbols, self.pool = target, symbols, pool or FeaturePool()
        self._stored: dict[str, list[float]] = {}

    def remember(self, config: Config, vector: Sequence[float], version: int) -> None:
        if version == features.FEATURE_VERSION and vector:
            self._stored[Space.key(config)] = list(vector)

    def __call__(self, configs: Sequence[Config]) -> list[Vector]:
        vectors = [self._stored.get(Space.key(c)) for c in configs]
        missing = [c for c, v in zip(configs, vectors, strict=True) if v is None]
        found = iter(self.pool.extract(self.signature, self.target, self.symbols, missing))
        return [v if v is not None else next(found) for v in vectors]


def learned(status: RecordStatus, latency_s: float | None) -> float | None:
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
    total = count_records(s, target=target, feature_version=version)
    records = list_records(
        s,
        target=target,
        feature_version=version,
        limit=TRANSFER_RECORDS,
        offset=max(0, total - TRANSFER_RECORDS),
    )
    own = (workload_key, canonical_json(symbols))
    others = [r for r in records if (r.workload_key, r.symbols_key) != own]
    return search.TrainingSet(
        [list(r.features) for r in others],
        [learned(r.status, r.latency_s) for r in others],
        [f"{r.workload_key}/{r.symbols_key}" for r in others],
    )
