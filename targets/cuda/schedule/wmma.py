"""The tensor-core contraction template (`mode="wmma"`): CUDA WMMA 16x16x16 fragments with
16-bit inputs (float16 or bfloat16) and float32 accumulation; block tile `wmma_bm x wmma_bn`,
k slices of 32 staged in shared memory as 16-bit values, `wmma_warps` warps, each
`wmma_frags` fragments tall. It applies only where both factor sides stage as the same 16-bit
float type (`staging.staged`), the accumulator is float32, the sum adds exact products and the
arch has the instructions (float16 from sm_70, bfloat16 from sm_80); its knobs exist only
then, so the spaces of other contractions are unchanged. `wmma_stages` (2 or 3: a `cp.async`
pipeline of that many shared buffers per tile) exists only on sm_80 and later where a side is
a raw 16-bit read that can be copied as it is (a side with a transforming prologue, e.g. int4
dequantization, keeps the register path); the check counts every stage's shared memory.

Grid: x over column tiles of `bn`, y over row tiles of `bm`, z over the batch. Block: `warps`
warps in a `bm / (16 * frags)` x `warps / that` grid; each warp owns `frags` x `bn / (16 *
warp columns)` accumulator fragments (float32) of its warp tile.

Per slice of `BK` = 32 along k the tiles load as `targets.cuda.schedule.staging` says (one
buffer, or with `wmma_stages` > 1 a `cp.async` pipeline). A tile keeps the layout its side has
in global memory: k contiguous (`A[m][k]`, `B[n][k]`) where the side's reads walk k, lanes
contiguous (`A[k][m]`, `B[k][n]`) otherwise, so consecutive threads read and write
consecutive addresses and a raw tile can be copied as it is; the fragments are row- or
column-major to match. Rows are padded by 8 elements against bank conflicts (a leading
dimension WMMA accepts, and rows stay 32-byte aligned). Each warp loads its fragments per 16
of k and accumulates with `mma_sync`.

The store passes each accumulator fragment through a per-warp 16 x 16 float32 scratch in
shared memory (`store_matrix_sync`, `__syncwarp`), from which every lane applies the epilogue
(bias, activation, residual, casts) to 8 elements, clipped at the edges.

The staged dtype (`staging.staged`) is the one 16-bit float type a side's float inputs have: a side
reading only float16 data (and integers: int4 weights with float16 scales) is staged as
float16, its value rounded there, as tensor-core int4 kernels round the dequantized weights.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from tunehub.compiler.analysis import Stage
from tunehub.compiler.dtypes import INDEX
from tunehub.compiler.ir import Expr, Load
from tunehub.compiler.loop import Barrier, Decl, For, Stmt, Store, add, all_of, const, mul, seq, var
from tunehub.compiler.schedule.stage import Context, first_values, nest
from tunehub.compiler.space.space import Config, Knob
from tunehub.schemas.target import Target
from tunehub.targets.cuda.limits import ASYNC_COPY, capability
from tunehub.targets.cuda.loop import Wmma
from tunehub.targets.cuda.schedule.staging import SIDES, StagedTiles, raw, staged
from tunehub.targets.gpu.limits import WARP, block_error
from tunehub.targets.gpu.schedule.blocks import covers, div, guard, less, mod
from tunehub.targets.gpu.schedule.contraction import Planned, grid_error, planned
from tunehub.targets.gpu.schedule.operands import Operands

FRAG = 16  # the WMMA fragment's M, N and K
BK = 32  # k per shared-memory slice
PAD = 8  # elements of padding per tile row


def tensor_cores(target: Target, dtype: str) -> bool:
    """Whether the target arch has WMMA for `dtype` (float16 from sm_70, bfloat16 from sm_80).
    An unknown arch gets none."""
    return capability(target) >= (70 if dtype == "float16" else 80)


def no_tensor_cores(ops: Operands, target: Target) -> str | None:
    """Why the arch's tensor cores cannot compute these operands, or None: the factor sides
    must stage as one 16-bit type the arch's tensor cores take, and the sum add exact
    products (an MMA cannot round each term, `Plan.term`)."""
    if ops.term is not None:
        return "its terms round before they are summed (tensor cores cannot round each)"
    dtype = staged(ops)
    if dtype is None:
        return "its factor sides do not stage as one 16-bit float type, summed in float32"
    if not tensor_cores(target, dtype):
        return f"no {dtype} tensor cores on this arch"
    return None


def async_copies(ops: Operands, target: Target) -> bool:
    """Whether `wmma_stages` > 1 has something to copy asynchronously on `target`."""
    return capability(target) >= ASYNC_COPY and any(raw(ops, side) is not None for side in SIDES)


@dataclass(frozen=True)
class WmmaShape:
    """The knob values of the tensor-core kernel."""

    bm: int
    bn: int
    warps: int
    frags: int  # accumulator fragments per warp along M
    stages: int = 1  # shared buffers per tile; more than one: a cp.async pipeline

    @classmethod
    def of(cls, config: Config) -> WmmaShape:
        return cls(
            int(config["wmma_bm"]),
            int(config["wmma_bn"]),
            int(config["wmma_warps"]),
            int(config["wmma_frags"]),
            int(config.get("wmma_stages", 1)),
        )

    @property
    def threads(self) -> int:
        return self.warps * WARP

    @property
    def loaders(self) -> int:
        return self.threads

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

    def width(self, side: str) -> int:
        return self.bm if side == "row" else self.bn

    def ld(self, ops: Operands, side: str) -> int:
        """The padded row length of `side`'s tile: along k or along its lanes."""
        return BK + PAD if ops.k_inner(side) else self.width(side) + PAD

    def tile_elements(self, ops: Operands, side: str) -> int:
        """Elements of one shared buffer of `side`'s tile (padding included)."""
        rows = self.width(side) if ops.k_inner(side) else BK
        return rows * self.ld(ops, side)

    def shared_bytes(self, ops: Operands) -> int:
        """Every stage of both tiles (16-bit), and the per-warp float32 scratch."""
        tiles = sum(self.tile_elements(ops, side) for side in SIDES) * 2 * self.stages
        return tiles + self.warps * FRAG * FRAG * 4

    def registers(self) -> int:
        """A rough per-thread estimate, fitted to ptxas on sm_80 (float16, bfloat16 and int4
        matmuls, 56 to 126 registers): 8 per accumulator fragment, 6 per operand fragment,
        about 24 for indices and loop state (the tile loads are a rolled loop)."""
        return 8 * self.frags * self.frags_n + 6 * (self.frags + self.frags_n) + 24


