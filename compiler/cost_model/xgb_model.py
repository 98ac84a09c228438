"""The XGBoost cost model: gradient-boosted trees on feature vectors, trained per batch.

Two objectives, both learning the order of configs *within* a workload:

* `regression` (the default): squared error on the rank-normalized throughput (`best /
  latency` per group, 0 for failures), as MetaSchedule does.
* `rank`: `rank:pairwise` with one query group per workload, as AutoTVM does. Only pairs
  inside a group produce gradients, so records of other workloads teach what makes a config
  faster than its siblings without their latencies ever being compared.

On the measured CPU spaces of `bench/search_replay.py` (docs/benchmarks/search_replay-*) the
two rank a workload's own held-out records about equally well, but regression transfers far
better: trained on other workloads only, it still finds most of the fastest configs, where
the pairwise model's top picks miss them, and with transfer the search reaches the best in
fewer trials on every workload. Boosting is small (a few hundred to a few thousand rows,
one thread): a retrain per batch costs tens of milliseconds, far below one measurement, and
leaves the machine's other core to the builds. `xgboost` is imported on first use, so
`compiler` imports without it.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from tunehub.compiler.cost_model.cost_model import (
    CostModel,
    Features,
    informative,
    normalized_throughput,
)

if TYPE_CHECKING:
    import xgboost

Objective = Literal["rank", "regression"]

_OBJECTIVES = {"rank": "rank:pairwise", "regression": "reg:squarederror"}


class XGBModel(CostModel):
    """Boosted trees over feature vectors; see the module doc for the objectives."""

    name = "xgb"

    def __init__(
        self,
        objective: Objective = "regression",
        *,
        rounds: int = 200,
        max_depth: int = 6,
        learning_rate: float = 0.1,
        seed: int = 0,
        threads: int = 1,
    ) -> None:
        if objective not in _OBJECTIVES:
            raise ValueError(f"unknown objective {objective!r} (one of {', '.join(_OBJECTIVES)})")
        self.objective = objective
        self.rounds = rounds
        self.params: dict[str, Any] = {
            "objective": _OBJECTIVES[objective],
            "max_depth": max_depth,
            "eta": learning_rate,
            "min_child_weight": 0,
            "subsample": 1.0,
            "seed": seed,
            "nthread": threads,
            "verbosity": 0,
        }
        if objective == "rank":
            # Pairs drawn uniformly within a group (the classic pairwise loss), not only
            # around the top: a search needs the whole order, the best included.
            self.params.update(lambdarank_pair_method="mean", lambdarank_num_pair_per_sample=8)
        self._booster: xgboost.Booster | None = None

    def fit(
        self,
        features: Features,
        latencies: Sequence[float | None],
        groups: Sequence[Hashable],
    ) -> None:
        import xgboost

        if len(latencies) == 0 or not informative(latencies, groups):
            self._booster, self.n_train = None, 0
            return
        x = np.asarray(features, dtype=np.float32)
        y = normalized_throughput(latencies, groups)
        if self.objective == "rank":
            # XGBoost wants query groups contiguous and their ids ascending.
            ids = {g: n for n, g in enumerate(dict.fromkeys(groups))}
            qid = np.array([ids[g] for g in groups])
            order = np.argsort(qid, kind="stable")
            data = xgboost.DMatrix(x[order], label=y[order], qid=qid[order])
        else:
            data = xgboost.DMatrix(x, label=y)
        booster = xgboost.train(self.params, data, num_boost_round=self.rounds)
        booster.set_attr(n_train=str(len(latencies)))
        self._booster, self.n_train = booster, len(latencies)

    def predict(self, features: Features) -> np.ndarray:
        import xgboost

        x = np.asarray(features, dtype=np.float32)
        if self._booster is None:
            return np.zeros(len(x))
        return np.asarray(self._booster.predict(xgboost.DMatrix(x)), dtype=np.float64)

    def save(self) -> bytes:
        if self._booster is None:
            raise ValueError("an untrained model has nothing to save")
        return bytes(self._booster.save_raw(raw_format="ubj"))

    def load(self, data: bytes) -> None:
        import xgboost

        booster = xgboost.Booster()
        booster.load_model(bytearray(data))
        self._booster, self.n_train = booster, int(booster.attr("n_train") or 0)
