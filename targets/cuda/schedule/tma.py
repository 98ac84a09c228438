"""What the copy engine (sm_90 TMA, `targets.cuda.loop.TensorCopy`) can move for a Hopper
contraction kernel (`wgmma.py`): the factor sides it can bring into shared memory whole, and
whether the output tile can leave through it.

A tensor map describes a whole buffer (up to 5 dimensions, the innermost contiguous, the
others' byte strides multiples of 16) and boxes of it; a copy brings a box at element
coordinates and writes it in the 128-byte swizzle the wgmma tiles use, elements outside the
buffer as zeros; a store leaves out what lies outside. So a tile can come by TMA only where
each of its two walked axes is one index of the buffer, and where the zeros a box brings
past the buffer's edge are the zeros the sum needs past k's.
"""

from __future__ import annotations

from tunehub.compiler.dtypes import itemsize
from tunehub.compiler.ir import Expr, Var
from tunehub.compiler.loop import as_expr, const_value, var
from tunehub.compiler.schedule.vectorize import depends
from tunehub.compiler.simplify import summands
from tunehub.targets.cuda.schedule.staging import SIDES, evaluated, raw
from tunehub.targets.gpu.schedule.operands import Operands


def tensor_sides(ops: Operands) -> dict[str, tuple[int, int]]:
    """The sides whose tiles the copy engine can bring whole (TMA, `TensorCopy`), each with
    the positions of its read's indices that walk k and the side's lanes. Such a side is
    copied as it is (not `evaluated`), in at most 5 dimensions; k and the lanes are one axis
    each, k read as itself and the lanes plus an offset, each in an index of its own; and the
    buffer's extent along k is k's, so the zeros a copy brings past the buffer's edge are the
    zeros past k's (without the shapes, in a space check, the lowering decides)."""
    found = {}
    for side in SIDES:
        load, group = raw(ops, side), ops.rows if side == "row" else ops.cols
        if side in evaluated(ops) or load is None or len(load.indices) > 5:
            continue
        if len(ops.k.axes) != 1 or len(group.axes) != 1:
            continue
        k, lane = ops.k.axes[0], group.axes[0]
        walks = [
            [n for n, index in enumerate(load.indices) if depends(index, (axis,))]
            for axis in (k, lane)
        ]
        if any(len(w) != 1 for w in walks) or walks[0] == walks[1]:
            continue
        at_k, at_lane = walks[0][0], walks[1][0]
        terms = summands(load.indices[at_lane])
        offset = [t for t in terms if not (isinstance(t, Var) and t.name == lane)]
        if load.indices[at_k] != var(k) or len(offset) != len(terms) - 1:
            continue
        if any(depends(t, (k, lane)) for t in offset):
            continue
        if ops.shapes is not None and not _same(ops.shapes[load.tensor][at_k], ops.k.extent):
            continue
        found[side] = (at_k, at_lane)
    return found


STORE_TYPES = ("float16", "bfloat16", "float32")  # what a tensor map of ours holds


def tensor_output(ops: Operands) -> bool:
    """Whether the tile can leave through the copy engine (TMA stores, `store`): the stage
    stores an output of 2- or 4-byte floats, its last axis the columns' one axis, the rows'
    one axis another, at most 5 axes, rows starting 16-byte aligned."""
    stage = ops.stage
    if not stage.output or stage.dtype not in STORE_TYPES or len(stage.axes) > 5:
        return False
    if len(ops.rows.axes) != 1 or ops.cols.axes != (stage.axes[-1],):
        return False
    row = const_value(as_expr(stage.shape[-1]))
    return row is not None and row * itemsize(stage.dtype) % 16 == 0


def _same(a: Expr, b: Expr) -> bool:
    known = const_value(a), const_value(b)
    return known[0] == known[1] if None not in known else a == b
