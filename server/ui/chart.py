"""A best-so-far curve as SVG geometry: the dashboard's templates draw what this computes, so
the page needs no plotting library and no script to show it.

Latencies span orders of magnitude (a naive kernel can be 100x the best), so the y axis is
logarithmic; x is the trial number or the seconds since the tuning started.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from markupsafe import Markup, escape

from tunehub.server.ui.format import latency

WIDTH, HEIGHT = 640, 260
# Room for the axes' labels: left, right, top, bottom.
LEFT, RIGHT, TOP, BOTTOM = 72, 16, 12, 36
Y_TICKS = 5
X_TICKS = 6


@dataclass(frozen=True)
class Point:
    x: float
    y: float
    title: str


@dataclass(frozen=True)
class Tick:
    at: float  # the pixel position along its axis
    label: str


@dataclass(frozen=True)
class Line:
    """A horizontal reference (a baseline) across the plot."""

    y: float
    label: str


@dataclass(frozen=True)
class Chart:
    width: int
    height: int
    x_label: str
    best: tuple[Point, ...]  # one per trial with a best so far
    path: str  # the best-so-far steps through `best`, as SVG path data
    samples: tuple[Point, ...]  # every correct trial's own latency
    lines: tuple[Line, ...]
    x_ticks: tuple[Tick, ...]
    y_ticks: tuple[Tick, ...]
    plot: tuple[int, int, int, int]  # the plot area: left, top, right, bottom

    # The dots as SVG markup, made here rather than by a template loop: a long tuning has
    # thousands, and its live page is drawn again after every batch (a loop in the template
    # cost more than everything else the page does).
    @property
    def sample_dots(self) -> Markup:
        return _dots(self.samples, "sample", "2")

    @property
    def best_dots(self) -> Markup:
        return _dots(self.best, "best", "2.5")


def best_so_far(latencies: Sequence[float | None]) -> list[float | None]:
    """The running minimum of the correct trials' latencies (None for a failed one), None
    until the first correct trial."""
    best: float | None = None
    out: list[float | None] = []
    for value in latencies:
        if value is not None and (best is None or value < best):
            best = value
        out.append(best)
    return out


def curve(
    xs: Sequence[float],
    latencies: Sequence[float | None],
    *,
    x_label: str,
    x_format: Callable[[float], str],
    baselines: Sequence[tuple[str, float]] = (),
) -> Chart:
    """The chart of trials at `xs` with `latencies` (None: failed): each trial's latency as a
    dot, the best so far as steps, and `baselines` (label, latency) as horizontal lines."""
    best = best_so_far(latencies)
    values = [v for v in latencies if v is not None] + [v for _, v in baselines if v > 0]
    values = [v for v in values if v > 0]
    left, top, right, bottom = LEFT, TOP, WIDTH - RIGHT, HEIGHT - BOTTOM
    x_max = max(xs, default=1.0) or 1.0
    if not values:
        x_ticks = _x_ticks(x_max, left, right, x_format)
        return Chart(
            WIDTH, HEIGHT, x_label, (), "", (), (), x_ticks, (), (left, top, right, bottom)
        )
    lo, hi = math.log10(min(values)), math.log10(max(values))
    if hi - lo < 0.1:  # a flat curve: give it a band around its value
        lo, hi = lo - 0.05, hi + 0.05

    def px(x: float) -> float:
        return round(left + (right - left) * x / x_max, 1)

    def py(v: float) -> float:
        return round(bottom - (bottom - top) * (math.log10(v) - lo) / (hi - lo), 1)

    points = tuple(
        Point(px(x), py(b), f"{x_format(x)}: best {latency(b)}")
        for x, b in zip(xs, best, strict=True)
        if b is not None
    )
    samples = tuple(
        Point(px(x), py(v), f"{x_format(x)}: {latency(v)}")
        for x, v in zip(xs, latencies, strict=True)
        if v is not None and v > 0
    )
    lines = tuple(Line(py(v), f"{label} {latency(v)}") for label, v in baselines if v > 0)
    y_values = [10 ** (lo + (hi - lo) * i / (Y_TICKS - 1)) for i in range(Y_TICKS)]
    y_ticks = tuple(Tick(py(v), latency(v)) for v in y_values)
    return Chart(
        WIDTH,
        HEIGHT,
        x_label,
        points,
        _steps(points, px(x_max)),
        samples,
        lines,
        _x_ticks(x_max, left, right, x_format),
        y_ticks,
        (left, top, right, bottom),
    )


def _dots(points: Sequence[Point], css_class: str, radius: str) -> Markup:
    """A circle per point with its title (escaped) as a tooltip."""
    return Markup(
        "".join(
            f'<circle class="{css_class}" cx="{p.x}" cy="{p.y}" r="{radius}">'
            f"<title>{escape(p.title)}</title></circle>\n"
            for p in points
        )
    )


def _steps(points: Sequence[Point], end: float) -> str:
    """Path data that holds each best until the next one, then to the last trial."""
    if not points:
        return ""
    parts = [f"M{points[0].x},{points[0].y}"]
    for point in points[1:]:
        parts.append(f"H{point.x}V{point.y}")
    parts.append(f"H{max(end, points[-1].x)}")
    return "".join(parts)


def _x_ticks(
    x_max: float, left: float, right: float, x_format: Callable[[float], str]
) -> tuple[Tick, ...]:
    """Ticks at round values (multiples of 1, 2 or 5 times a power of ten) up to `x_max`."""
    step = nice_step(x_max / (X_TICKS - 1))
    count = int(x_max / step + 1e-9) + 1
    return tuple(
        Tick(round(left + (right - left) * i * step / x_max, 1), x_format(i * step))
        for i in range(count)
    )


def nice_step(rough: float) -> float:
    """The smallest of 1, 2 or 5 times a power of ten that is at least `rough` (> 0), and
    at least 1: trials are whole, and the wall time's axis needs no finer ticks."""
    if rough <= 1:
        return 1.0
    power = 10 ** math.floor(math.log10(rough))
    return float(next(m * power for m in (1, 2, 5, 10) if m * power >= rough - 1e-9))
