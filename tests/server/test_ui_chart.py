"""The dashboard's curve geometry and number formats, which its pages draw as they are."""

from __future__ import annotations

import pytest

from tunehub.server.ui import format
from tunehub.server.ui.chart import best_so_far, curve, nice_step


def test_best_so_far_starts_at_the_first_correct_trial_and_never_rises() -> None:
    assert best_so_far([None, 3.0, None, 5.0, 2.0, 4.0]) == [None, 3.0, 3.0, 3.0, 2.0, 2.0]
    assert best_so_far([]) == []


def test_the_curve_has_a_point_per_trial_with_a_best_on_a_log_scale() -> None:
    chart = curve(
        [1.0, 2.0, 3.0, 4.0],
        [None, 1e-3, 1e-5, 2e-5],
        x_label="trial",
        x_format=lambda x: f"{x:.0f}",
        baselines=[("naive", 1e-3)],
    )
    assert len(chart.best) == 3  # the failed first trial has no best yet
    assert len(chart.samples) == 3
    _, top, right, bottom = chart.plot
    first, second, third = chart.best
    # Lower is faster: the best sinks to the bottom edge, the slowest sits on the top one.
    assert first.y == top and second.y == third.y == bottom
    assert first.x < second.x < third.x == right
    assert chart.path.startswith(f"M{first.x},{first.y}")
    (naive,) = chart.lines
    assert naive.y == top and naive.label == "naive 1 ms"
    assert [t.label for t in chart.x_ticks] == ["0", "1", "2", "3", "4"]
    assert chart.y_ticks[0].label == "10 µs" and chart.y_ticks[-1].label == "1 ms"


def test_a_curve_without_a_correct_trial_is_empty() -> None:
    chart = curve([1.0, 2.0], [None, None], x_label="trial", x_format=str)
    assert chart.best == () and chart.path == "" and chart.y_ticks == ()


def test_a_flat_curve_still_has_a_height() -> None:
    chart = curve([1.0, 2.0], [2e-3, 2e-3], x_label="trial", x_format=str)
    _, top, _, bottom = chart.plot
    assert all(top < p.y < bottom for p in chart.best)


@pytest.mark.parametrize(
    ("rough", "step"), [(0.2, 1.0), (1.2, 2.0), (3.0, 5.0), (7.8, 10.0), (120.0, 200.0)]
)
def test_ticks_fall_on_round_values(rough: float, step: float) -> None:
    assert nice_step(rough) == step


def test_formats() -> None:
    assert format.latency(None) == "—"
    assert format.latency(5e-8) == "50 ns"
    assert format.latency(9.11e-6) == "9.11 µs"
    assert format.latency(3.68e-3) == "3.68 ms"
    assert format.latency(2.5) == "2.5 s"
    assert format.duration(0.5) == "0.5 s"
    assert format.duration(42) == "42 s"
    assert format.duration(185) == "3m 05s"
    assert format.duration(7260) == "2h 01m"
    assert format.config({"b": 2, "a": True}) == "a=True b=2"
    assert format.symbols({}) == "—"
    log = "\n".join(f"line {i}" for i in range(20))
    assert format.excerpt(log).endswith("line 11\n… (8 more lines)")
