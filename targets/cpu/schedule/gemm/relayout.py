"""The `relayout` knob's copies: the tensors a contraction's factor sides read, copied before
the blocks in the layout packing runs along, and the output stored through a copy with the
columns last, copied back after them (an NCHW convolution computed as its NHWC form).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from tunehub.compiler.analysis import Stage
from tunehub.compiler.ir import Expr, Extent, Load, loads, transform
from tunehub.compiler.loop import Stmt, Store, as_expr, const_value, var
from tunehub.compiler.schedule.plan import Plan
from tunehub.compiler.schedule.stage import Context, Loop, nest
from tunehub.compiler.schedule.vectorize import depends
from tunehub.targets.cpu.schedule.gemm.tiling import vector_loop


def relayouts(
    stage: Stage, found: Plan, vec_side: str
) -> tuple[dict[str, tuple[int, ...]], tuple[str, ...]]:
    """What `relayout` copies: each tensor a factor side reads, as the order of its
    dimensions that puts last those indexed only by what packing runs along (the broadcast
    side's reduce axes: an NCHW image's channels, so that a k run is a contiguous copy; the
    vector side's columns: an NT matmul's B[j, k] as B[k, j], so that a panel row is a vector
    copy), where that is not its own order; and the output's axes with the columns last
    (where the tile's vector stores go), the stage's own order if they are already. A tensor
    read in two layouts keeps its own."""
    lhs_runs = tuple(r.name for r in stage.anchor.reduce_axes)
    rhs_runs = found.rhs_axes
    if vec_side == "lhs":
        lhs_runs, rhs_runs = found.lhs_axes, lhs_runs
    orders: dict[str, set[tuple[int, ...]]] = {}
    for side, runs in ((found.lhs, lhs_runs), (found.rhs, rhs_runs)):
        others = tuple(a for a in (*stage.axes, *lhs_runs, *rhs_runs) if a not in runs)
        for ld in loads(side):
            alone = [
                d for d, e in enumerate(ld.indices) if depends(e, runs) and not depends(e, others)
            ]
            rest = [d for d in range(len(ld.indices)) if d not in alone]
            orders.setdefault(ld.tensor, set()).add((*rest, *alone))
    tensors = {
        tensor: order
        for tensor, (order, *more) in ((t, sorted(o)) for t, o in orders.items())
        if not more and order != tuple(range(len(order)))
    }
    col_axes = found.rhs_axes if vec_side == "rhs" else found.lhs_axes
    out = tuple(a for a in stage.axes if a not in col_axes) + tuple(
        a for a in stage.axes if a in col_axes
    )
    return tensors, out


@dataclass(frozen=True)
class Relaid:
    """A contraction as its blocks read and write it: the plan with its sides reading the
    copies, the buffer the tiles store to and its axes in order, and the copies to run
    before and after the blocks (none of either without `relayout`)."""

    found: Plan
    out_buffer: str
    out_axes: tuple[str, ...]
    before: tuple[Stmt, ...] = ()
    after: tuple[Stmt, ...] = ()


def as_written(stage: Stage, found: Plan) -> Relaid:
    """The contraction read and written where it is: no copies."""
    return Relaid(found, stage.buffer, stage.axes)


def relaid(ctx: Context, stage: Stage, found: Plan, vec_side: str, lanes: int) -> Relaid:
    """Read the sides' tensors from copies laid out as their packing runs and store the
    output through a copy with the columns last (`relayouts`): an NCHW convolution
    computed as its NHWC form, whose packing copies runs of channels and whose tiles
    store vectors of filters."""
    program = ctx.analysis.program
    tensors, out_axes = relayouts(stage, found, vec_side)
    before, after = [], []
    lhs, rhs = found.lhs, found.rhs
    for tensor, order in tensors.items():
        shape = program.buffer(tensor).shape
        copy = ctx.scratch(
            f"{tensor}_relaid", program.buffer(tensor).dtype, tuple(shape[d] for d in order)
        )

        def read(
            at: tuple[Expr, ...], tensor: str = tensor, order: tuple[int, ...] = order
        ) -> Expr:
            source = tuple(at[order.index(d)] for d in range(len(order)))
            return Load(tensor, source, program.buffer(tensor).dtype)

        before.append(_copy(ctx, lanes, copy, tuple(shape[d] for d in order), read))
        lhs = _permuted(lhs, tensor, copy, order)
        rhs = _permuted(rhs, tensor, copy, order)
    out_buffer = stage.buffer
    if out_axes != stage.axes:
        extent = dict(zip(stage.axes, stage.shape, strict=True))
        out_buffer = ctx.scratch(
            f"{stage.buffer}_relaid", stage.dtype, tuple(extent[a] for a in out_axes)
        )

        def back(at: tuple[Expr, ...]) -> Expr:
            point = dict(zip(stage.axes, at, strict=True))
            return Load(out_buffer, tuple(point[a] for a in out_axes), stage.dtype)

        after.append(_copy(ctx, lanes, stage.buffer, stage.shape, back))
    plan = dataclasses.replace(found, lhs=lhs, rhs=rhs)
    return Relaid(plan, out_buffer, out_axes, tuple(before), tuple(after))


def _permuted(side: Expr, tensor: str, copy: str, order: tuple[int, ...]) -> Expr:
    """`side` reading `copy`, `tensor` with its dimensions in `order`, instead of `tensor`."""

    def read(e: Expr) -> Expr | None:
        if isinstance(e, Load) and e.tensor == tensor:
            return Load(copy, tuple(e.indices[d] for d in order), e.dtype)
        return None

    return transform(side, read)


def _copy(
    ctx: Context,
    lanes: int,
    buffer: str,
    shape: tuple[Extent, ...],
    value: Callable[[tuple[Expr, ...]], Expr],
) -> Stmt:
    """`buffer` (of `shape`) filled with `value(index)` in its own order, the outer two
    loops parallel and the last one vectorized: contiguous stores, strided reads. Where
    the buffer's last axis is not whole vectors but the axis the source's reads walk is,
    that axis goes innermost instead: whole vectors of contiguous reads, stores spread
    (an NCHW output copied back from its channels-last copy, 28 pixels a row, 32 filters:
    12.5 -> 6.4 us of a 3x3 conv's 88, AVX-512 EPYC)."""
    loops = [Loop(ctx.fresh("r"), as_expr(size)) for size in shape]
    at = tuple(var(lp.var) for lp in loops)
    source = value(at)
    walked = [
        n
        for n, lp in enumerate(loops)
        if any(ld.indices and depends(ld.indices[-1], (lp.var,)) for ld in loads(source))
    ]
    if len(walked) == 1 and not _whole(loops[-1], lanes) and _whole(loops[walked[0]], lanes):
        loops.append(loops.pop(walked[0]))
    loops[:2] = [Loop(lp.var, lp.extent, "parallel") for lp in loops[:2]]
    if len(loops) > 2:
        loops[-1] = vector_loop(loops[-1].var, loops[-1].extent, lanes)
    return nest(loops, Store(buffer, at, source))


def _whole(loop: Loop, lanes: int) -> bool:
    """Whether a loop's extent is a whole number of vectors."""
    extent = const_value(loop.extent)
    return extent is not None and extent % lanes == 0
