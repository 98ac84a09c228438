"""The stores of a finished tile of a contraction: through the stage's epilogue (its bias,
relu, residual and casts, `Stage.finish`) into the output, as vector stores straight from
vector accumulators, or lane by lane from a tile spilled to a workspace, clipped at the
output's edges.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tunehub.compiler.analysis import Stage, replace_loads
from tunehub.compiler.ir import Expr, Load, Var, substitute
from tunehub.compiler.loop import Stmt, Store, add, const, mul, seq, var, vector
from tunehub.compiler.schedule.plan import Group
from tunehub.compiler.schedule.stage import Context, Loop, nest
from tunehub.compiler.schedule.vectorize import vectorize
from tunehub.targets.cpu.schedule.gemm.tiling import vector_loop


@dataclass(frozen=True)
class TileStores:
    """Where a tile of `stage` over flat `rows` and `cols` goes: `buffer`, indexed by the
    stage's axes in the order `axes` (the stage's own, or a relaid copy's), its values of
    `acc` finished by the stage's epilogue with vectors of `lanes`."""

    ctx: Context
    stage: Stage
    buffer: str
    axes: tuple[str, ...]
    rows: Group
    cols: Group
    acc: str
    lanes: int

    def direct(
        self, index: dict[str, Expr], row_base: Expr, col_base: Expr, accs: Sequence[Sequence[str]]
    ) -> Stmt | None:
        """The epilogue of a whole tile straight from the accumulators, one vector store per
        accumulator (`accs[r][v]`: row r's v-th vector of columns), when the columns are the
        output's contiguous last axis and the epilogue vectorizes along them; None otherwise
        (the spill path does it all)."""
        stage, lanes = self.stage, self.lanes
        vdt = vector(self.acc, lanes)
        if lanes == 1 or self.cols.axes != self.axes[-1:]:
            return None
        (axis,) = self.cols.axes
        marker = self.ctx.fresh("acc")  # stands for the accumulator lanes in the epilogue
        stores: list[Stmt] = []
        for r, row in enumerate(accs):
            point = {**index, **self.rows.index(add(row_base, const(r))), axis: var(axis)}
            value = stage.finish(Load(marker, (var(axis),), self.acc), point)
            vectorized = vectorize(value, axis, lanes)
            if vectorized is None:
                return None
            for v, name in enumerate(row):
                at = {axis: add(col_base, const(v * lanes))}
                result = substitute(replace_loads(vectorized, marker, Var(name, vdt)), at)
                indices = tuple(substitute(point[a], at) for a in self.axes)
                stores.append(Store(self.buffer, indices, result))
        return seq(stores)

    def spilled(
        self,
        spill: str,
        stride: int,
        index: dict[str, Expr],
        row_base: Expr,
        col_base: Expr,
        rows_left: Expr,
        cols_left: Expr,
    ) -> Stmt:
        """Store a tile spilled row by row into `spill` (`stride` values a row) through the
        stage's epilogue, clipped to `rows_left` x `cols_left` of the output."""
        r, lane = self.ctx.fresh("er"), self.ctx.fresh("el")
        point = {
            **index,
            **self.rows.index(add(row_base, var(r))),
            **self.cols.index(add(col_base, var(lane))),
        }
        value = Load(spill, (add(mul(var(r), const(stride)), var(lane)),), self.acc)
        indices = tuple(point[a] for a in self.axes)
        store = Store(self.buffer, indices, self.stage.finish(value, point))
        return nest([Loop(r, rows_left), vector_loop(lane, cols_left, self.lanes)], store)
