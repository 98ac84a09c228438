"""The cost-model interface: scores candidate configs so that a search measures the promising
ones first.

A model is trained on records of one target, grouped by what was tuned (a workload at given
symbol values). Latencies of different workloads are not comparable (a conv2d and a matmul
differ by orders of magnitude), so what a model learns is the *order within a group*: the
training target is the rank-normalized throughput `best latency in the group / latency`, 1 for
the group's best and 0 for a failure (as TVM MetaSchedule does). Scores are therefore only
comparable between configs of one workload, which is all a search needs.

Lifecycle: `fit` from scratch on everything known (retraining on a few thousand rows costs
less than one measurement), `predict`, and `save`/`load` to keep a trained model as bytes in
the tuning database.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Sequence

import numpy as np

Features = Sequence[Sequence[float]] | np.ndarray
# Feature vectors (one per row) -> scores, higher = predicted faster, without any records.
Estimate = Callable[[np.ndarray], np.ndarray]


class CostModel(ABC):
    """Predicts which configs of a workload run faster (higher score = faster)."""

    name: str
    n_train = 0  # records the current model was trained on (0: untrained)

    @property
    def trained(self) -> bool:
        return self.n_train > 0

    @abstractmethod
    def fit(
        self,
        features: Features,
        latencies: Sequence[float | None],
        groups: Sequence[Hashable],
    ) -> None:
        """Train from scratch. `latencies[i]` is None when record i failed; `groups[i]` names
        what it tuned (records compare only within a group). A model with nothing to learn
        from (no group with two records and a success) stays or becomes untrained."""

    @abstractmethod
    def predict(self, features: Features) -> np.ndarray:
        """One score per row, higher = predicted faster; all equal when untrained."""

    @abstractmethod
    def save(self) -> bytes:
        """The trained model as bytes (`load` restores it)."""

    @abstractmethod
    def load(self, data: bytes) -> None:
        """Replace this model by one `save` produced."""


def normalized_throughput(
    latencies: Sequence[float | None], groups: Sequence[Hashable]
) -> np.ndarray:
    """Per record, `best latency of its group / its latency` (1 for the best), 0 if it failed."""
    best: dict[Hashable, float] = {}
    for latency, group in zip(latencies, groups, strict=True):
        if latency is not None and latency > 0:
            best[group] = min(best.get(group, latency), latency)
    return np.array(
        [
            best[g] / t if t is not None and t > 0 else 0.0
            for t, g in zip(latencies, groups, strict=True)
        ],
        dtype=np.float64,
    )


def informative(latencies: Sequence[float | None], groups: Sequence[Hashable]) -> bool:
    """Whether the records order anything: some group has two records and a success."""
    sizes: dict[Hashable, int] = {}
    succeeded: set[Hashable] = set()
    for latency, group in zip(latencies, groups, strict=True):
        sizes[group] = sizes.get(group, 0) + 1
        if latency is not None:
            succeeded.add(group)
    return any(sizes[g] > 1 for g in succeeded)
