"""The packed GEMM on a CPU's dot-product engines: which instruction computes a contraction
(`engine_for`), how its sides are packed for it (`Engine`), and its register tile (`DotTile`).

`vdpbf16ps` (AVX512-BF16) adds to each float32 lane the two products of a pair of bfloat16
values of each operand; `vpdpbusd` (AVX512-VNNI, AVX-VNNI) adds to each int32 lane the four
products of unsigned bytes of the first operand by signed bytes of the second. So both sides
are packed as words of `group` consecutive k values (`packing.Panels.group`): the column
panel's lanes each hold their word, a vector load takes `lanes` words, and a row's word is
broadcast to every lane. The panels hold the sides' own narrow values, not float32: half the
bytes (a quarter for int8) of the FMA template's panels.

signed x signed int8 uses the offset trick: the broadcast side is packed as `a + 128`
(unsigned), so a sum computes sum((a + 128) b) = sum(a b) + 128 sum(b); the tile subtracts
128 x the column sums of `b`, which `vpdpbusd`s of the constant 128 bytes by the column
panel compute once per packed block (`DotTile.column_sums`), not in every tile.

AMX (`amx_bf16`, `amx_int8`) multiplies whole tiles (`targets.cpu.loop.Tile`): its register
tile is `mr / 16` x `nv` tiles of 16 x 16 sums, each k step (16 words) loading `mr / 16`
tiles of the row panel (packed as rows: 16 rows of 64 bytes), `nv` of the column panel
(the same word layout, a tile row per word) and multiplying every pair; the sums are stored
to the spilled tile, whose stores apply the epilogue. Signed int8 needs no offset there
(`tdpbssd`). Between k blocks the sum tiles rest in the partial sums, as a register tile's
accumulators do (`TileKernel.keep`), so that a block's panels stay in L1.
"""

from __future__ import annotations

from dataclasses import dataclass

from tunehub.compiler import dtypes
from tunehub.compiler.dtypes import INDEX
from tunehub.compiler.ir import Binary, Cast, Const, Expr, Load, Var
from tunehub.compiler.loop import (
    Assign,
    Decl,
    For,
    If,
    Prefetch,
    Stmt,
    Store,
    add,
    ceildiv,
    const,
    mul,
    seq,
    var,
)
from tunehub.compiler.schedule.plan import Plan
from tunehub.compiler.schedule.vectorize import depends
from tunehub.schemas.target import Target
from tunehub.targets.cpu.loop import (
    DOT_INSTRUCTIONS,
    TILE_INSTRUCTIONS,
    TILE_ROWS,
    Dot,
    DotLoad,
    Tile,
)
from tunehub.targets.cpu.schedule.gemm.microkernel import (
    ColumnsInPlace,
    Partial,
    RegisterTile,
    RowInPlace,
)
from tunehub.targets.cpu.schedule.gemm.packing import Panels
from tunehub.targets.cpu.schedule.gemm.tiling import lanes_of

U8_OFFSET = 128


@dataclass(frozen=True)
class Engine:
    """A dot instruction of `bits`-bit registers summing `group` products per lane, and the
    dtypes the row (broadcast) and column panels hold; `offset`: the rows are signed bytes
    packed as unsigned (`a + 128`)."""

    instruction: str
    bits: int
    group: int
    rows: str
    cols: str
    offset: bool = False

    @property
    def tiles(self) -> bool:
        """Whether it multiplies AMX tiles (a `tile` instruction) rather than registers."""
        return self.instruction in TILE_INSTRUCTIONS

    @property
    def k_step(self) -> int:
        """k values per step of its register tile: one word, or a tile's 16."""
        return self.group * (TILE_ROWS if self.tiles else 1)

    def row_value(self, side: Expr) -> Expr:
        """The broadcast side's value as its panel holds it."""
        value = narrow(side)
        if not self.offset:
            return value
        wide = Binary("+", Cast("int32", value), Const(U8_OFFSET, "int32"), "int32")
        return Cast("uint8", wide)

    def col_value(self, side: Expr) -> Expr:
        return narrow(side)


