"""The GEMV-shaped contraction template (`mode="gemv"`), for few rows (M of 1..8: LLM
decoding): a warp per `gemv_cols` columns, k split over lanes in runs of `gemv_vec` (up to 64:
at 32 an int4 lane has 4 weight words in flight, not 1), `gemv_rows` rows per pass,
`gemv_warps` warps per block. Offered where M is symbolic or at most `GEMV_MAX_ROWS` (its knobs
stay, at their first values, elsewhere); the default up to `GEMV_ROWS` rows.

A tiled kernel wastes most of its block on rows that do not exist when M is tiny; here every
warp owns `cols` output columns and all rows, and splits k over its 32 lanes, each lane taking
runs of `vec` consecutive k (consecutive lanes: consecutive runs, so a weight stored along k
is read in whole 128-byte lines, and an int4 word serves its 8 values from one load). The
lanes' partial sums meet by warp shuffles; lane 0 applies the epilogue and stores. Rows are
taken `rows` at a time (register accumulators `rows x cols`), so any M stays correct.
`warps` warps per block take neighbouring column groups.

Reads past the last row or column are clamped into range (computed, never stored), so the
k loop has no branches; only a k extent that is not a multiple of `vec` needs a guard. Where
none is needed, a run's reads are vector loads of up to 16 bytes (`vectors.chunked`: 8 X
values, or 32 int4 weights, per load); one scalar load per element left the int4 GEMV bound
by its L1 (78% busy on an H100 while DRAM was 19%). Where every lane takes the same number of
runs, the run loop is unrolled, so that all of a lane's loads are in flight at once.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from tunehub.compiler import dtypes
from tunehub.compiler.analysis import Stage
from tunehub.compiler.ir import Binary, Call, Cast, Const, Expr, Var, loads, transform
from tunehub.compiler.loop import (
    Assign,
    Decl,
    For,
    Stmt,
    Store,
    add,
    all_of,
    ceildiv,
    const,
    const_value,
    mul,
    seq,
    split_reads,
    sub,
    var,
)
from tunehub.compiler.schedule.stage import Context, first_values, nest
from tunehub.compiler.simplify import simplified
from tunehub.compiler.space.space import Config, Knob
from tunehub.schemas.target import Target
from tunehub.targets.gpu.limits import WARP, block_error
from tunehub.targets.gpu.schedule.blocks import (
    bind,
    covers,
    equal,
    guard,
    index_form,
    less,
    warp_reduce,
)
from tunehub.targets.gpu.schedule.contraction import Planned, bound, planned
from tunehub.targets.gpu.schedule.operands import Operands
from tunehub.targets.gpu.schedule.vectors import chunked, eager_loads


@dataclass(frozen=True)
class Gemv:
    cols: int
    warps: int
    rows: int
    vec: int
    ahead: bool = False  # every run's weights are read before the first run's products

    @classmethod
    def of(cls, config: Config) -> Gemv:
        return cls(
            int(config["gemv_cols"]),
            int(config["gemv_warps"]),
            int(config["gemv_rows"]),
            int(config["gemv_vec"]),
            bool(config["gemv_ahead"]),
        )

    @property
    def threads(self) -> int:
        return WARP * self.warps

    def runs(self, ops: Operands) -> int | None:
        """Runs per lane where every lane takes the same number (the run loop unrolls)."""
        runs = const_value(ceildiv(ops.k.extent, self.vec))
        return runs // WARP if runs is not None and runs % WARP == 0 else None

    def error(self, ops: Operands) -> str | None:
        if self.ahead and self.runs(ops) is None:
            return "gemv_ahead needs as many runs of k on every lane (the run loop unrolled)"
        return None

    def registers(self, ops: Operands) -> int:
        """The accumulators, indices and about 40 more; with `ahead`, the weights of every
        run of the lane held at once (`_weight_bytes` per k)."""
        held = 0
        if self.ahead:
            per_run = self.vec * self.cols * _weight_bytes(ops)
            held = math.ceil((self.runs(ops) or 0) * per_run / 4)
        return self.rows * self.cols + self.rows + self.cols + 40 + held

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
        runs = ceildiv(ops.k.extent, self.vec)
        loop_var = ctx.fresh("r")
        run_index = add(mul(var(loop_var), const(WARP)), var(lane.var))
        clamped_rows: list[Expr] = [Call("min", (row, last_row), row.dtype) for row in rows]
        clamped_cols: list[Expr] = [Call("min", (col, last_col), col.dtype) for col in cols]
        known = {loop.var for loop in (*blocks, ty, lane)} | {mo, loop_var}
        body = self._terms(ops, ctx, batch, clamped_rows, clamped_cols, accs, run_index, known)
        k_loop: Stmt = For(loop_var, ceildiv(sub(runs, var(lane.var)), WARP), body)
        per_lane = self.runs(ops)
        if per_lane is not None:
            # Every lane takes the same number of runs: unrolled, all their loads issue at once.
            k_loop = For(loop_var, const(per_lane), body, "unroll")
            if self.ahead:
                k_loop = _weights_first(k_loop, ops, ctx)
        stores: list[Stmt] = []
        early: list[Stmt] = []
        for r, row in enumerate(rows):
            for c, col in enumerate(cols):
                point = ops.at(batch, row, col, None)
                value = Var(accs[r][c], acc)
                indices = tuple(point[a] for a in ops.stage.axes)
                conds = [] if covers(ops.rows.extent, self.rows) else [less(row, ops.rows.extent)]
                conds += [] if covers(ops.cols.extent, per_block) else [less(col, ops.cols.extent)]
                finished = ops.stage.finish(value, point)
                inside = ops.at(batch, clamped_rows[r], clamped_cols[c], None)
                decls, finished = _read_early(finished, ops.stage.finish(value, inside), ctx)
                early += decls
                stores.append(guard(all_of(conds), Store(ops.stage.buffer, indices, finished)))
        reduce = [warp_reduce("sum", name, acc) for row in accs for name in row]
        chunk = seq(
            *early,
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
        known: set[str],
    ) -> Stmt:
        """The `vec` k values of one run: column and row values, then the products. Where
        runs are whole (every read in bounds), the run's reads become vector loads of up to
        16 bytes (`vectors.chunked`): a lane then reads its run of X and of W in a few wide
        loads, not one element at a time."""
        acc = ops.acc
        first = mul(run, const(self.vec))
        ks = [add(first, const(v)) for v in range(self.vec)]
        b_values = [ops.col_value(batch, col, k) for k in ks for col in cols]
        a_values = [ops.row_value(batch, row, k) for k in ks for row in rows]
        whole = covers(ops.k.extent, self.vec)
        factors: dict[int, Expr] = {}  # column -> its values' factor the same over the run
        if whole and ops.term is None:
            for c in range(len(cols)):
                found = _run_factor(b_values[c :: len(cols)], known)
                if found is not None:
                    b_values[c :: len(cols)], factors[c] = found
        loads: list[Decl] = []
        if whole and ops.shapes is not None:
            loads, values = chunked(b_values + a_values, ops.shapes, known, ctx.fresh)
            b_values, a_values = values[: len(b_values)], values[len(b_values) :]
        body: list[Stmt] = list(loads)
        # A factored column's products sum into a partial per run, scaled once at its end.
        sums = {(r, c): ctx.fresh("p") for r in range(len(rows)) for c in factors}
        body += [Decl(name, acc, init=Const(0, acc)) for name in sums.values()]
        for v, k in enumerate(ks):
            term: list[Stmt] = []
            b_names = []
            for value in b_values[v * len(cols) : (v + 1) * len(cols)]:
                b_names.append(ctx.fresh("b"))
                term.append(Decl(b_names[-1], acc, init=value))
            for r, value in enumerate(a_values[v * len(rows) : (v + 1) * len(rows)]):
                a = ctx.fresh("a")
                term.append(Decl(a, acc, init=value))
                for c, b in enumerate(b_names):
                    into = sums.get((r, c), accs[r][c])
                    update = ops.accumulate(Var(into, acc), Var(a, acc), Var(b, acc))
                    term.append(Assign(into, update))
            body.append(guard(None if whole else less(k, ops.k.extent), seq(term)))
        for c, factor in factors.items():
            scale = ctx.fresh("s")
            body.append(Decl(scale, acc, init=factor))
            for r in range(len(rows)):
                total = Var(accs[r][c], acc)
                update = ops.accumulate(total, Var(sums[r, c], acc), Var(scale, acc))
                body.append(Assign(accs[r][c], update))
        return seq(body)


def _weight_bytes(ops: Operands) -> float:
    """Bytes of the column (weight) side's reads per k of one column: an int4 word
    `W[n, k // 8]` gives half a byte, its scale `s[n, k // 32]` 1/16."""
    total = 0.0
    for load in set(loads(ops.col_side)):
        last = load.indices[-1] if load.indices else None
        pack = 1
        if isinstance(last, Binary) and last.op == "//" and isinstance(last.b, Const):
            pack = int(last.b.value)
        total += dtypes.itemsize(load.dtype) / pack
    return total


def _weights_first(loop: For, ops: Operands, ctx: Context) -> Stmt:
    """The run loop after a loop that reads every run's weights into registers
    (`split_reads` of the column side's buffers): all the weight bytes a lane needs are in
    flight before its first product, and only the activations, which every warp of the
    block reads (from L1), are loaded per run. Unsplit, nvcc kept one or two runs' loads in
    flight (56 registers at 4096), and an earlier kernel holding every run's activations as
    well (121 registers) was 5% faster at 4096 and 3% slower at 8192 on an H200."""
    weights = {load.tensor for load in loads(ops.col_side)}
    split = split_reads(loop, ctx.fresh, index_form, weights)
    if split is None:
        return loop
    return seq(*split.decls(split.names), split.into(split.names), split.rest)


def _run_factor(values: list[Expr], known: set[str]) -> tuple[list[Expr], Expr] | None:
    """Where each value of a run is a product with one factor that is the same at every k of
    the run (an int4 group's scale, read by `k // 32`, over a run of 32 from a multiple of
    32), the other factors and that one: the run then sums the products without it and
    multiplies once (one multiply per element fewer; with the epilogue read early, the 8192 x
    8192 int4 GEMV went 25.1 -> 24.5 us on an H200 and the 4096 one 9.8 -> 10.3, side by
    side). The sum rounds differently but no less exactly: a float16 times a 4-bit integer
    is exact in float32."""
    if len(values) < 2 or not all(isinstance(v, Binary) and v.op == "*" for v in values):
        return None
    products = [v for v in values if isinstance(v, Binary)]
    for kept, common in ((0, 1), (1, 0)):
        found = [simplified((p.a, p.b)[common], known) for p in products]
        if all(f == found[0] for f in found):
            return [(p.a, p.b)[kept] for p in products], found[0]
    return None


def _read_early(finished: Expr, inside: Expr, ctx: Context) -> tuple[list[Decl], Expr]:
    """The epilogue's reads (a bias, a residual) as locals loaded before the k loop, and the
    epilogue reading them: read after the warp's sum, they were one more trip to memory at
    the kernel's tail. `inside` is the same epilogue at the position clamped into range, so
    that the reads of rows and columns that are never stored stay in bounds; reads that only
    a branch of a `where` makes stay where they are."""
    held: dict[Expr, Expr] = {}
    decls: list[Decl] = []
    for load, safe in zip(eager_loads(finished), eager_loads(inside), strict=True):
        if load not in held:
            name, local = ctx.fresh("e"), dtypes.compute_dtype(load.dtype)  # locals: compute types
            held[load] = Cast(load.dtype, Var(name, local))
            decls.append(Decl(name, local, init=safe))
    return decls, transform(finished, lambda node: held.get(node))


GEMV: dict[str, tuple[Knob, ...]] = {
    "gemv_cols": (1, 2, 4, 8),
    "gemv_warps": (4, 1, 2, 8),
    "gemv_rows": (1, 2, 4, 8),
    "gemv_vec": (1, 2, 4, 8, 16, 32, 64),
    "gemv_ahead": (False, True),
}
# (columns, warps, k run) of the seeds: the first where rows are symbolic or many, all where
# a tuning measures few rows.
GEMV_SEEDS = ((2, 8, 32), (1, 8, 32), (1, 4, 32), (2, 4, 64), (4, 4, 16))
GEMV_ROWS = 8  # the default picks the GEMV kernel up to this many rows
GEMV_MAX_ROWS = 64  # and the space offers it up to this many (or any number of symbolic rows)


class GemvContraction(Planned):
    """The GEMV kernel (see the module doc): first among the seeds, the only ones at few rows."""

    kind = "gemv"
    priority = 3
    summary = "a GEMV: a warp per few columns, k split over its lanes"
    knob_docs: ClassVar[Mapping[str, str]] = {
        "gemv_cols": "gemv: columns per warp",
        "gemv_rows": "gemv: rows per pass",
        "gemv_vec": "gemv: k values per lane per run",
        "gemv_warps": "gemv: warps per block",
        "gemv_ahead": "gemv: every run's weights read before the first run's products",
    }

    def offered(self, stage: Stage, target: Target) -> bool:
        """Not where rows are many: the weights would be read rows / 8 times."""
        rows = const_value(planned(stage).rows.extent)
        return rows is None or rows <= GEMV_MAX_ROWS

    def knobs(self, stage: Stage, target: Target) -> dict[str, tuple[Knob, ...]]:
        return dict(GEMV)

    def naive(self, stage: Stage, target: Target) -> Config:
        return first_values(GEMV)

    def default(self, stage: Stage, target: Target) -> Config | None:
        """Up to `GEMV_ROWS` rows, where the column side is read along k."""
        ops = planned(stage)
        rows = const_value(ops.rows.extent)
        if rows is None or rows > GEMV_ROWS or not ops.k_inner("col"):
            return None
        vec = 8 if const_value(ops.k.extent) is not None else 4
        return {**self.naive(stage, target), "gemv_cols": 2, "gemv_rows": rows, "gemv_vec": vec}

    def seeds(self, stage: Stage, target: Target, symbols: Mapping[str, int]) -> list[Config]:
        """2 columns per warp, 8 warps, runs of 32 k (H100, int4 4096 x 4096 at M = 1, with a
        run's reads as vector loads: 10.1 us; 4 columns with runs of 16, the seed before them,
        13.2); where the tuning measures few rows (M bound to 1), its other shapes too
        (`GEMV_SEEDS`), and nothing else (`exclusive`). The first shape comes twice where
        every lane takes as many runs, the second reading every run's weights first
        (`gemv_ahead`)."""
        ops = planned(stage)
        rows = bound(ops.rows.extent, symbols)
        naive = self.naive(stage, target)
        seeds = [{**naive, **gemv} for gemv in _gemv_seeds(rows)]
        ahead = {**seeds[0], "gemv_ahead": True} if seeds else None
        if ahead is not None and Gemv.of(ahead).error(ops) is None:
            seeds.insert(1, ahead)
        return seeds

    def exclusive(self, stage: Stage, target: Target, symbols: Mapping[str, int]) -> bool:
        """Where the tuning measures at most `GEMV_ROWS` rows."""
        rows = bound(planned(stage).rows.extent, symbols)
        return rows is not None and rows <= GEMV_ROWS

    def check(self, stage: Stage, target: Target, config: Config) -> str | None:
        ops, gemv = planned(stage), Gemv.of(config)
        error = gemv.error(ops)
        return error or block_error(target, gemv.threads, 0, gemv.registers(ops))

    def kernel(self, ops: Operands, config: Config, ctx: Context) -> Stmt:
        return Gemv.of(config).lower(ops, ctx)


def _gemv_seeds(rows: int | None) -> list[Config]:
    """The knobs of the seeds for `rows` rows (None: symbolic): every shape of `GEMV_SEEDS`
    for few rows, taken in one pass; the first for symbolic rows or up to `GEMV_MAX_ROWS`;
    none for more."""
    if rows is not None and rows > GEMV_MAX_ROWS:
        return []
    shapes: tuple[tuple[int, int, int], ...] = GEMV_SEEDS[:1]
    per_pass = 1
    if rows is not None and rows <= GEMV_ROWS:
        shapes, per_pass = GEMV_SEEDS, min(int(r) for r in GEMV["gemv_rows"] if int(r) >= rows)
    return [
        {"gemv_cols": cols, "gemv_warps": warps, "gemv_rows": per_pass, "gemv_vec": vec}
        for cols, warps, vec in shapes
    ]
