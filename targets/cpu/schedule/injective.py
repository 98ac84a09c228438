"""Schedule of an injective stage (elementwise, broadcast, transpose, gather-like reads).

Loop structure over the stage's axes `a0 .. a(n-1)`: the last two axes may be tiled
(`tile_r` rows of `a(n-2)`, `tile_c` columns of `a(n-1)`; partial tiles are clipped), giving

    outer: a0 .. a(n-3), a(n-2)[o], a(n-1)o      inner: a(n-2)i, a(n-1)[i]

The first `parallel` outer loops run as one collapsed parallel loop (a 1-D stage needs a
column tile to have an outer loop at all); the innermost loop is vectorized (`vec` lanes,
`omp simd`) or unrolled (`unroll`), not both.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from tunehub.compiler.analysis import Stage
from tunehub.compiler.ir import Expr, Extent
from tunehub.compiler.loop import Stmt, as_expr, var
from tunehub.compiler.schedule.stage import (
    Context,
    Loop,
    Schedule,
    first_values,
    hoisted,
    nest,
    reduce_body,
    split,
)
from tunehub.compiler.space.space import Config, Knob
from tunehub.schemas.target import Target
from tunehub.targets.cpu.isa import vector_widths

ROW_TILES = (1, 4, 16, 64)
COLUMN_TILES = (0, 16, 64, 256, 1024, 4096)
UNROLLS = (1, 2, 4, 8)
MAX_COLLAPSE = 3


def tiles_below(
    size: Extent, candidates: tuple[int, ...], covering: bool = False
) -> tuple[int, ...]:
    """The candidate tiles that are smaller than a constant extent (all for a symbol); 0 and
    1 (no tiling) are always kept, and with `covering` the smallest that holds the whole
    extent (one tile, clipped to it)."""
    below = tuple(t for t in candidates if t <= 1 or isinstance(size, str) or t < size)
    above = [t for t in candidates if isinstance(size, int) and t >= size]
    return (*below, min(above)) if covering and above else below


class Injective(Schedule):
    kind = "injective"
    summary = "an elementwise loop nest: the last two axes tiled, parallel and vectorized"
    knob_docs: ClassVar[Mapping[str, str]] = {
        "tile_r": "rows of the second-to-last axis per tile",
        "tile_c": "columns of the last axis per tile (0: untiled)",
        "parallel": "outer loops collapsed into one parallel loop",
        "vec": "vector lanes of the innermost loop (0: scalar)",
        "unroll": "unroll factor of the innermost loop (with vec = 0)",
    }

    def knobs(self, stage: Stage, target: Target) -> dict[str, tuple[Knob, ...]]:
        n = len(stage.axes)
        if n == 0:
            return {}
        knobs: dict[str, tuple[Knob, ...]] = {}
        if n >= 2:
            knobs["tile_r"] = tiles_below(stage.shape[-2], ROW_TILES)
        knobs["tile_c"] = tiles_below(stage.shape[-1], COLUMN_TILES)
        knobs["parallel"] = tuple(range(min(MAX_COLLAPSE, n) + 1))
        knobs["vec"] = (0, *vector_widths(target, stage.anchor.dtype))
        knobs["unroll"] = UNROLLS
        return knobs

    def naive(self, stage: Stage, target: Target) -> Config:
        return first_values(self.knobs(stage, target))

    def default(self, stage: Stage, target: Target) -> Config:
        config = self.naive(stage, target)
        if not config:
            return config
        last = stage.shape[-1]
        if len(stage.axes) == 1 and (isinstance(last, str) or last >= 4096):
            config["tile_c"] = 1024
        config["parallel"] = min(1, outer_loops(stage, config))
        config["vec"] = self.knobs(stage, target)["vec"][-1]
        return config

    def in_rows(self, stage: Stage, target: Target, config: Config, rows: int) -> Config:
        """Inside a row the stage has no parallel loop of its own, tiles only the axes left
        after the rows, and has no loop at all where the rows are all its axes."""
        free = len(stage.axes) - rows
        if free == 0:
            unused = list(config)
        else:
            unused = ["parallel"] if free >= 2 else ["parallel", "tile_r"]
        first = self.naive(stage, target)
        return {**config, **{k: first[k] for k in unused if k in config}}

    def check(self, stage: Stage, target: Target, config: Config) -> str | None:
        if not config:
            return None
        if int(config["parallel"]) > outer_loops(stage, config):
            return "parallel exceeds the number of outer loops"
        if int(config["vec"]) and int(config["unroll"]) > 1:
            return "the innermost loop is either vectorized or unrolled"
        return None

    def lower(self, stage: Stage, config: Config, ctx: Context, rows: tuple[Expr, ...]) -> Stmt:
        index = dict(zip(stage.axes, rows, strict=False))
        free = list(zip(stage.axes, stage.shape, strict=True))[len(rows) :]
        outer: list[Loop] = []
        inner: list[Loop] = []
        for pos, (axis, size) in enumerate(free):
            tile = _tile(config, len(free) - pos)
            if tile > 1:
                piece = split(ctx, axis, as_expr(size), tile)
                outer.append(Loop(piece.outer, piece.outer_extent))
                inner.append(Loop(piece.inner, piece.inner_extent))
                index[axis] = piece.index
            else:
                loop = Loop(ctx.fresh(axis), as_expr(size))
                (inner if pos == len(free) - 1 else outer).append(loop)
                index[axis] = var(loop.var)
        if not rows:
            parallel = int(config.get("parallel", 0))
            outer[:parallel] = [Loop(lp.var, lp.extent, "parallel") for lp in outer[:parallel]]
        body = reduce_body(stage, ctx, index, [])
        if not inner:
            return body  # every axis is bound by an enclosing row loop
        inner[-1] = innermost(inner[-1], config)
        return nest(outer + inner[:-1], hoisted(stage, ctx, nest(inner[-1:], body)))


def innermost(loop: Loop, config: Config) -> Loop:
    """`loop` vectorized or unrolled as the config says."""
    vec, unroll = int(config.get("vec", 0)), int(config.get("unroll", 1))
    if vec:
        return Loop(loop.var, loop.extent, "vectorize", vec, loop.reduction)
    if unroll > 1:
        return Loop(loop.var, loop.extent, "unroll", unroll, loop.reduction)
    return loop


def _tile(config: Config, from_end: int) -> int:
    """The tile of the axis `from_end` positions from the last (1 = last)."""
    if from_end == 1:
        return int(config.get("tile_c", 0))
    if from_end == 2:
        return int(config.get("tile_r", 1))
    return 0


def outer_loops(stage: Stage, config: Config) -> int:
    """How many loops sit outside the innermost tile, for `parallel` to use."""
    n = len(stage.axes)
    count = n - 1
    if int(config.get("tile_c", 0)) > 1:
        count += 1
    return count