def narrow(side: Expr) -> Expr:
    """A side without its widening casts: the narrow value it reads, or computes and rounds
    (`bfloat16(...)` of a dequantized weight), which is what its panel holds."""
    while isinstance(side, Cast) and _widens(side.x.dtype, side.dtype):
        side = side.x
    return side


def _widens(source: str, dtype: str) -> bool:
    """Whether casting `source` values to `dtype` keeps every one exactly."""
    return source == dtype or dtypes.BITS[source] < dtypes.BITS[dtype]


def engine_for(found: Plan, vec_side: str, target: Target) -> Engine | str:
    """The dot engine computing `found` with `vec_side` as its columns on `target`, or why
    none does: bfloat16 x bfloat16 summed in float32 on AVX512-BF16, 8-bit integers summed in
    int32 on VNNI (unsigned or signed rows, signed columns)."""
    rows, cols = (found.lhs, found.rhs) if vec_side == "rhs" else (found.rhs, found.lhs)
    row, col = narrow(rows), narrow(cols)
    if not isinstance(row, Load | Cast) or not isinstance(col, Load | Cast):
        return "the dot engines read each side as a narrow value: a load, or a rounding cast"
    if found.term is not None:
        return f"each product rounds to {found.term} before it is summed"
    bits = lanes_of(target, found.acc) * 32
    tiles = _tile_engine(found.acc, row.dtype, col.dtype, target)
    if tiles is not None:
        return tiles
    if found.acc == "float32" and row.dtype == col.dtype == "bfloat16":
        engine = Engine("vdpbf16ps", bits, 2, "bfloat16", "bfloat16")
    elif found.acc == "int32" and row.dtype in ("int8", "uint8") and col.dtype == "int8":
        engine = Engine("vpdpbusd", bits, 4, "uint8", "int8", offset=row.dtype == "int8")
    else:
        sides = f"{row.dtype} x {col.dtype} summed in {found.acc}"
        return f"no dot engine takes {sides} (bfloat16 pairs into float32, 8-bit into int32)"
    feature = DOT_INSTRUCTIONS[engine.instruction].get(bits)
    if feature is None or feature not in target.features:
        have = "+".join(target.features) or "no features"
        return f"{target} ({have}) has no {bits}-bit {engine.instruction}"
    return engine


def _tile_engine(acc: str, row: str, col: str, target: Target) -> Engine | None:
    """The AMX engine of these dtypes where the target has its tiles."""
    if "amx_tile" not in target.features:
        return None
    if acc == "float32" and row == col == "bfloat16" and "amx_bf16" in target.features:
        return Engine("tdpbf16ps", 512, 2, row, col)
    int8 = acc == "int32" and row in ("int8", "uint8") and col == "int8"
    if int8 and "amx_int8" in target.features:
        return Engine("tdpbssd" if row == "int8" else "tdpbusd", 512, 4, row, col)
    return None


