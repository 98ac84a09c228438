"""The GEMV-shaped contraction kernel, for few rows (M of 1..8: LLM decoding).

A tiled kernel wastes most of its block on rows that do not exist when M is tiny; here every
warp owns `cols` output columns and all rows, and splits k over its 32 lanes, each lane taking
runs of `vec` consecutive k (consecutive lanes: consecutive runs, so a weight stored along k
is read in whole 128-byte lines, and an int4 word serves its 8 values from one load). The
lanes' partial sums meet by warp shuffles; lane 0 applies the epilogue and stores. Rows are
taken `rows` at a time (register accumulators `rows x cols`), so any M stays correct.
`warps` warps per block take neighbouring column groups.

Reads past the last row or column are clamped into range (computed, never stored), so the
k loop has no branches; only a k extent that is not a multiple of `vec` needs a guard.
"""

from __future__ import annotations

from dataclasses import dataclass

from compiler.ir import Call, Const, Expr, Var, substitute
from compiler.loop import (
    Assign,
    Decl,
    For,
    Stmt,
    Store,
    add,
    ceildiv,
    const,
    const_value,
    mul,
    seq,
    sub,
    var,
)
from compiler.schedule.gpu.blocks import WARP, all_of, bind, covers, equal, guard, less, warp_reduce
from compiler.schedule.gpu.operands import Operands
from compiler.schedule.gpu.vectors import VEC, aligned, scalarized
from compiler.schedule.stage import Context, nest
from compiler.space.space import Config


@dataclass(frozen=True)
class Gemv:
    cols: int
    warps: int
    rows: int
    vec: int

    @classmethod
    def of(cls, config: Config) -> Gemv:
        return cls(
            int(config["gemv_cols"]),
            int(config["gemv_warps"]),
            int(config["gemv_rows"]),
            int(config["gemv_vec"]),
        )

    @property
    def threads(self) -> int:
        return WARP * self.warps

    def registers(self) -> int:
        return self.rows * self.cols + self.rows + self.cols + 40

    def lower(self, ops: Operands, ctx: Context) -> Stmt:
        acc = ops.acc
        per_block = self.warps * self.cols
        bx = bind(ctx, "bx", ceildiv(ops.cols.extent, per_block), "blockIdx.x")
        bz = bind(ctx, "bz", ops.batch.extent, "blockIdx.z")
        blocks = [bx] + ([bz] if const_value(ops.batch.extent) != 1 else [])
        batch = var(bz.var) if len(blocks) == 2 else const(0)
        ty = bind(ctx, "ty", self.warps, "threadIdx.y")
        lane = bind(ctx, "lane", WARP, "threadIdx.x")
        col0 = mul(add(mul(var(bx.var), const(self.warps)), var(ty.var)), const(self.cols))
        mo = ctx.fresh("mo")
        row0 = mul(var(mo), const(self.rows))
        last_row, last_col = sub(ops.rows.extent, const(1)), sub(ops.cols.extent, const(1))
        rows = [add(row0, const(r)) for r in range(self.rows)]
        cols = [add(col0, const(c)) for c in range(self.cols)]
        accs = [[ctx.fresh(f"c{r}x{c}") for c in range(self.cols)] for r in range(self.rows)]
        # k runs: lane `l` takes runs l, l + 32, ... of `vec` consecutive k.
        k_total = ops.k.extent
        runs = ceildiv(k_total, self.vec)
        loop_var = ctx.fresh("r")
        run_index = add(mul(var(loop_var), const(WARP)), var(lane.var))
        body = self._terms(ops, ctx, batch, rows, cols, accs, run_index, (last_row, last_col))
        k_loop = For(loop_var, ceildiv(sub(runs, var(lane.var)), WARP), body)
        stores: list[Stmt] = []
        for r, row in enumerate(rows):
            for c, col in enumerate(cols):
                point = ops.at(batch, row, col, None)
                value = Var(accs[r][c], acc)
                indices = tuple(point[a] for a in ops.stage.axes)
                conds = [] if covers(ops.rows.extent, self.rows) else [less(row, ops.rows.extent)]
                conds += [] if covers(ops.cols.extent, per_block) else [less(col, ops.cols.extent)]
                stores.append(
                    guard(
                        all_of(conds),
                        Store(ops.stage.buffer, indices, ops.stage.finish(value, point)),
                    )
                )
        reduce = [warp_reduce("sum", name, acc) for row in accs for name in row]
        chunk = seq(
            *(Decl(name, acc, init=Const(0, acc)) for row in accs for name in row),
            k_loop,
            *reduce,
            guard(equal(var(lane.var), const(0)), seq(stores)),
        )
        return nest(blocks, nest([ty, lane], For(mo, ceildiv(ops.rows.extent, self.rows), chunk)))

    def _terms(
        self,
        ops: Operands,
        ctx: Context,
        batch: Expr,
        rows: list[Expr],
        cols: list[Expr],
        accs: list[list[str]],
        run: Expr,
        last: tuple[Expr, Expr],
    ) -> Stmt:
        """The `vec` k values of one run: column and row values, then the products."""
        acc = ops.acc
        first = mul(run, const(self.vec))
        clamp: list[Expr] = [Call("min", (col, last[1]), col.dtype) for col in cols]
        loads, columns = self._vector_columns(ops, ctx, batch, clamp, first)
        whole = covers(ops.k.extent, self.vec)
        body: list[Stmt] = list(loads)
        for v in range(self.vec):
            k = add(first, const(v))
            term: list[Stmt] = []
            b_names = []
            for c, col in enumerate(clamp):
                value = columns[v][c] if columns else ops.col_value(batch, col, k)
                b_names.append(ctx.fresh("b"))
                term.append(Decl(b_names[-1], acc, init=value))
            for r, row in enumerate(rows):
                a = ctx.fresh("a")
                clamped = Call("min", (row, last[0]), row.dtype)
                term.append(Decl(a, acc, init=ops.row_value(batch, clamped, k)))
                for c, b in enumerate(b_names):
                    fma = Call("fma", (Var(a, acc), Var(b, acc), Var(accs[r][c], acc)), acc)
                    term.append(Assign(accs[r][c], fma))
            body.append(guard(None if whole else less(k, ops.k.extent), seq(term)))
        return seq(body)

    def _vector_columns(
        self, ops: Operands, ctx: Context, batch: Expr, cols: list[Expr], first: Expr
    ) -> tuple[list[Stmt], list[list[Expr]]]:
        """The weights of a run as `float4` loads (locals, and the value at [v][column]) where
        the column side is read along a single k axis with provably aligned vectors and runs
        are whole; else no locals and no values (each is read where it is used)."""
        found = None
        if len(ops.k.axes) == 1 and self.vec % VEC == 0 and covers(ops.k.extent, self.vec):
            found = aligned(ops.col_side, ops.k.axes[0], VEC, ops.shapes)
        if found is None:
            return [], []
        loads: list[Stmt] = []
        values: list[list[Expr]] = [[] for _ in range(self.vec)]
        for col in cols:
            for q in range(self.vec // VEC):
                point = ops.at(batch, None, col, add(first, const(q * VEC)))
                decls, lanes = scalarized(substitute(found, point), VEC, ctx.fresh)
                loads += decls
                for n, lane in enumerate(lanes):
                    values[q * VEC + n].append(lane)
        return loads, values
