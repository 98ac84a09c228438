"""Model-guided search: never proposes a known config, learns from what it measured, chooses its
first batch by the roofline estimate (still exploring) or, with other workloads' records
(transfer), by a model."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np

from tunehub.compiler import features, search
from tunehub.compiler.cost_model import RandomModel, XGBModel, roofline
from tunehub.compiler.program import load
from tunehub.compiler.search import Guide, ModelGuidedSearch, TrainingSet
from tunehub.compiler.search.model_guided import knob_features
from tunehub.compiler.space import space_for
from tunehub.compiler.space.space import Config, Space
from tunehub.schemas.target import Target

EXAMPLES = Path(__file__).parents[2] / "examples"
TARGET = Target(kind="cpu", isa="x86_64-avx512")


def real_space(example: str = "matmul_128") -> Space:
    return space_for(load((EXAMPLES / f"{example}.json").read_text()), TARGET)


def tile_latency(config: Config) -> float:
    """A synthetic objective the program features can see: best with an 8 x 2-vector register
    tile, and the plain nest (mr = 0) slowest."""
    mr, nv = int(config["s0.mr"]), int(config["s0.nv"])
    return 1e-3 * (1 + (mr - 8) ** 2 / 4 + 2 * (nv - 2) ** 2 + 30 * (mr == 0))


def program_features(example: str) -> search.model_guided.Featurize:
    """The tuner's featurizer: the compiler's feature vector of a config."""
    program = load((EXAMPLES / f"{example}.json").read_text())
    return lambda configs: [list(features.extract(program, TARGET, c).values()) for c in configs]


def test_never_proposes_a_known_or_already_proposed_config() -> None:
    space = real_space()
    rng = random.Random(0)
    known: list[search.Result] = [
        (c, tile_latency(c)) for c in (space.sample(rng) for _ in range(24))
    ]
    known.append((space.naive(), None))  # a failure is known too
    strategy = ModelGuidedSearch(space, seed=1, known=known)
    assert strategy.guide.model.trained
    seen = {space.key(c) for c, _ in known}
    for _ in range(4):
        batch = strategy.propose(8)
        assert len(batch) == 8 and all(space.check(c) is None for c in batch)
        keys = {space.key(c) for c in batch}
        assert len(keys) == 8 and not keys & seen
        seen |= keys
        strategy.notify([(c, tile_latency(c)) for c in batch])


def distance_latency(space: Space, config: Config) -> float:
    """A smooth objective over every knob: its optimum is the space's default config."""
    target = space.default()
    cost = sum(
        abs(values.index(config[name]) - values.index(target[name])) ** 2
        for name, values in space.knobs.items()
    )
    return 1e-3 * (1 + cost)


def best_after(strategy: search.SearchStrategy, trials: int) -> float:
    best = float("inf")
    for _ in range(trials // 8):
        batch = strategy.propose(8)
        latencies = [distance_latency(strategy.space, c) for c in batch]
        strategy.notify(list(zip(batch, latencies, strict=True)))
        best = min(best, *latencies)
    return best


def test_the_model_steers_the_search_toward_what_it_measured_fast() -> None:
    space = real_space()
    totals = {}
    for name, model in (("xgb", XGBModel), ("random", RandomModel)):
        totals[name] = sum(
            best_after(
                ModelGuidedSearch(
                    space, seed=seed, guide=Guide(knob_features(space), model(), estimate=None)
                ),
                trials=40,
            )
            for seed in range(6)
        )
    assert totals["xgb"] < totals["random"]


def test_transfer_chooses_the_first_batch_from_other_workloads_records() -> None:
    """Records of matmul_512 train the model that picks matmul_128's very first batch (no
    estimate: the synthetic objective is one the roofline knows nothing of)."""
    rng = random.Random(2)
    configs = [real_space("matmul_512").sample(rng) for _ in range(150)]
    featurize = program_features("matmul_512")
    prior = TrainingSet(
        [list(v) for v in featurize(configs)],
        [tile_latency(c) for c in configs],
        ["matmul_512"] * len(configs),
    )
    space = real_space()
    guide = Guide(program_features("matmul_128"), XGBModel(), prior, estimate=None)
    strategy = search.create("model", space, seed=3, guide=guide)
    first = [tile_latency(c) for c in strategy.propose(8)]
    uniform = [tile_latency(space.sample(rng)) for _ in range(400)]
    assert np.median(first) <= np.quantile(uniform, 0.05) < np.median(uniform)


def test_without_anything_to_learn_from_it_proposes_at_random() -> None:
    space = real_space()
    strategy = ModelGuidedSearch(space, seed=4)
    assert not strategy.guide.model.trained
    batch = strategy.propose(8)
    assert len(batch) == 8 and all(space.check(c) is None for c in batch)


def test_with_no_records_the_first_batch_follows_the_estimate_and_still_explores() -> None:
    space = real_space()
    featurize = program_features("matmul_128")
    strategy = ModelGuidedSearch(space, seed=5, guide=Guide(featurize))
    assert not strategy.guide.model.trained
    batch = strategy.propose(8)
    assert len(batch) == 8 and len({space.key(c) for c in batch}) == 8

    def estimated(configs: list[Config]) -> np.ndarray:
        return roofline.estimate([list(v) for v in featurize(configs)])

    rng = random.Random(6)
    top_tenth = np.quantile(estimated([space.sample(rng) for _ in range(200)]), 0.9)
    scores = estimated(batch)
    greedy = len(batch) - round(len(batch) * strategy.explore)
    assert (scores[:greedy] >= top_tenth).all()  # not uniform: the estimate's favourites
    assert scores[greedy:].min() < scores[:greedy].min()  # and a uniform draw besides