@dataclass(frozen=True)
class DotTile(RegisterTile):
    """The register tile on a dot `engine`: per step, `group` k values; `nv` column
    registers loaded from the column panel, each row's word broadcast into `nv` dots. With
    the offset, `sums` is the per-thread buffer of 128 x the column sums of the block's
    column panels (`column_sums`), which each tile subtracts after its k loop."""

    engine: Engine | None = None
    sums: str = ""

    def _columns(self, cols: Panels, q: Expr, k: Expr, names: list[str]) -> list[Stmt]:
        """The column panel's `nv` registers of words at `k`."""
        assert self.engine is not None
        return [
            DotLoad(name, cols.buffer, cols.at(q, k, const(v * self.lanes)), self.engine.bits)
            for v, name in enumerate(names)
        ]

    def k_loop(
        self,
        accs: list[list[str]],
        depth: Expr,
        p: Expr,
        q: Expr,
        cols: Panels | ColumnsInPlace,
        rows: Panels | RowInPlace,
    ) -> Stmt:
        """`depth` k values (a multiple of the group) from the column panel and the rows'
        panel or, read in place, the rows' own words (`in_place_words`)."""
        engine, ctx = self.engine, self.ctx
        assert engine is not None and isinstance(cols, Panels)
        kk = ctx.fresh("k")
        k = mul(var(kk), const(engine.group))
        b_names = [ctx.fresh(f"b{v}") for v in range(self.nv)]
        body = self._columns(cols, q, k, b_names)
        if self.prefetch:
            ahead = cols.at(q, add(k, const(self.prefetch * engine.group)), const(0))
            line = 64 // dtypes.itemsize(engine.cols)
            body += [
                Prefetch(cols.buffer, (add(ahead, const(n)),))
                for n in range(0, self.nr * engine.group, line)
            ]
        for r in range(self.mr):
            buffer, word = _word(rows, p, k, r)
            for v in range(self.nv):
                dot = Dot(accs[r][v], engine.instruction, b_names[v], buffer, word, engine.bits)
                body.append(dot)
        loop = self.steps(kk, Binary("//", depth, const(engine.group), INDEX), body)
        if not self.sums:
            return loop
        vdt = self.vdt
        less = [
            Assign(accs[r][v], Binary("-", Var(accs[r][v], vdt), self._sum(q, v), vdt))
            for r in range(self.mr)
            for v in range(self.nv)
        ]
        return seq(loop, *less)

    def _sum(self, q: Expr, v: int) -> Expr:
        """128 x the column sums of column panel `q`'s v-th register."""
        return Load(self.sums, (add(mul(q, const(self.nr)), const(v * self.lanes)),), self.vdt)

    def column_sums(self, cols: Panels, count: Expr, depth: Expr) -> Stmt:
        """`sums` of the `count` columns just packed into `cols` (`depth` k values): per
        column register, `vpdpbusd` of the constant 128 bytes by its words, once per block
        rather than once per tile."""
        engine, ctx, vdt = self.engine, self.ctx, self.vdt
        assert engine is not None
        q, kk = ctx.fresh("sq"), ctx.fresh("sk")
        totals = [ctx.fresh(f"s{v}") for v in range(self.nv)]
        b_names = [ctx.fresh(f"sb{v}") for v in range(self.nv)]
        k = mul(var(kk), const(engine.group))
        body = self._columns(cols, var(q), k, b_names)
        body += [
            Dot(t, engine.instruction, b, bits=engine.bits)
            for t, b in zip(totals, b_names, strict=True)
        ]
        steps = For(kk, Binary("//", depth, const(engine.group), INDEX), seq(body))
        zero = Cast(vdt, Const(0, self.acc))
        stores = [
            Store(
                self.sums, (add(mul(var(q), const(self.nr)), const(v * self.lanes)),), Var(t, vdt)
            )
            for v, t in enumerate(totals)
        ]
        start = [Decl(t, vdt, init=zero) for t in totals]
        return For(q, ceildiv(count, self.nr), seq(*start, steps, *stores))


def _word(rows: Panels | RowInPlace, p: Expr, k: Expr, r: int) -> tuple[str, tuple[Expr, ...]]:
    """The buffer and indices of row `r`'s word at `k`: in its panel, or where the row side
    reads it (a load whose last index is k, `in_place_words`)."""
    if isinstance(rows, Panels):
        return rows.buffer, (rows.at(p, k, const(r)),)
    value = narrow(rows(r, k))
    assert isinstance(value, Load), "check() reads rows in place only from one load"
    return value.tensor, value.indices


def in_place_words(found: Plan, vec_side: str, engine: Engine, k: str) -> str | None:
    """Why the row side's words cannot be read where they are (None if they can): its
    value must be one load, unchanged (no offset), indexed by the reduce axis `k` in its
    last index alone, so that a word's values are consecutive in memory."""
    value = narrow(found.lhs if vec_side == "rhs" else found.rhs)
    if engine.offset or not isinstance(value, Load) or not value.indices:
        return "rows in place: their values must be one load, unchanged"
    *outer, last = value.indices
    if not (isinstance(last, Var) and last.name == k) or any(depends(e, (k,)) for e in outer):
        return f"rows in place: {k} must be their load's last index, and only there"
    return None


