"""Model-guided search: evolve many candidates, let the cost model pick the few to measure.

A measurement costs seconds; scoring a candidate costs milliseconds (feature extraction lowers
to loop IR, renders and compiles nothing). So each `propose(n)` builds a population of a few
hundred unseen configs (children of the fastest measured ones, by crossover and mutation, plus
uniform samples), then for a few generations mutates the model's current favourites and scores
them too, and finally measures the top-scored. A fraction `explore` of every batch is drawn
uniformly at random (epsilon-greedy), so a wrong model cannot confine the search to what it
already believes. This is TVM MetaSchedule's evolutionary search with its XGBoost model,
without the C++ plumbing.

The model is retrained from scratch after every batch on everything measured here plus the
guide's `prior`: records of other workloads of the same target (transfer). With a prior, even
the first batch is chosen by the model; without one, batches are random until two records of
this workload can be compared.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from compiler.cost_model import CostModel, XGBModel
from compiler.errors import InvalidConfig
from compiler.search.evolutionary import EvolutionarySearch
from compiler.search.strategy import Result
from compiler.space.space import Config, Space

Featurize = Callable[[Config], Sequence[float]]

# The group of this workload's own records; other workloads' groups come with the prior.
_OWN = "\0own"


@dataclass(frozen=True)
class TrainingSet:
    """Records of other workloads (feature vectors, latency or None, group per record)."""

    features: list[list[float]] = field(default_factory=list)
    latencies: list[float | None] = field(default_factory=list)
    groups: list[str] = field(default_factory=list)


def knob_features(space: Space) -> Featurize:
    """Each knob's position among its candidate values: features for any space, without a
    program (AutoTVM's 'knob' features). The tuner passes program features instead."""
    index = {name: {v: n for n, v in enumerate(values)} for name, values in space.knobs.items()}
    return lambda config: [float(index[name][config[name]]) for name in space.knobs]


@dataclass
class Guide:
    """What a model-guided search needs besides the space: how to featurize a config, the
    model to train, and records of other workloads to train it on too."""

    featurize: Featurize
    model: CostModel = field(default_factory=XGBModel)
    prior: TrainingSet = field(default_factory=TrainingSet)


class ModelGuidedSearch(EvolutionarySearch):
    """Evolutionary candidates, scored by a cost model; see the module doc."""

    candidates = 256  # scored per proposal, before the generations
    generations = 2
    elite = 32  # favourites mutated per generation
    explore = 0.15

    def __init__(
        self,
        space: Space,
        *,
        seed: int = 0,
        known: Iterable[Result] = (),
        guide: Guide | None = None,
    ) -> None:
        self.guide = guide or Guide(knob_features(space))
        self._features: list[Sequence[float]] = []
        self._latencies: list[float | None] = []
        super().__init__(space, seed=seed, known=known)  # notifies `known`: the first fit

    def notify(self, results: list[Result]) -> None:
        super().notify(results)
        for config, latency in results:
            vector = self._vector(config)
            if vector is not None:
                self._features.append(vector)
                self._latencies.append(latency)
        prior = self.guide.prior
        self.guide.model.fit(
            [*prior.features, *self._features],
            [*prior.latencies, *self._latencies],
            [*prior.groups, *[_OWN] * len(self._latencies)],
        )

    def propose(self, n: int) -> list[Config]:
        if not self.guide.model.trained:
            return self.random_configs(n)
        greedy = n - round(n * self.explore)
        picked: list[Config] = []
        for config in self._ranked():
            if len(picked) == greedy:
                break
            if self.take(config):
                picked.append(config)
        return picked + self.random_configs(n - len(picked))

    def _ranked(self) -> list[Config]:
        """Unseen valid candidates, best-scored first."""
        pool: dict[str, Config] = {}
        scores: dict[str, float] = {}

        def score(configs: Iterable[Config]) -> None:
            fresh: dict[str, Config] = {}
            vectors = []
            for config in configs:
                key = self.space.key(config)
                if key in pool or key in fresh or self.seen(config):
                    continue
                vector = self._vector(config)
                if vector is not None:
                    fresh[key] = config
                    vectors.append(vector)
            if fresh:
                predicted = self.guide.model.predict(np.asarray(vectors, dtype=np.float64))
                scores.update(zip(fresh, predicted.tolist(), strict=True))
                pool.update(fresh)

        score(self._child() for _ in range(self.candidates))
        for _ in range(self.generations):
            favourites = sorted(pool, key=scores.__getitem__, reverse=True)[: self.elite]
            score(self.space.mutate(pool[key], self.rng) for key in favourites)
        return [pool[key] for key in sorted(pool, key=scores.__getitem__, reverse=True)]

    def _vector(self, config: Config) -> Sequence[float] | None:
        """The config's features; None when it is not valid in the space as it is now (a
        record from an older space) or the compiler rejects it while lowering."""
        if self.space.check(config) is not None:
            return None
        try:
            return self.guide.featurize(config)
        except InvalidConfig:
            return None

    def _child(self) -> Config:
        """Half bred from the fastest measured configs, half uniform (all uniform before
        anything ran correctly here, e.g. when only the prior trained the model)."""
        if not self.measured or self.rng.random() < 0.5:
            return self.space.sample(self.rng)
        child = self._select()
        if len(self.measured) > 1 and self.rng.random() < self.crossover_rate:
            child = self._crossover(child, self._select())
        return self.space.mutate(child, self.rng)
