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

from collections.abc import Mapping
from typing import ClassVar

from tunehub.compiler.analysis import Stage, contiguous
from tunehub.compiler.dtypes import INDEX
from tunehub.compiler.ir import Binary, Call, Cast, Expr, Load, Var, substitute, walk
from tunehub.compiler.loop import (
    HORIZONTAL,
    Assign,
    Decl,
    For,
    Stmt,
    Store,
    add,
    as_expr,
    const,
    mul,
    seq,
    sub,
    var,
    vector,
)
from tunehub.compiler.schedule.guards import split_loop
from tunehub.compiler.schedule.stage import (
    Context,
    Loop,
    Schedule,
    accumulator_dtype,
    combine,
    first_values,
    hoisted,
    identity,
    keep,
    nest,
    reduce_body,
    split,
    term,
)
from tunehub.compiler.schedule.vectorize import vectorize
from tunehub.compiler.space.space import Config, Knob
from tunehub.schemas.target import Target
from tunehub.targets.cpu.isa import vector_widths
from tunehub.targets.cpu.schedule.injective import MAX_COLLAPSE, UNROLLS, innermost, tiles_below

COLUMN_TILES = (0, 16, 64, 256)


class Reduction(Schedule):
    kind = "reduction"
    summary = "a reduction loop nest: an accumulator per output, the reduce loop vectorized"
    knob_docs: ClassVar[Mapping[str, str]] = {
        "cols": "column order: the last axis tiled by this many accumulators (0: row order)",
        "parallel": "outer spatial loops collapsed into one parallel loop",
        "split": "run the outermost reduce loop in parallel (an OpenMP reduction)",
        "vec": "vector lanes of the innermost loop (0: scalar)",
        "unroll": "unroll factor of the innermost loop; with vec, independent vector accumulators",
    }

    def knobs(self, stage: Stage, target: Target) -> dict[str, tuple[Knob, ...]]:
        n = len(stage.axes)
        knobs: dict[str, tuple[Knob, ...]] = {}
        if n >= 1:
            knobs["cols"] = tiles_below(stage.shape[-1], COLUMN_TILES, covering=True)
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
        last_reduce = stage.anchor.reduce_axes[-1]
        # Row order vectorizes the reduce loop: worth it where that loop reads contiguous
        # memory and is at least a vector long; otherwise (a column sum, a depthwise
        # convolution's 3-wide window) vectorize along the output's contiguous last axis.
        short = isinstance(last_reduce.extent, int) and last_reduce.extent < int(knobs["vec"][-1])
        row_order = contiguous(stage, last_reduce.name) and not short
        if stage.axes and not row_order and contiguous(stage, stage.axes[-1]) and not stage.keeps:
            config["cols"] = max(knobs["cols"])
        config["parallel"] = min(1, len(stage.axes))
        config["split"] = not stage.axes
        config["vec"] = knobs["vec"][-1]
        if row_order and not config.get("cols") and not config["split"]:
            config["unroll"] = _accumulators(stage, int(config["vec"]), knobs["unroll"])
        return config

    def in_rows(self, stage: Stage, target: Target, config: Config, rows: int) -> Config:
        """Inside a row the stage has no parallel loop of its own, and no column order
        where the rows are all its axes."""
        unused = ["parallel", "split"] + (["cols"] if rows == len(stage.axes) else [])
        first = self.naive(stage, target)
        return {**config, **{k: first[k] for k in unused if k in config}}

    def check(self, stage: Stage, target: Target, config: Config) -> str | None:
        cols, parallel = int(config.get("cols", 0)), int(config["parallel"])
        if config["split"] and (cols or parallel):
            return "split parallelizes the reduce loop of the row order alone"
        if cols and stage.keeps:
            return "its terms are kept along the row it sums: row order alone"
        if cols and int(config["vec"]) and not contiguous(stage, stage.axes[-1]):
            # A gather per lane: slower than the scalar walk, and gcc 12 takes half a minute
            # to compile such a loop around an inlined exp (a softmax's row sum).
            return "column order vectorizes along the last axis, which its reads do not walk"
        if int(config["vec"]) and int(config["unroll"]) > 1 and (cols or config["split"]):
            return "vector accumulators are interleaved in the row order alone"
        if int(config["vec"]) and int(config["unroll"]) > 1 and _vector_term(stage, 1) is None:
            return "its terms are no contiguous vector reads: nothing to interleave"
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
        vec, unroll = int(config["vec"]), int(config["unroll"])
        if vec and unroll > 1:
            return nest(loops, _interleaved(stage, ctx, index, vec, unroll))
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