class WmmaKernel(StagedTiles):
    """Lowers one contraction stage under a `wmma` config."""

    bk = BK
    s: WmmaShape

    def __init__(self, ops: Operands, shape: WmmaShape, ctx: Context) -> None:
        super().__init__(ops, shape, ctx)
        self.ld = {side: shape.ld(ops, side) for side in SIDES}
        self.scratch = ctx.fresh("Cs")

    def lower(self) -> Stmt:
        s, ctx = self.s, self.ctx
        blocks, tx = self._bindings()
        warp, lane = ctx.fresh("warp"), ctx.fresh("lane")
        self.warp, self.lane = var(warp), var(lane)
        self.wr, self.wc = div(self.warp, s.warp_cols), mod(self.warp, s.warp_cols)
        shared = self._tile_decls()
        shared.append(Decl(self.scratch, "float32", (s.warps * FRAG * FRAG,), shared=True))
        self.accs = [[ctx.fresh(f"c{i}x{j}") for j in range(s.frags_n)] for i in range(s.frags)]
        frags = [Wmma("fragment", name, "acc", "float32") for row in self.accs for name in row]
        fills = [Wmma("fill", name) for row in self.accs for name in row]
        inner = seq(
            Decl(warp, INDEX, init=div(self.tid, WARP)),
            Decl(lane, INDEX, init=mod(self.tid, WARP)),
            *frags,
            *fills,
            self._single() if s.stages == 1 else self._pipeline(),
            self._store(),
        )
        return nest(blocks, seq(*self.block_decls, *shared, nest([tx], inner)))

    def _at(self, side: str, lane: Expr, kk: Expr) -> Expr:
        """The tile offset of (lane, k offset) within one buffer."""
        if self.ops.k_inner(side):
            return add(mul(lane, const(self.ld[side])), kk)
        return add(mul(kk, const(self.ld[side])), lane)

    def _slot(self, side: str, n: str, run: int) -> tuple[Expr, Expr]:
        """(lane, k offset) of the first of the `run` elements that pass `n` of the loading
        loop gives this thread: consecutive threads take consecutive runs along the
        contiguous direction."""
        f = add(mul(var(n), const(self.s.loaders)), self.tid)
        if self.ops.k_inner(side):
            per_lane = BK // run
            return div(f, per_lane), mul(mod(f, per_lane), const(run))
        per_k = self.s.width(side) // run
        return mul(mod(f, per_k), const(run)), div(f, per_k)

    def _compute(self, stage: Expr) -> Stmt:
        """Per 16 of the slice's k: the warp's A and B fragments from buffer `stage`, then
        their products."""
        s, ctx = self.s, self.ctx
        stmts: list[Stmt] = []
        names = {
            "row": [ctx.fresh("fa") for _ in range(s.frags)],
            "col": [ctx.fresh("fb") for _ in range(s.frags_n)],
        }
        first = {
            "row": mul(self.wr, const(s.frags * FRAG)),
            "col": mul(self.wc, const(s.frags_n * FRAG)),
        }
        for side, use in (("row", "a"), ("col", "b")):
            major = "row" if self.ops.k_inner(side) == (use == "a") else "col"
            stmts += [Wmma("fragment", name, use, self.dtype, layout=major) for name in names[side]]
        for kk in range(0, BK, FRAG):
            for side in SIDES:
                for i, name in enumerate(names[side]):
                    lane = add(first[side], const(i * FRAG))
                    offset = add(self._base(side, stage), self._at(side, lane, const(kk)))
                    stmts.append(
                        Wmma("load", name, buffer=self.tiles[side], offset=offset, ld=self.ld[side])
                    )
            for i, a in enumerate(names["row"]):
                for j, b in enumerate(names["col"]):
                    stmts.append(Wmma("mma", self.accs[i][j], a=a, b=b))
        return seq(stmts)

    def _store(self) -> Stmt:
        """Each accumulator fragment through the warp's scratch, then the epilogue per
        element (8 per lane), clipped at the edges."""
        ops, s, stage = self.ops, self.s, self.ops.stage
        base = mul(self.warp, const(FRAG * FRAG))
        out: list[Stmt] = []
        for i, row_frags in enumerate(self.accs):
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


