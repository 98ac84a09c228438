"""The GPU contraction templates' view of a contraction: the CPU template's plan
(`plan.plan`: each factor side as one expression in the accumulator dtype) with its axes in
four flattened groups (`plan.Group`):

* **cols** (N): the spatial axes only the `col` side reads; the side holding the output's
  last axis, so that consecutive threads store consecutive addresses;
* **rows** (M): the spatial axes only the other (`row`) side reads;
* **k**: the reduce axes;
* **batch**: spatial axes both sides (or neither) read: one grid z index each.

`at` turns virtual (batch, row, col, k) positions into the stage's index, so a side read at a
tile position evaluates its prologue (casts, int4 dequantization, conv2d's padded reads)
right where the tile is loaded, and the epilogue is applied where the tile is stored.
"""

from __future__ import annotations

from dataclasses import dataclass

from tunehub.compiler.analysis import Stage
from tunehub.compiler.ir import Cast, Expr, Load, Program, loads, substitute
from tunehub.compiler.loop import as_expr
from tunehub.compiler.schedule.plan import Group, Plan, accumulate
from tunehub.compiler.schedule.vectorize import depends


@dataclass(frozen=True)
class Operands:
    stage: Stage
    row_side: Expr
    col_side: Expr
    rows: Group
    cols: Group
    k: Group
    batch: Group
    acc: str
    # Every buffer's shape, where the program is at hand (lowering), else None (space checks).
    shapes: dict[str, tuple[Expr, ...]] | None = None
    term: str | None = None  # what each product rounds to before it is summed (`Plan.term`)

    def accumulate(self, acc: Expr, a: Expr, b: Expr) -> Expr:
        """`acc + a * b` as the sum computes it (`plan.accumulate`)."""
        return accumulate(acc, a, b, self.term)

    def at(
        self, batch: Expr, row: Expr | None, col: Expr | None, k: Expr | None
    ) -> dict[str, Expr]:
        """The stage's index at these virtual positions (None: that group is not needed)."""
        point = self.batch.index(batch)
        for group, flat in ((self.rows, row), (self.cols, col), (self.k, k)):
            if flat is not None:
                point.update(group.index(flat))
        return point

    def row_value(self, batch: Expr, row: Expr, k: Expr) -> Expr:
        return substitute(self.row_side, self.at(batch, row, None, k))

    def col_value(self, batch: Expr, col: Expr, k: Expr) -> Expr:
        return substitute(self.col_side, self.at(batch, None, col, k))

    def raw(self, side: str) -> Load | None:
        """`side`'s read where the side is nothing but one read (widened to the accumulator
        at most): its tile can be copied from memory as it is (`cp.async`), where it has the
        tile's element type."""
        expr = self.row_side if side == "row" else self.col_side
        while isinstance(expr, Cast) and expr.dtype == self.acc:
            expr = expr.x
        return expr if isinstance(expr, Load) else None

    def k_inner(self, side: str) -> bool:
        """Whether `side`'s reads walk memory along k (their last index follows k and not the
        side's own axes: row-major A[m, k], B[n, k] of an NT matmul, int4 W[n, k // 8]), so
        a tile load should give consecutive threads consecutive k."""
        expr, own = (self.row_side, self.rows) if side == "row" else (self.col_side, self.cols)
        last = [ld.indices[-1] for ld in loads(expr) if ld.indices]
        return any(depends(e, self.k.axes) for e in last) and not any(
            depends(e, own.axes) for e in last
        )


def operands(stage: Stage, found: Plan, program: Program | None = None) -> Operands:
    shape = {a: as_expr(e) for a, e in zip(stage.axes, stage.shape, strict=True)}
    last = stage.axes[-1] if stage.axes else None
    if last in found.lhs_axes:
        col_axes, col_side, row_axes, row_side = (
            found.lhs_axes,
            found.lhs,
            found.rhs_axes,
            found.rhs,
        )
    else:
        col_axes, col_side, row_axes, row_side = (
            found.rhs_axes,
            found.rhs,
            found.lhs_axes,
            found.lhs,
        )
    grouped = set(row_axes) | set(col_axes)
    batch = tuple(a for a in stage.axes if a not in grouped)
    reduce = stage.anchor.reduce_axes
    return Operands(
        stage,
        row_side,
        col_side,
        Group(row_axes, tuple(shape[a] for a in row_axes)),
        Group(col_axes, tuple(shape[a] for a in col_axes)),
        Group(tuple(r.name for r in reduce), tuple(as_expr(r.extent) for r in reduce)),
        Group(batch, tuple(shape[a] for a in batch)),
        found.acc,
        None if program is None else _shapes(program),
        found.term,
    )


def _shapes(program: Program) -> dict[str, tuple[Expr, ...]]:
    shapes = {t.name: tuple(as_expr(e) for e in t.shape) for t in program.inputs}
    shapes.update({c.name: tuple(as_expr(e) for e in c.shape) for c in program.computes})
    return shapes
