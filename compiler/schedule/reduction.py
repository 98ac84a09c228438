"""Schedule of a reduction stage (row reductions like softmax/layernorm/rmsnorm, column
reductions like column_sum, and, until a dedicated schedule exists, contractions).

Two loop orders, chosen by `cols`:

* `cols == 0`, **row order**: spatial loops outside, an accumulator per output element, the
  reduce loops inside. The innermost reduce loop is vectorized (`omp simd reduction`: vector
  partial accumulators and a horizontal reduce at the end) or unrolled. `split` instead runs
  the outermost reduce loop in parallel with an OpenMP reduction, for few outputs with long
  reductions (a full sum).
* `cols == T`, **column order**: the last spatial axis is tiled by `T` and its tile loop goes
  inside the reduce loops, over an array of `T` accumulators, so that the vectorized loop
  walks the spatial axis (contiguous in a column sum, or in `B[k, j]` of a matmul).

`parallel` collapses that many outer spatial loops into one parallel loop.
"""

from __future__ import annotations

from compiler.analysis import Stage, contiguous
from compiler.ir import Expr, Load
from compiler.loop import Decl, Stmt, Store, as_expr, const, seq, var
from compiler.schedule.injective import MAX_COLLAPSE, UNROLLS, innermost, tiles_below
from compiler.schedule.stage import (
    Context,
    Loop,
    Schedule,
    accumulator_dtype,
    combine,
    first_values,
    hoisted,
    identity,
    nest,
    reduce_body,
    split,
    term,
    vector_widths,
)
from compiler.space.space import Config, Knob
from schemas.target import Target

COLUMN_TILES = (0, 16, 64, 256)


class Reduction(Schedule):
    kind = "reduction"

    def knobs(self, stage: Stage, target: Target) -> dict[str, tuple[Knob, ...]]:
        n = len(stage.axes)
        knobs: dict[str, tuple[Knob, ...]] = {}
        if n >= 1:
            knobs["cols"] = tiles_below(stage.shape[-1], COLUMN_TILES)
        knobs["parallel"] = tuple(range(min(MAX_COLLAPSE, n) + 1))
        knobs["split"] = (False, True)
        knobs["vec"] = (0, *vector_widths(target, accumulator_dtype(stage)))
        knobs["unroll"] = UNROLLS
        return knobs

    def naive(self, stage: Stage, target: Target) -> Config:
        return first_values(self.knobs(stage, target))

    def default(self, stage: Stage, target: Target) -> Config:
        knobs = self.knobs(stage, target)
        config = self.naive(stage, target)
        last_reduce = stage.anchor.reduce_axes[-1].name
        if stage.axes and not contiguous(stage, last_reduce) and contiguous(stage, stage.axes[-1]):
            config["cols"] = max(knobs["cols"])
        config["parallel"] = min(1, len(stage.axes))
        config["split"] = not stage.axes
        config["vec"] = knobs["vec"][-1]
        return config

    def check(self, stage: Stage, target: Target, config: Config) -> str | None:
        cols, parallel = int(config.get("cols", 0)), int(config["parallel"])
        if config["split"] and (cols or parallel):
            return "split parallelizes the reduce loop of the row order alone"
        if int(config["vec"]) and int(config["unroll"]) > 1:
            return "the innermost loop is either vectorized or unrolled"
        return None

    def lower(self, stage: Stage, config: Config, ctx: Context, rows: tuple[Expr, ...]) -> Stmt:
        index = dict(zip(stage.axes, rows, strict=False))
        free = list(zip(stage.axes, stage.shape, strict=True))[len(rows) :]
        cols = int(config.get("cols", 0)) if free else 0
        loops = []
        for axis, size in free[:-1] if cols else free:
            loops.append(Loop(ctx.fresh(axis), as_expr(size)))
            index[axis] = var(loops[-1].var)
        if cols:
            axis, size = free[-1]
            piece = split(ctx, axis, as_expr(size), cols)
            loops.append(Loop(piece.outer, piece.outer_extent))
            index[axis] = piece.index
        if not rows:
            parallel = int(config["parallel"])
            loops[:parallel] = [Loop(lp.var, lp.extent, "parallel") for lp in loops[:parallel]]
        if cols:
            return nest(loops, _columns(stage, config, ctx, index, piece.inner, piece.inner_extent))
        return nest(loops, reduce_body(stage, ctx, index, _reduce_loops(stage, config, rows)))


def _reduce_loops(stage: Stage, config: Config, rows: tuple[Expr, ...]) -> list[Loop]:
    """Kinds of the reduce loops in row order (see `reduce_body`)."""
    count = len(stage.anchor.reduce_axes)
    specs = [Loop("", const(0)) for _ in range(count)]
    specs[-1] = innermost(specs[-1], config)
    if config["split"] and not rows:
        simd = specs[0].factor if count == 1 else 0
        specs[0] = Loop("", const(0), "parallel", simd)
    return specs


def _columns(
    stage: Stage, config: Config, ctx: Context, index: dict[str, Expr], lane: str, width: Expr
) -> Stmt:
    """Column order: `cols` accumulators along the last spatial axis (index var `lane`)."""
    acc, dtype, op = ctx.fresh("acc"), accumulator_dtype(stage), stage.anchor.reduce_op
    assert op is not None
    tile = innermost(Loop(lane, width), config)
    element = Load(acc, (var(lane),), dtype)
    reduce_index = dict(index)
    reduce_loops = []
    for axis in stage.anchor.reduce_axes:
        reduce_loops.append(Loop(ctx.fresh(axis.name), as_expr(axis.extent)))
        reduce_index[axis.name] = var(reduce_loops[-1].var)
    spatial = tuple(index[a] for a in stage.axes)
    update = Store(acc, (var(lane),), combine(op, element, term(stage, reduce_index)))
    return seq(
        Decl(acc, dtype, (int(config["cols"]),)),
        nest([tile], Store(acc, (var(lane),), identity(op, dtype))),
        nest(reduce_loops, hoisted(stage, ctx, nest([tile], update))),
        hoisted(
            stage, ctx, nest([tile], Store(stage.buffer, spatial, stage.finish(element, index)))
        ),
    )