WMMA: dict[str, tuple[Knob, ...]] = {
    "wmma_bm": (64, 128),
    "wmma_bn": (64, 128),
    "wmma_warps": (4, 8),
    "wmma_frags": (2, 1, 4),
}
WMMA_ASYNC: dict[str, tuple[Knob, ...]] = {"wmma_stages": (1, 2, 3)}


class WmmaContraction(Planned):
    """The WMMA tensor-core kernel (see the module doc)."""

    kind = "wmma"
    priority = 1  # its seed comes after the GEMV's and wgmma's
    summary = "WMMA tensor cores: 16x16x16 fragments per warp, tiles staged in shared memory"
    knob_docs: ClassVar[Mapping[str, str]] = {
        "wmma_bm": "wmma: rows of the block tile",
        "wmma_bn": "wmma: columns of the block tile",
        "wmma_warps": "wmma: warps per block",
        "wmma_frags": "wmma: 16x16 fragments each warp holds, tall",
        "wmma_stages": "wmma: shared buffers of the cp.async pipeline (1: register path)",
    }

    def unfit(self, ops: Operands, target: Target) -> str | None:
        return no_tensor_cores(ops, target)

    def knobs(self, stage: Stage, target: Target) -> dict[str, tuple[Knob, ...]]:
        copies = async_copies(planned(stage), target)
        return {**WMMA, **(WMMA_ASYNC if copies else {})}

    def naive(self, stage: Stage, target: Target) -> Config:
        return first_values(self.knobs(stage, target))

    def default(self, stage: Stage, target: Target) -> Config | None:
        return None

    def seeds(self, stage: Stage, target: Target, symbols: Mapping[str, int]) -> list[Config]:
        """128 x 128 tiles of 8 warps (H100, 4096^3 float16: 468 us), through the deepest
        `cp.async` pipeline where there is one."""
        knobs = self.knobs(stage, target)
        seed: Config = {"wmma_bm": 128, "wmma_bn": 128, "wmma_warps": 8, "wmma_frags": 2}
        if "wmma_stages" in knobs:
            seed["wmma_stages"] = 3 if 3 in knobs["wmma_stages"] else 1
        return [{**first_values(knobs), **seed}]

    def check(self, stage: Stage, target: Target, config: Config) -> str | None:
        ops, shape = planned(stage), WmmaShape.of(config)
        error = shape.error()
        if error is not None:
            return error
        if shape.stages > 1 and not async_copies(ops, target):
            return "cp.async stages need sm_80 or later and a side copied raw"
        error = grid_error(ops, shape.bm, target)
        if error is not None:
            return error
        return block_error(target, shape.threads, shape.shared_bytes(ops), shape.registers())

    def kernel(self, ops: Operands, config: Config, ctx: Context) -> Stmt:
        return WmmaKernel(ops, WmmaShape.of(config), ctx).lower()
