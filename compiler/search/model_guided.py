"""Model-guided search: evolve many candidates, let the cost model pick the few to measure.

A measurement costs seconds; scoring a candidate costs milliseconds (feature extraction lowers
to loop IR, renders and compiles nothing). So each `propose(n)` builds a population of a few
hundred unseen configs (children of the fastest measured ones, by crossover and mutation, plus
uniform samples), then for a few generations mutates the current favourites and scores them
too, and finally measures the top-scored. A fraction `explore` of every batch is drawn
uniformly at random (epsilon-greedy), so a wrong model cannot confine the search to what it
already believes. This is TVM MetaSchedule's evolutionary search with its XGBoost model,
without the C++ plumbing.

The model is retrained from scratch after every batch on everything measured here plus the
guide's `prior`: records of other workloads of the same target (transfer). A model knows
nothing before records exist, so the score blends in the guide's `estimate`, which needs none
(`compiler.cost_model.roofline`): candidates are ranked by each, and the estimate's share of
the blended rank is 1 before any records and falls as records arrive (1/2 after
`estimate_records`). Other workloads' records count as `estimate_records` more, so with
transfer the learned model has half of the first batch's rank. Without an estimate (features
that are not the compiler's), batches are random until two records can be compared. On the
measured CPU replay spaces (docs/benchmarks/search_replay-2026-11-22.md) the estimate cut the
median trials to come within 5% of the best from 17.5 / 34 / 39.5 (random first batch) to
2 / 28.5 / 2 on matmul_512 / conv2d_3x3 / int4_matmul_m8.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from tunehub.compiler.cost_model import CostModel, XGBModel, roofline
from tunehub.compiler.cost_model.cost_model import Estimate
from tunehub.compiler.search.evolutionary import EvolutionarySearch
from tunehub.compiler.search.strategy import Result
from tunehub.compiler.space.space import Config, Space

# Feature vectors of configs, in order; None for a config the compiler rejects. One call per
# population, so that a featurizer can spread the extractions over processes.
Featurize = Callable[[Sequence[Config]], Sequence[Sequence[float] | None]]

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
    return lambda configs: [[float(index[k][c[k]]) for k in space.knobs] for c in configs]


@dataclass
class Guide:
    """What a model-guided search needs besides the space: how to featurize a config, the
    model to train, records of other workloads to train it on too, and an estimate that ranks
    feature vectors before any records exist (the default reads `compiler.features` vectors,
    as the tuner's featurizer makes; None for other features)."""

    featurize: Featurize
    model: CostModel = field(default_factory=XGBModel)
    prior: TrainingSet = field(default_factory=TrainingSet)
    estimate: Estimate | None = roofline.estimate


class ModelGuidedSearch(EvolutionarySearch):
    """Evolutionary candidates, scored by a cost model; see the module doc."""

    candidates = 256  # scored per proposal, before the generations
    generations = 2
    elite = 32  # favourites mutated per generation
    explore = 0.15
    estimate_records = 16  # own records after which the estimate has half of the rank

    def __init__(
        self,
        space: Space,
        *,
        seed: int = 0,
        known: Iterable[Result] = (),
        guide: Guide | None = None,
    ) -> None:
        self.guide = guide or Guide(knob_features(space), estimate=None)
        self._features: list[Sequence[float]] = []
        self._latencies: list[float | None] = []
        super().__init__(space, seed=seed, known=known)  # notifies `known`: the first fit

    def notify(self, results: list[Result]) -> None:
        super().notify(results)
        vectors = self._vectors([config for config, _ in results])
        for (_, latency), vector in zip(results, vectors, strict=True):
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
        if not self.guide.model.trained and self.guide.estimate is None:
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
        vectors: list[Sequence[float]] = []

        def score(configs: Iterable[Config]) -> None:
            fresh: dict[str, Config] = {}
            for config in configs:
                key = self.space.key(config)
                if key not in pool and key not in fresh and not self.seen(config):
                    fresh[key] = config
            for key, vector in zip(fresh, self._vectors(list(fresh.values())), strict=True):
                if vector is not None:
                    pool[key] = fresh[key]
                    vectors.append(vector)

        def best_first() -> list[str]:
            keys = list(pool)
            scores = self._score(np.asarray(vectors, dtype=np.float64))
            return [keys[n] for n in np.argsort(-scores, kind="stable")]

        score(self._child() for _ in range(self.candidates))
        for _ in range(self.generations):
            if pool:
                score(self.space.mutate(pool[key], self.rng) for key in best_first()[: self.elite])
        return [pool[key] for key in best_first()] if pool else []

    def _score(self, vectors: np.ndarray) -> np.ndarray:
        """The blend of the model's and the estimate's ranks of `vectors` (see the module
        doc): each rank is a fraction, 1 for the best, so the two scales never mix."""
        weight = 0.0 if self.guide.estimate is None else self._estimate_weight()
        blended = np.zeros(len(vectors))
        if weight > 0 and self.guide.estimate is not None:
            blended += weight * _ranks(self.guide.estimate(vectors))
        if weight < 1:
            blended += (1 - weight) * _ranks(self.guide.model.predict(vectors))
        return blended

    def _estimate_weight(self) -> float:
        """The estimate's share of the rank: 1 before any records, 1/2 after `estimate_records`
        of them, falling as 1 / (1 + records / estimate_records); other workloads' records
        count as `estimate_records` more (they teach the model, not this workload's order)."""
        evidence = len(self._latencies) + (self.estimate_records if self.guide.prior.groups else 0)
        return 1.0 / (1.0 + evidence / self.estimate_records)

    def _vectors(self, configs: list[Config]) -> list[Sequence[float] | None]:
        """The configs' features; None for one not valid in the space as it is now (a
        record from an older space) or that the compiler rejects while lowering."""
        valid = [self.space.check(c) is None for c in configs]
        found = iter(self.guide.featurize([c for c, ok in zip(configs, valid, strict=True) if ok]))
        return [next(found) if ok else None for ok in valid]

    def _child(self) -> Config:
        """Half bred from the fastest measured configs, half uniform (all uniform before
        anything ran correctly here, e.g. when only the prior trained the model)."""
        if not self.measured or self.rng.random() < 0.5:
            return self.space.sample(self.rng)
        child = self._select()
        if len(self.measured) > 1 and self.rng.random() < self.crossover_rate:
            child = self._crossover(child, self._select())
        return self.space.mutate(child, self.rng)


def _ranks(scores: np.ndarray) -> np.ndarray:
    """Each score's rank as a fraction in [0, 1], 1 for the highest; ties share their mean."""
    if len(scores) < 2:
        return np.ones(len(scores))
    order = np.argsort(scores, kind="stable")
    ranks = np.empty(len(scores))
    ranks[order] = np.arange(len(scores), dtype=np.float64)
    _, tie, counts = np.unique(scores, return_inverse=True, return_counts=True)
    return (np.bincount(tie, weights=ranks) / counts)[tie] / (len(scores) - 1)
