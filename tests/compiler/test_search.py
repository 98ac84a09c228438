"""Search strategies: no config twice, only valid configs, resume from known results, and
evolution that actually uses what it measured."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from tunehub.compiler import search
from tunehub.compiler.program import load
from tunehub.compiler.space import space_for
from tunehub.compiler.space.space import Config, Space
from tunehub.schemas.api import DEFAULT_STRATEGY, STRATEGY_NAMES
from tunehub.schemas.target import Target

EXAMPLES = Path(__file__).parents[2] / "examples"


class GridSpace(Space):
    """A small space with a constraint: x + y must be even. 5 x 5 x 2 = 50 combos, 26 valid."""

    def __init__(self) -> None:
        self.knobs = {"x": (0, 1, 2, 3, 4), "y": (0, 1, 2, 3, 4), "flag": (False, True)}

    def naive(self) -> Config:
        return {"x": 0, "y": 0, "flag": False}

    def default(self) -> Config:
        return {"x": 2, "y": 2, "flag": True}

    def check(self, config: Config) -> str | None:
        reason = super().check(config)
        if reason is None and (int(config["x"]) + int(config["y"])) % 2:
            return "x + y must be even"
        return reason


VALID_GRID = 26


def synthetic_latency(space: Space, config: Config) -> float:
    """A smooth objective over knob positions: the optimum sits at a fixed valid config."""
    target = space.default()
    cost = 1.0
    for name, values in space.knobs.items():
        cost += abs(values.index(config[name]) - values.index(target[name])) ** 2
    return cost * 1e-3


@pytest.mark.parametrize("name", sorted(search.STRATEGIES))
def test_exhausts_small_space_without_repeats_or_invalid_configs(name: str) -> None:
    space = GridSpace()
    strategy = search.create(name, space, seed=3)
    keys: list[str] = []
    while batch := strategy.propose(4):
        assert all(space.check(c) is None for c in batch)
        keys += [space.key(c) for c in batch]
        strategy.notify([(c, synthetic_latency(space, c)) for c in batch])
    assert len(keys) == len(set(keys)) == VALID_GRID
    assert strategy.propose(4) == []


@pytest.mark.parametrize("name", sorted(search.STRATEGIES))
def test_known_configs_are_never_proposed(name: str) -> None:
    space = GridSpace()
    rng = random.Random(0)
    known_configs = {space.key(c): c for c in (space.sample(rng) for _ in range(20))}
    # A failed measurement (None) counts as known too: a failing config fails again.
    known = [
        (c, None if i % 3 == 0 else synthetic_latency(space, c))
        for i, c in enumerate(known_configs.values())
    ]
    strategy = search.create(name, space, seed=1, known=known)
    proposed: list[Config] = []
    while batch := strategy.propose(3):
        proposed += batch
    assert not {space.key(c) for c in proposed} & set(known_configs)
    assert len(proposed) == VALID_GRID - len(known_configs)


def test_known_configs_from_an_older_space_are_harmless() -> None:
    space = GridSpace()
    stale: list[search.Result] = [({"x": 0, "y": 0}, 1e-6), ({"x": 9, "y": 1, "flag": True}, 1e-6)]
    strategy = search.create("evolutionary", space, seed=0, known=stale)
    strategy.notify([(space.naive(), 1e-3)])
    batch = strategy.propose(8)
    assert len(batch) == 8 and all(space.check(c) is None for c in batch)


def test_same_seed_same_proposals() -> None:
    space = GridSpace()
    a = search.create("evolutionary", space, seed=7)
    b = search.create("evolutionary", space, seed=7)
    for _ in range(3):
        batch_a, batch_b = a.propose(4), b.propose(4)
        assert batch_a == batch_b
        a.notify([(c, synthetic_latency(space, c)) for c in batch_a])
        b.notify([(c, synthetic_latency(space, c)) for c in batch_b])


def best_found(strategy: search.SearchStrategy, trials: int, batch: int) -> float:
    """Run `strategy` for `trials` candidates of the synthetic objective; the best cost."""
    best, done = float("inf"), 0
    while done < trials and (configs := strategy.propose(min(batch, trials - done))):
        latencies = [synthetic_latency(strategy.space, c) for c in configs]
        strategy.notify(list(zip(configs, latencies, strict=True)))
        best, done = min(best, *latencies), done + len(configs)
    return best


@pytest.mark.parametrize("example", ["matmul_128", "softmax"])
def test_evolution_beats_or_equals_random_on_a_real_space(example: str) -> None:
    program = load((EXAMPLES / f"{example}.json").read_text())
    space = space_for(program, Target(kind="cpu", isa="x86_64-avx2"))
    total = {
        name: sum(
            best_found(search.create(name, space, seed=seed), trials=32, batch=8)
            for seed in range(24)
        )
        for name in ("random", "evolutionary")
    }
    assert total["evolutionary"] <= total["random"]


def test_unknown_strategy_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="unknown search strategy 'annealing'"):
        search.create("annealing", GridSpace())


def test_the_wire_format_names_every_strategy() -> None:
    assert set(STRATEGY_NAMES) == set(search.STRATEGIES) and DEFAULT_STRATEGY in STRATEGY_NAMES
