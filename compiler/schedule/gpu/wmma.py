"""The tensor-core contraction kernel (`mode="wmma"`): CUDA WMMA 16x16x16 fragments with
16-bit inputs (float16 or bfloat16) and float32 accumulation. See
`compiler.schedule.gpu.contraction` for the knobs.

Grid: x over column tiles of `bn`, y over row tiles of `bm`, z over the batch. Block: `warps`
warps in a `bm / (16 * frags)` x `warps / that` grid; each warp owns `frags` x `bn / (16 *
warp columns)` accumulator fragments (float32) of its warp tile.

Per slice of `BK` = 32 along k, the block's threads load the `bm x BK` and `bn x BK` tiles into
shared memory as 16-bit values, evaluating the factor sides there (prologue: casts, int4
dequantization, padded reads), out-of-range elements as 0. Both tiles are stored lane-major
with k contiguous (`A[m][k]`, row-major fragments; `B[n][k]`, column-major fragments), rows
padded by 8 elements against bank conflicts (a leading dimension WMMA accepts, and rows stay
32-byte aligned). A barrier; each warp loads its fragments per 16 of k and accumulates with
`mma_sync`; a barrier.

The store passes each accumulator fragment through a per-warp 16 x 16 float32 scratch in
shared memory (`store_matrix_sync`, `__syncwarp`), from which every lane applies the epilogue
(bias, activation, residual, casts) to 8 elements, clipped at the edges.

The staged dtype (`staged`) is the one 16-bit float type a side's float inputs have: a side
reading only float16 data (and integers: int4 weights with float16 scales) is staged as
float16, its value rounded there, as tensor-core int4 kernels round the dequantized weights.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from compiler import dtypes
from compiler.dtypes import INDEX
from compiler.ir import Const, Expr, Load, loads
from compiler.loop import (
    Barrier,
    Decl,
    For,
    If,
    Stmt,
    Store,
    Wmma,
    add,
    ceildiv,
    const,
    const_value,
    mul,
    seq,
    var,
)
from compiler.schedule.gpu.blocks import WARP, all_of, bind, covers, div, guard, less, mod
from compiler.schedule.gpu.operands import Operands
from compiler.schedule.stage import Context, nest
from compiler.space.space import Config
from schemas.target import Target

FRAG = 16  # the WMMA fragment's M, N and K
BK = 32  # k per shared-memory slice
PAD = 8  # elements of padding per tile row
SIDES = ("row", "col")


def staged(ops: Operands) -> str | None:
    """The 16-bit float dtype both factor sides are staged as, or None where the sides do
    not both read exactly one (the same) 16-bit float type among their float inputs, or the
    accumulator is not float32."""
    if ops.acc != "float32":
        return None
    found = set()
    for side in (ops.row_side, ops.col_side):
        floats = {ld.dtype for ld in loads(side) if dtypes.is_float(ld.dtype)}
        if len(floats) != 1 or not dtypes.is_half(next(iter(floats))):
            return None
        found |= floats
    return found.pop() if len(found) == 1 else None


def tensor_cores(target: Target, dtype: str) -> bool:
    """Whether the target arch has WMMA for `dtype` (float16 from sm_70, bfloat16 from sm_80).
    An unknown arch (None: whatever the workers have) gets none."""
    match = re.match(r"^sm_(\d+)", target.arch or "")
    if match is None:
        return False
    return int(match.group(1)) >= (70 if dtype == "float16" else 80)


@dataclass(frozen=True)
class WmmaShape:
    """The knob values of the tensor-core kernel."""

    bm: int
    bn: int
    warps: int
    frags: int  # accumulator fragments per warp along M

    @classmethod
    def of(cls, config: Config) -> WmmaShape:
        return cls(
            int(config["wmma_bm"]),
            int(config["wmma_bn"]),
            int(config["wmma_warps"]),
            int(config["wmma_frags"]),
        )

    @property
    def threads(self) -> int:
        return self.warps * WARP

    @property
    def warp_rows(self) -> int:
        return self.bm // (FRAG * self.frags)

    @property
    def warp_cols(self) -> int:
        return self.warps // max(self.warp_rows, 1)

    @property
    def frags_n(self) -> int:
        return self.bn // (FRAG * self.warp_cols)

    def error(self) -> str | None:
        """Why the warp grid does not tile the block tile, or None."""
        if self.bm % (FRAG * self.frags) or self.warp_rows < 1:
            return f"bm={self.bm} is not a whole number of {self.frags}-fragment warp rows"
        if self.warps % self.warp_rows:
            return f"{self.warp_rows} warp rows do not divide {self.warps} warps"
        if self.bn % (FRAG * self.warp_cols) or self.frags_n < 1:
            return f"bn={self.bn} does not split into {self.warp_cols} warp columns of fragments"
        for width in (self.bm, self.bn):
            if (width * BK) % self.threads:
                return f"a {width} x {BK} tile does not split evenly over {self.threads} threads"
        return None

    def shared_bytes(self) -> int:
        tiles = (self.bm + self.bn) * (BK + PAD) * 2
        return tiles + self.warps * FRAG * FRAG * 4

    def registers(self) -> int:
        """A rough per-thread estimate, fitted to ptxas on sm_80 (float16, bfloat16 and int4
        matmuls, 56 to 126 registers): 8 per accumulator fragment, 6 per operand fragment,
        about 24 for indices and loop state (the tile loads are a rolled loop)."""
        return 8 * self.frags * self.frags_n + 6 * (self.frags + self.frags_n) + 24


class WmmaKernel:
    """Lowers one contraction stage under a `wmma` config."""

    def __init__(self, ops: Operands, shape: WmmaShape, ctx: Context) -> None:
        dtype = staged(ops)
        assert dtype is not None and shape.error() is None
        self.ops, self.s, self.ctx, self.dtype = ops, shape, ctx, dtype
        self.ld = BK + PAD
        self.tiles = {side: ctx.fresh("As" if side == "row" else "Bs") for side in SIDES}
        self.scratch = ctx.fresh("Cs")

    def lower(self) -> Stmt:
        ops, s, ctx = self.ops, self.s, self.ctx
        bx = bind(ctx, "bx", ceildiv(ops.cols.extent, s.bn), "blockIdx.x")
        by = bind(ctx, "by", ceildiv(ops.rows.extent, s.bm), "blockIdx.y")
        bz = bind(ctx, "bz", ops.batch.extent, "blockIdx.z")
        blocks = [bx, by] + ([bz] if const_value(ops.batch.extent) != 1 else [])
        self.batch = var(bz.var) if len(blocks) == 3 else const(0)
        self.row0, self.col0 = mul(var(by.var), const(s.bm)), mul(var(bx.var), const(s.bn))
        tx = bind(ctx, "tx", s.threads, "threadIdx.x")
        self.tid = var(tx.var)
        warp, lane = ctx.fresh("warp"), ctx.fresh("lane")
        self.warp, self.lane = var(warp), var(lane)
        self.wr, self.wc = div(self.warp, s.warp_cols), mod(self.warp, s.warp_cols)
        shared = [
            Decl(
                self.tiles[side],
                self.dtype,
                ((s.bm if side == "row" else s.bn) * self.ld,),
                shared=True,
            )
            for side in SIDES
        ]
        shared.append(Decl(self.scratch, "float32", (s.warps * FRAG * FRAG,), shared=True))
        accs = [[ctx.fresh(f"c{i}x{j}") for j in range(s.frags_n)] for i in range(s.frags)]
        frags = [Wmma("fragment", name, "acc", "float32") for row in accs for name in row]
        fills = [Wmma("fill", name) for row in accs for name in row]
        t = ctx.fresh("t")
        k0 = mul(var(t), const(BK))
        body = seq(self._load(k0), Barrier(), self._compute(accs), Barrier())
        main = For(t, ceildiv(ops.k.extent, BK), body)
        inner = seq(
            Decl(warp, INDEX, init=div(self.tid, WARP)),
            Decl(lane, INDEX, init=mod(self.tid, WARP)),
            *frags,
            *fills,
            main,
            self._store(accs),
        )
        return nest(blocks, seq(*shared, nest([tx], inner)))

    def _load(self, k0: Expr) -> Stmt:
        """This thread's share of both tiles at k slice `k0`, out-of-range elements as 0 (a
        loop kept rolled: unrolled, nvcc holds every load's address in registers)."""
        ops, s, ctx = self.ops, self.s, self.ctx
        zero = Const(0, "float32")
        out: list[Stmt] = []
        k_whole = covers(ops.k.extent, BK)
        for side in SIDES:
            width = s.bm if side == "row" else s.bn
            group = ops.rows if side == "row" else ops.cols
            start = self.row0 if side == "row" else self.col0
            n = ctx.fresh("n")
            f = add(mul(var(n), const(s.threads)), self.tid)
            if ops.k_inner(side):  # consecutive threads read consecutive k
                lane_, kk = div(f, BK), mod(f, BK)
            else:
                lane_, kk = mod(f, width), div(f, width)
            position, k = add(start, lane_), add(k0, kk)
            conds = [] if covers(group.extent, width) else [less(position, group.extent)]
            conds += [] if k_whole else [less(k, ops.k.extent)]
            if side == "row":
                value = ops.row_value(self.batch, position, k)
            else:
                value = ops.col_value(self.batch, position, k)
            at = (add(mul(lane_, const(self.ld)), kk),)
            tile = self.tiles[side]
            store: Stmt = Store(tile, at, value)
            cond = all_of(conds)
            body = store if cond is None else If(cond, store, Store(tile, at, zero))
            out.append(For(n, const(width * BK // s.threads), body, "unroll", factor=1))
        return seq(out)

    def _compute(self, accs: list[list[str]]) -> Stmt:
        """Per 16 of the slice's k: the warp's A and B fragments, then their products."""
        s, ctx = self.s, self.ctx
        stmts: list[Stmt] = []
        a_names = [ctx.fresh("fa") for _ in range(s.frags)]
        b_names = [ctx.fresh("fb") for _ in range(s.frags_n)]
        stmts += [Wmma("fragment", name, "a", self.dtype) for name in a_names]
        stmts += [Wmma("fragment", name, "b", self.dtype) for name in b_names]
        for kk in range(0, BK, FRAG):
            for i, name in enumerate(a_names):
                row = add(mul(self.wr, const(s.frags * FRAG)), const(i * FRAG))
                offset = add(mul(row, const(self.ld)), const(kk))
                stmts.append(
                    Wmma("load", name, buffer=self.tiles["row"], offset=offset, ld=self.ld)
                )
            for j, name in enumerate(b_names):
                col = add(mul(self.wc, const(s.frags_n * FRAG)), const(j * FRAG))
                offset = add(mul(col, const(self.ld)), const(kk))
                stmts.append(
                    Wmma("load", name, buffer=self.tiles["col"], offset=offset, ld=self.ld)
                )
            for i, a in enumerate(a_names):
                for j, b in enumerate(b_names):
                    stmts.append(Wmma("mma", accs[i][j], a=a, b=b))
        return seq(stmts)

    def _store(self, accs: list[list[str]]) -> Stmt:
        """Each accumulator fragment through the warp's scratch, then the epilogue per
        element (8 per lane), clipped at the edges."""
        ops, s, stage = self.ops, self.s, self.ops.stage
        base = mul(self.warp, const(FRAG * FRAG))
        out: list[Stmt] = []
        for i, row_frags in enumerate(accs):
            for j, name in enumerate(row_frags):
                out.append(Wmma("store", name, buffer=self.scratch, offset=base, ld=FRAG))
                out.append(Barrier(warp=True))
                row0 = add(self.row0, add(mul(self.wr, const(s.frags * FRAG)), const(i * FRAG)))
                col0 = add(self.col0, add(mul(self.wc, const(s.frags_n * FRAG)), const(j * FRAG)))
                e = self.ctx.fresh("e")
                flat = add(mul(var(e), const(WARP)), self.lane)
                row, col = add(row0, div(flat, FRAG)), add(col0, mod(flat, FRAG))
                point = ops.at(self.batch, row, col, None)
                value = Load(self.scratch, (add(base, flat),), "float32")
                indices = tuple(point[a] for a in stage.axes)
                store = Store(stage.buffer, indices, stage.finish(value, point))
                conds = [] if covers(ops.rows.extent, s.bm) else [less(row, ops.rows.extent)]
                conds += [] if covers(ops.cols.extent, s.bn) else [less(col, ops.cols.extent)]
                body = guard(all_of(conds), store)
                out.append(For(e, const(FRAG * FRAG // WARP), body, "unroll", factor=1))
                out.append(Barrier(warp=True))
        return seq(out)
