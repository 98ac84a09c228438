"""Many tasks, one budget: the scheduling policy on its own, then two real tasks through the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tunehub.server.tuner import TaskScheduler

Curve = Callable[[int], float]  # a task's best latency after its n-th batch (n >= 1)

BATCH = 8


def improving(n: int) -> float:
    return 1e-3 * 0.7**n


def flat(n: int) -> float:
    return 1e-3


def simulate(scheduler: TaskScheduler, curves: list[Curve]) -> list[int]:
    """Run the policy to the end against latency curves; the order tasks got batches in."""
    order = []
    while (task := scheduler.next_task()) is not None:
        trials = scheduler.batch_for(task)
        assert trials > 0
        batches = scheduler.tasks[task].batches + 1
        scheduler.record(task, trials, curves[task](batches), exhausted=False)
        order.append(task)
        assert len(order) < 1000
    return order


def test_warm_up_gives_every_task_a_batch_first() -> None:
    scheduler = TaskScheduler([1, 1, 1], total_trials=200, batch_size=BATCH, epsilon=0)
    order = simulate(scheduler, [improving, flat, improving])
    assert order[:3] == [0, 1, 2]


def test_a_budget_under_a_batch_per_task_still_reaches_every_task() -> None:
    scheduler = TaskScheduler([1.0, 1.0, 1.0], total_trials=12, batch_size=BATCH)
    simulate(scheduler, [flat, flat, flat])
    assert [task.trials for task in scheduler.tasks] == [4, 4, 4]


def test_an_improving_task_gets_more_batches_than_a_plateaued_one() -> None:
    scheduler = TaskScheduler([1, 1], total_trials=160, batch_size=BATCH, epsilon=0)
    simulate(scheduler, [flat, improving])
    flat_trials, improving_trials = (t.trials for t in scheduler.tasks)
    assert improving_trials > flat_trials
    assert scheduler.spent <= 160


def test_weights_shift_allocation() -> None:
    def allocation(weights: list[float]) -> list[int]:
        scheduler = TaskScheduler(
            weights, total_trials=80, batch_size=BATCH, epsilon=0, patience=100
        )
        simulate(scheduler, [improving, improving])
        return [t.trials for t in scheduler.tasks]

    assert allocation([1, 1]) == [40, 40]  # the same task twice: shared evenly
    light, heavy = allocation([1, 4])
    assert heavy > light and light + heavy == 80


def test_early_stopping_stops_a_flat_task_and_leaves_the_budget() -> None:
    scheduler = TaskScheduler([1], total_trials=1000, batch_size=BATCH, epsilon=0, patience=3)
    order = simulate(scheduler, [flat])
    assert len(order) == 4  # the warm-up batch, then 3 without improvement
    assert scheduler.stopped(0) and not scheduler.active(0)
    assert scheduler.remaining == 1000 - 4 * BATCH


def test_noise_below_the_tolerance_is_not_improvement() -> None:
    scheduler = TaskScheduler([1], total_trials=1000, batch_size=BATCH, epsilon=0, patience=3)
    order = simulate(scheduler, [lambda n: 1e-3 * (1 - 1e-4 * n)])
    assert len(order) == 4


def test_exhausted_tasks_are_skipped() -> None:
    scheduler = TaskScheduler([1, 1], total_trials=200, batch_size=BATCH, epsilon=0.5, seed=3)
    assert scheduler.next_task() == 0
    scheduler.record(0, 3, 1e-3, exhausted=True)  # a small space: 3 configs and no more
    order = simulate(scheduler, [improving, improving])
    assert order and set(order) == {1}
    assert scheduler.tasks[0].trials == 3


def test_a_task_without_a_correct_run_goes_last_and_stops_like_a_flat_one() -> None:
    scheduler = TaskScheduler([1, 1], total_trials=400, batch_size=BATCH, epsilon=0)
    order = []
    while (task := scheduler.next_task()) is not None:
        scheduler.record(task, BATCH, None if task == 0 else flat(1), exhausted=False)
        order.append(task)
    assert order == [0, 1, 1, 1, 1, 0, 0, 0]
    assert scheduler.stopped(0) and scheduler.stopped(1)


def test_the_budget_is_respected_to_the_trial() -> None:
    scheduler = TaskScheduler([1, 2], total_trials=21, batch_size=BATCH, epsilon=0)
    simulate(scheduler, [improving, improving])
    assert scheduler.spent == 21 and scheduler.next_task() is None


def test_deterministic_with_a_seed() -> None:
    def run(seed: int) -> list[int]:
        scheduler = TaskScheduler(
            [1, 2, 3], total_trials=400, batch_size=BATCH, epsilon=0.3, seed=seed
        )
        return simulate(scheduler, [improving, flat, improving])

    assert run(7) == run(7)


def test_bad_arguments_are_rejected() -> None:
    with pytest.raises(ValueError):
        TaskScheduler([], total_trials=10, batch_size=BATCH)
    with pytest.raises(ValueError):
        TaskScheduler([1, 0], total_trials=10, batch_size=BATCH)


def test_weighted_latency_is_known_once_every_task_has_one() -> None:
    scheduler = TaskScheduler([1, 2], total_trials=100, batch_size=BATCH)
    scheduler.record(0, BATCH, 1.0, exhausted=False)
    assert scheduler.weighted_latency() is None
    scheduler.record(1, BATCH, 3.0, exhausted=False)
    assert scheduler.weighted_latency() == 7.0


# End to end: two tiny tasks through the console script, on one budget, on a fresh database.

TUNEHUB = Path(sys.executable).parent / "tunehub"
EXAMPLES = Path(__file__).parents[2] / "examples"

MATMUL = {
    "version": 1,
    "name": "sched_matmul",
    "inputs": [
        {"name": "A", "shape": [16, 16], "dtype": "float32"},
        {"name": "B", "shape": [16, 8], "dtype": "float32"},
    ],
    "computes": [
        {
            "name": "C",
            "axes": ["i", "j"],
            "shape": [16, 8],
            "dtype": "float32",
            "reduce": {"op": "sum", "axes": {"k": 16}},
            "expr": "A[i, k] * B[k, j]",
        }
    ],
    "outputs": ["C"],
}


def test_tune_several_signatures_on_one_budget(tmp_path: Path) -> None:
    assert TUNEHUB.exists(), "run `.venv/bin/pip install -e '.[dev]'` to get the console script"
    matmul = tmp_path / "matmul.json"
    matmul.write_text(json.dumps(MATMUL))
    db = f"sqlite:///{tmp_path / 'tunehub.db'}"
    args = [matmul, EXAMPLES / "softmax.json", "--trials", "16", "--weights", "1,3"]
    done = subprocess.run(
        [str(TUNEHUB), "tune", *map(str, args), "--threads", "1", "--json", "--db", db],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert set(result) == {"tasks", "total_trials", "weighted_latency_s"}
    tasks = result["tasks"]
    assert [t["weight"] for t in tasks] == [1, 3]
    assert all(t["trials"] > 0 and t["status"] == "done" for t in tasks)
    assert all(t["trials_requested"] == 16 for t in tasks)  # each could have had all of it
    assert result["total_trials"] == sum(t["trials"] for t in tasks) <= 16
    assert {"tuning_id", "workload_key", "baseline_latency_s", "best", "speedup"} <= set(tasks[0])
    naive, best = result["weighted_latency_s"]["naive"], result["weighted_latency_s"]["best"]
    assert naive == pytest.approx(
        tasks[0]["baseline_latency_s"] + 3 * tasks[1]["baseline_latency_s"]
    )
    assert best == pytest.approx(tasks[0]["best"]["latency_s"] + 3 * tasks[1]["best"]["latency_s"])
    assert best <= naive

    bad = subprocess.run(
        [str(TUNEHUB), "tune", *map(str, args[:4]), "--weights", "1", "--db", db],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2 and "--weights has 1 values for 2" in bad.stderr
