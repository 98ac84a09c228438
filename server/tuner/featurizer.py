"""What the model-guided strategy learns from: feature vectors of configs, and the records of
other workloads it trains on besides the tuned one's.

The strategy's cost model is retrained after every batch on this workload's records and on the
newest records of other workloads of the same target (transfer: a new workload's first batch
is already chosen by a model).
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy.orm import Session

from tunehub.compiler import features, search
from tunehub.compiler.ir import Program
from tunehub.compiler.space.space import Config, Space
from tunehub.schemas.record import RecordStatus
from tunehub.schemas.target import Target
from tunehub.server.db import store

# Records of other workloads a cost model trains on besides the tuned one's: the newest ones.
# Enough to transfer (a few workloads' worth), few enough to retrain in well under a second.
TRANSFER_RECORDS = 2000


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
        [learned(r.status, r.latency_s) for r in others],
        [f"{r.workload_key}/{r.symbols_key}" for r in others],
    )