def _accumulators(stage: Stage, lanes: int, choices: tuple[Knob, ...]) -> int:
    """The default number of interleaved vector accumulators of a row-order reduction: 4 for
    a sum of plain contiguous reads at least 4 vectors long (layernorm's sums of 768: 0.0153
    -> 0.0104 ms, AVX-512), where one accumulator waits on its add latency every step; 1
    for maxima and for terms that call math functions (softmax's max and exp sum measured
    slower interleaved)."""
    vector_term = _vector_term(stage, lanes)
    extent = stage.anchor.reduce_axes[-1].extent
    if (
        4 not in choices
        or stage.anchor.reduce_op != "sum"
        or vector_term is None
        or any(isinstance(e, Call) for e in walk(vector_term))
        or (isinstance(extent, int) and extent < 4 * lanes)
    ):
        return 1
    return 4


def _vector_term(stage: Stage, lanes: int) -> Expr | None:
    """A term at `lanes` consecutive values of the innermost reduce axis as one vector value
    (its reads contiguous along it), over the anchor's own axis names; None if it is not."""
    axis = stage.anchor.reduce_axes[-1].name
    index: dict[str, Expr] = {a: var(a) for a in stage.axes}
    index.update({r.name: var(r.name) for r in stage.anchor.reduce_axes})
    return vectorize(term(stage, index), axis, max(lanes, 2))


def _interleaved(
    stage: Stage, ctx: Context, index: dict[str, Expr], lanes: int, count: int
) -> Stmt:
    """One output element in row order with `count` vector accumulators of `lanes` each, the
    innermost reduce loop stepping over `count` vectors at a time: independent chains of
    vector adds (or maxima), where one accumulator waits on its own latency every step. The
    values past the last whole step go to a scalar accumulator; all are combined at the end."""
    op, dtype = stage.anchor.reduce_op, accumulator_dtype(stage)
    assert op is not None
    vdt = vector(dtype, lanes)
    vector_term = _vector_term(stage, lanes)
    assert vector_term is not None, "check() refuses configs whose terms do not vectorize"
    *outer_axes, inner_axis = stage.anchor.reduce_axes
    accs, acc, step = ctx.fresh("accs"), ctx.fresh("acc"), lanes * count
    reduce_index = dict(index)
    outer = []
    for axis in outer_axes:
        outer.append(Loop(ctx.fresh(axis.name), as_expr(axis.extent)))
        reduce_index[axis.name] = var(outer[-1].var)
    extent = as_expr(inner_axis.extent)
    steps = Binary("//", extent, const(step), INDEX)
    whole = mul(steps, const(step))
    chunk, tail = ctx.fresh(inner_axis.name), ctx.fresh(inner_axis.name)
    updates = []
    for n in range(count):
        at = {**reduce_index, inner_axis.name: add(mul(var(chunk), const(step)), const(n * lanes))}
        element = Load(accs, (const(n),), vdt)
        stores, value = keep(stage, at, substitute(vector_term, at))
        updates += [*stores, Store(accs, (const(n),), combine(op, element, value))]
    tail_index = {**reduce_index, inner_axis.name: var(tail)}
    scalar = Var(acc, dtype)
    stores, value = keep(stage, tail_index, term(stage, tail_index))
    body = seq(
        For(chunk, steps, seq(updates)),
        For(
            tail,
            sub(extent, whole),
            seq(*stores, Assign(acc, combine(op, scalar, value))),
            start=whole,
        ),
    )
    total: Expr = Load(accs, (const(0),), vdt)
    for n in range(1, count):
        total = combine(op, total, Load(accs, (const(n),), vdt))
    (reducer,) = (fn for fn, reduces in HORIZONTAL.items() if reduces == op)
    horizontal = Call(reducer, (total,), dtype)
    spatial = tuple(index[a] for a in stage.axes)
    return seq(
        Decl(accs, vdt, (count,)),
        *(Store(accs, (const(n),), Cast(vdt, identity(op, dtype))) for n in range(count)),
        Decl(acc, dtype, init=identity(op, dtype)),
        hoisted(stage, ctx, nest(outer, body)),
        Store(stage.buffer, spatial, stage.finish(combine(op, scalar, horizontal), index)),
    )


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
    # A padded read (a depthwise convolution's) splits the tile where its guard holds.
    update = split_loop(
        lane,
        const(0),
        width,
        combine(op, element, term(stage, reduce_index)),
        lambda value: Store(acc, (var(lane),), value),
        tile.kind,
        tile.factor,
    )
    return seq(
        Decl(acc, dtype, (int(config["cols"]),)),
        nest([tile], Store(acc, (var(lane),), identity(op, dtype))),
        nest(reduce_loops, hoisted(stage, ctx, update)),
        hoisted(
            stage, ctx, nest([tile], Store(stage.buffer, spatial, stage.finish(element, index)))
        ),
    )
