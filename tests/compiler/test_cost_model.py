"""Cost models: targets normalized within a workload, XGBoost that ranks faster configs higher on
records it never saw (synthetic and measured), the roofline estimate that ranks configs with no
records at all, metrics, and save/load."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tunehub.compiler import features
from tunehub.compiler.cost_model import (
    RandomModel,
    XGBModel,
    informative,
    kendall_tau,
    normalized_throughput,
    roofline,
    top_k_recall,
)
from tunehub.compiler.program import load
from tunehub.compiler.space import space_for
from tunehub.schemas.target import Target

ROOT = Path(__file__).parents[2]
OBJECTIVES = ("rank", "regression")


def test_throughput_is_normalized_within_each_group_and_failures_are_zero() -> None:
    latencies = [2.0, 4.0, None, 1000.0, 500.0]
    groups = ["a", "a", "a", "b", "b"]
    assert normalized_throughput(latencies, groups).tolist() == [1.0, 0.5, 0.0, 0.5, 1.0]


def test_a_model_needs_a_group_with_two_records_and_a_success() -> None:
    assert not informative([1.0, 2.0], ["a", "b"])
    assert not informative([None, None], ["a", "a"])
    assert informative([1.0, None], ["a", "a"])
    model = XGBModel()
    model.fit([[0.0], [1.0]], [1.0, 2.0], ["a", "b"])
    assert not model.trained and model.predict([[0.0], [1.0]]).tolist() == [0.0, 0.0]
    with pytest.raises(ValueError, match="untrained"):
        model.save()


def synthetic(rng: np.random.Generator, n: int, scale: float) -> tuple[np.ndarray, list[float]]:
    """Features x and a latency rising with x0 and falling with x1; `scale` differs per
    workload, as real latencies do (the model must not compare them across workloads)."""
    x = rng.random((n, 6))
    latency = scale * (1 + 3 * x[:, 0] - 2 * x[:, 1] + 0.1 * rng.random(n) + 2)
    return x, latency.tolist()


@pytest.mark.parametrize("objective", OBJECTIVES)
def test_ranks_held_out_faster_configs_higher_across_workloads(objective: str) -> None:
    rng = np.random.default_rng(0)
    xa, ta = synthetic(rng, 120, 1e-3)
    xb, tb = synthetic(rng, 120, 5.0)
    model = XGBModel(objective, rounds=60)  # type: ignore[arg-type]
    model.fit(np.vstack([xa, xb]), ta + tb, ["a"] * 120 + ["b"] * 120)
    fast = [[0.1, 0.9, 0.5, 0.5, 0.5, 0.5]]
    slow = [[0.9, 0.1, 0.5, 0.5, 0.5, 0.5]]
    assert model.predict(fast)[0] > model.predict(slow)[0]
    x_new, t_new = synthetic(rng, 200, 42.0)  # a third workload it never saw
    truth = normalized_throughput(t_new, [0] * 200)
    assert kendall_tau(model.predict(x_new), truth) > 0.6


def measured(name: str) -> tuple[np.ndarray, list[float | None]]:
    """A space measured by bench/search_replay.py, with features of this FEATURE_VERSION."""
    data = json.loads((ROOT / "bench" / "data" / f"{name}.json").read_text())
    records = data["records"]
    if data["feature_version"] == features.FEATURE_VERSION:
        x = np.array([r["features"] for r in records])
    else:
        program = load((ROOT / "examples" / f"{data['example']}.json").read_text())
        target = Target.parse(data["target"])
        x = np.array(
            [
                list(features.extract(program, target, r["config"], data["symbols"]).values())
                for r in records
            ]
        )
    return x, [r["latency_s"] for r in records]


@pytest.mark.parametrize("objective", OBJECTIVES)
def test_ranks_measured_configs_it_never_saw(objective: str) -> None:
    x, latencies = measured("matmul_512")
    order = np.random.default_rng(1).permutation(len(latencies))
    train, test = order[:150], order[150:]
    model = XGBModel(objective, rounds=100)  # type: ignore[arg-type]
    model.fit(x[train], [latencies[i] for i in train], ["matmul"] * len(train))
    truth = normalized_throughput([latencies[i] for i in test], [0] * len(test))
    scores = model.predict(x[test])
    # The fastest tenth of the held-out configs scores above the slowest tenth, every one.
    ranked = np.argsort(-truth)
    tenth = len(test) // 10
    assert scores[ranked[:tenth]].min() > scores[ranked[-tenth:]].max()
    assert kendall_tau(scores, truth) > 0.4


@pytest.mark.parametrize(("example", "symbols"), [("matmul_128", {}), ("int4_matmul", {"M": 8})])
def test_the_estimate_ranks_a_register_tiled_kernel_above_the_naive_loop_nest(
    example: str, symbols: dict[str, int]
) -> None:
    program = load((ROOT / "examples" / f"{example}.json").read_text())
    target = Target(kind="cpu", isa="x86_64-avx512")
    space = space_for(program, target)
    naive, tiled = (
        list(features.extract(program, target, c, symbols).values())
        for c in (space.naive(), space.default())
    )
    slow, fast = roofline.estimate([naive, tiled])
    assert fast > slow + 2  # over 4x fewer cycles


def test_the_estimate_charges_traffic_to_the_cache_that_holds_the_working_set() -> None:
    """Two configs with the same compute: the one whose loops re-read their bytes from a
    working set too large for any cache is estimated slower."""
    names = features.feature_names()
    cached = dict.fromkeys(names, 0.0)
    cached.update({"hot_log_iterations": 20.0, "log_touched_2": 10.0})
    cached.update({f"flops_per_byte_{n}": 0.1 for n in range(1, features.LEVELS)})
    cached[f"flops_per_byte_{features.LEVELS}"] = 10.0  # the outer loops reuse what they read
    streamed = {**cached, "log_touched_2": 34.0}
    small, large = roofline.estimate([[v[n] for n in names] for v in (cached, streamed)])
    assert small > large
    with pytest.raises(ValueError, match="compiler features"):
        roofline.estimate([[0.0, 1.0]])


def test_the_estimate_orders_measured_configs_without_any_records() -> None:
    x, latencies = measured("matmul_512")
    truth = normalized_throughput(latencies, [0] * len(latencies))
    assert kendall_tau(roofline.estimate(x), truth) > 0.4


def test_save_and_load_give_the_same_predictions() -> None:
    rng = np.random.default_rng(2)
    x, latencies = synthetic(rng, 80, 1.0)
    model = XGBModel(rounds=20)
    model.fit(x, latencies, ["a"] * 80)
    restored = XGBModel()
    restored.load(model.save())
    assert restored.n_train == 80
    assert np.array_equal(restored.predict(x), model.predict(x))


def test_random_model_round_trips() -> None:
    model = RandomModel(seed=3)
    model.fit([[0.0]] * 5, [1.0] * 5, ["a"] * 5)
    restored = RandomModel()
    restored.load(model.save())
    assert restored.n_train == 5 and restored.seed == 3


def test_metrics() -> None:
    truth = [1.0, 0.5, 0.25, 0.0]
    assert kendall_tau([4, 3, 2, 1], truth) == pytest.approx(1.0)
    assert kendall_tau([1, 2, 3, 4], truth) == pytest.approx(-1.0)
    assert kendall_tau([1, 1, 1, 1], truth) == 0.0
    assert top_k_recall([9, 0, 8, 0], truth, k=2) == 0.5
    assert top_k_recall([9, 8, 0, 0], truth, k=2) == 1.0