@dataclass(frozen=True)
class TileKernel(RegisterTile):
    """The register tile of AMX tiles: `mr / 16` x `nv` tiles of sums (see the module doc);
    its sums live in tile registers, so every tile is spilled to be stored."""

    engine: Engine | None = None
    in_registers = False

    def _tiles(self) -> tuple[int, int]:
        return self.mr // TILE_ROWS, self.nv

    def _sum(self, i: int, j: int) -> int:
        return i * self.nv + j

    def prepare(self) -> list[Stmt]:
        """This thread's tile configuration, once a block: `ldtilecfg` is slow (per tile,
        a fifth of a bfloat16 512^3 matmul's time), and between the block's packing and its
        tiles nothing else can have changed it."""
        return [Tile("config")]

    def start(self, accs: list[list[str]], partial: Partial | None, first: Expr) -> list[Stmt]:
        """Every sum tile at zero; with k blocks (`partial`), zeroed in the `first` block
        and loaded from the partial sums in the others."""
        ta, tb = self._tiles()
        zeros: list[Stmt] = [Tile("zero", self._sum(i, j)) for i in range(ta) for j in range(tb)]
        if partial is None:
            return zeros
        resume = [
            Tile("load", self._sum(i, j), *self._tile_at(partial, i, j)) for i, j in self._pairs()
        ]
        return [If(first, seq(*zeros), seq(*resume))]

    def keep(self, accs: list[list[str]], partial: Partial) -> Stmt:
        """Every sum tile stored into the partial sums for the next k block."""
        return seq(
            Tile("store", self._sum(i, j), *self._tile_at(partial, i, j)) for i, j in self._pairs()
        )

    def _pairs(self) -> list[tuple[int, int]]:
        ta, tb = self._tiles()
        return [(i, j) for i in range(ta) for j in range(tb)]

    def _tile_at(self, partial: Partial, i: int, j: int) -> tuple[str, tuple[Expr, ...], Expr]:
        """The buffer, offset and row stride (bytes) of sum tile (i, j) in the partial sums:
        the tile's `mr` x `nr` sums row by row, as `RegisterTile` keeps them."""
        row = add(mul(partial.tile, const(self.mr)), const(i * TILE_ROWS))
        offset = add(mul(row, const(self.nr)), const(j * TILE_ROWS))
        return partial.buffer, (offset,), const(self.nr * dtypes.itemsize(self.acc))

    def k_loop(
        self,
        accs: list[list[str]],
        depth: Expr,
        p: Expr,
        q: Expr,
        cols: Panels | ColumnsInPlace,
        rows: Panels | RowInPlace,
    ) -> Stmt:
        """`depth` k values (a multiple of 16 words) from both sides' panels."""
        engine = self.engine
        assert engine is not None and isinstance(cols, Panels) and isinstance(rows, Panels)
        ta, tb = self._tiles()
        kk = self.ctx.fresh("k")
        k = mul(var(kk), const(engine.k_step))
        a_tiles, b_tiles = [ta * tb + i for i in range(ta)], [ta * tb + ta + j for j in range(tb)]
        row_bytes = mul(rows.stride, const(dtypes.itemsize(engine.rows)))
        col_bytes = const(self.nr * engine.group * dtypes.itemsize(engine.cols))
        body: list[Stmt] = [
            Tile("load", t, rows.buffer, (rows.at(p, k, const(TILE_ROWS * i)),), row_bytes)
            for i, t in enumerate(a_tiles)
        ]
        body += [
            Tile("load", t, cols.buffer, (cols.at(q, k, const(TILE_ROWS * j)),), col_bytes)
            for j, t in enumerate(b_tiles)
        ]
        body += [
            Tile("dot", self._sum(i, j), a=a, b=b, instruction=engine.instruction)
            for i, a in enumerate(a_tiles)
            for j, b in enumerate(b_tiles)
        ]
        return self.steps(kk, Binary("//", depth, const(engine.k_step), INDEX), body)

    def spill(self, accs: list[list[str]], buffer: str) -> list[Stmt]:
        """Every sum tile stored into `buffer`, `nr` values a row."""
        ta, tb = self._tiles()
        stride = const(self.nr * dtypes.itemsize(self.acc))
        return [
            Tile(
                "store",
                self._sum(i, j),
                buffer,
                (const(i * TILE_ROWS * self.nr + j * TILE_ROWS),),
                stride,
            )
            for i in range(ta)
            for j in range(tb)
        ]
