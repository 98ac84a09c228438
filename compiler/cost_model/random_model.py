"""A cost model that knows nothing: random scores. Model-guided search with it is a random
search through the same machinery, which makes it the control in tests."""

from __future__ import annotations

import json
from collections.abc import Hashable, Sequence

import numpy as np

from tunehub.compiler.cost_model.cost_model import CostModel, Features


class RandomModel(CostModel):
    name = "random"

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed
        self._rng = np.random.default_rng(seed)

    def fit(
        self,
        features: Features,
        latencies: Sequence[float | None],
        groups: Sequence[Hashable],
    ) -> None:
        self.n_train = len(latencies)

    def predict(self, features: Features) -> np.ndarray:
        return self._rng.random(len(features))

    def save(self) -> bytes:
        return json.dumps({"seed": self.seed, "n_train": self.n_train}).encode()

    def load(self, data: bytes) -> None:
        state = json.loads(data)
        self.seed, self.n_train = int(state["seed"]), int(state["n_train"])
        self._rng = np.random.default_rng(self.seed)
