"""The shared-memory tile pipeline of the tensor-core contraction kernels (`wmma.py`,
`wgmma.py`): per k slice of `bk`, the block's threads bring the row side's `bm x bk` tile and
the column side's `bn x bk` tile into shared memory, then the kernel's math reads them.

A raw side (a plain read of a 16-bit float buffer along a single walked axis) is copied as it
is with `cp.async` where `stages` > 1 (sm_80 and later): 16-byte runs (`.cg`) where the
alignment is provable, else 8 or 4 bytes (`.ca`), tails zero-filled by the copy's source
size. Any other side (a prologue that transforms its values: int4 dequantization, casts,
padded reads) is evaluated in registers and stored, out-of-range elements as 0.

With one stage a slice is load, barrier, math, barrier. With `stages` > 1 the loads are a
pipeline: `stages - 1` slices are issued ahead; per slice the thread waits for its oldest group
of copies (`cp.async.wait_group stages - 2`), a barrier makes every thread's copies visible
(and frees the buffer computed last), the slice `stages - 1` ahead is issued into that buffer
and committed, and the current one is computed: one barrier per slice. A kernel whose math
runs in the background (`lag` slices of it still in flight when the next slice begins) issues
`lag` fewer slices ahead, so that no buffer is refilled while the math may still read it.

A kernel supplies the tile layout (`_slot`: which elements a thread loads per pass; `_at`:
where an element sits in a buffer), the math of one slice (`_compute`) and what makes the
tiles visible to that math (`_visible`).
"""

from __future__ import annotations

from typing import Protocol

from tunehub.compiler import dtypes
from tunehub.compiler.dtypes import INDEX, itemsize
from tunehub.compiler.ir import Binary, Call, Const, Expr, Load, loads, substitute
from tunehub.compiler.loop import (
    Barrier,
    Decl,
    For,
    If,
    Stmt,
    Store,
    add,
    ceildiv,
    const,
    const_value,
    map_exprs,
    minimum,
    mul,
    seq,
    split_reads,
    sub,
    var,
    vector,
)
from tunehub.compiler.schedule.stage import Context, Loop
from tunehub.targets.cuda.loop import AsyncCopy
from tunehub.targets.gpu.schedule.blocks import bind, covers, guard, index_form, less, mod
from tunehub.targets.gpu.schedule.operands import Operands
from tunehub.targets.gpu.schedule.tiles import walked
from tunehub.targets.gpu.schedule.vectors import aligned_run

SIDES = ("row", "col")
RUNS = (8, 4, 2)  # elements per cp.async of a 16-bit tile: 16, 8 or 4 bytes


def raw(ops: Operands, side: str) -> Load | None:
    """`side`'s single read where the side is that read of a 16-bit float buffer, widened and
    nothing else, along a single walked axis: a tile that can be copied as it is."""
    load = ops.raw(side)
    if load is None or not dtypes.is_half(load.dtype) or walked(ops, side) is None:
        return None
    return load


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


class TileShape(Protocol):
    """What the pipeline needs of a kernel's knob values."""

    @property
    def stages(self) -> int: ...

    @property
    def threads(self) -> int: ...

    @property
    def loaders(self) -> int:
        """The threads that load the tiles, the first ones of the block."""
        ...

    def width(self, side: str) -> int: ...

    def tile_elements(self, ops: Operands, side: str) -> int: ...

    def error(self) -> str | None: ...


def copy_run(ops: Operands, shape: TileShape, side: str, bk: int) -> int:
    """Elements per `cp.async` of `side`'s tile, 0 where the side is not copied raw (its
    values are transformed, or no run of 2 or more is provably aligned)."""
    load, found = raw(ops, side), walked(ops, side)
    if load is None or found is None:
        return 0
    for run in RUNS:
        whole = (shape.width(side) * bk // run) % shape.loaders == 0
        if whole and aligned_run(load, found[0], run, ops.shapes):
            return run
    return 0


def evaluated(ops: Operands) -> list[str]:
    """The sides a Hopper kernel's tiles evaluate in registers and store: all but a raw side
    whose 16-byte runs are provably aligned, which is copied as it is (by `cp.async` or the
    copy engine; the tile shapes a kernel allows split such runs evenly over the loaders)."""
    out = []
    for side in SIDES:
        load, found = raw(ops, side), walked(ops, side)
        if load is None or found is None or not aligned_run(load, found[0], RUNS[0], ops.shapes):
            out.append(side)
    return out


def register_run(ops: Operands, shape: TileShape, side: str, bk: int) -> int:
    """Elements per pass of a side staged through registers (`StagedTiles._stage`)."""
    runs = (*RUNS, 1) if raw(ops, side) is None else (1,)
    return next(r for r in runs if (shape.width(side) * bk // r) % shape.loaders == 0)


class StagedTiles:
    """The tile loads and the pipeline of one contraction kernel (see the module doc)."""

    bk: int  # k per slice
    lag = 0  # slices whose math may still run when the next slice's loads are issued
    s: TileShape
    tid: Expr  # the thread's index in the block
    batch: Expr
    row0: Expr  # where the block's tile starts along the rows and the columns
    col0: Expr
    block_decls: list[Stmt]  # locals the block's tile position reads, before its uses
    tile: str  # the loop over a block's tiles (`_bindings`), "" for one tile per block
    tile_valid: Expr | None  # whether the loop's current tile exists

    def __init__(self, ops: Operands, shape: TileShape, ctx: Context) -> None:
        dtype = staged(ops)
        assert dtype is not None and shape.error() is None
        self.ops, self.s, self.ctx, self.dtype = ops, shape, ctx, dtype
        self.tiles = {side: ctx.fresh("As" if side == "row" else "Bs") for side in SIDES}
        self.runs = {
            side: copy_run(ops, shape, side, self.bk) if shape.stages > 1 else 0 for side in SIDES
        }

    def _bindings(self, raster: int = 1, tiles: int = 1) -> tuple[list[Loop], Loop]:
        """The block bindings (x over column tiles of `bn`, y over row tiles of `bm`, z over
        the batch where there is one) and the thread binding; sets where the block's tile
        starts and the thread's index.

        With `raster` > 1 blocks take tiles in groups of `raster` row tiles, column by
        column within a group (Triton's grouped ordering): the blocks resident at once then
        share row and column panels in L2 instead of all sweeping one row of tiles. The
        grouped tile's row and column are then locals (`block_decls`, declared where the
        kernel uses them): every tile load's address uses them, and nvcc does not hoist their
        64-bit divisions out of the loops that issue the loads (a producer warpgroup that
        recomputed them per copy ran 786 us at 4096^3 on an H100, 218 in row order).

        With `tiles` > 1 each block computes that many tiles in turn (the kernel's loop over
        `tile`, each tile's work under `tile_valid`): grid x is the tiles in that order
        divided by `tiles`, and the block's i-th tile is the one a grid further on than its
        (i - 1)-th, so the tiles computed at once are neighbours as they are with one tile
        per block."""
        ops, ctx = self.ops, self.ctx
        bm, bn = self.s.width("row"), self.s.width("col")
        self.block_decls = []
        across, down = ceildiv(ops.cols.extent, bn), ceildiv(ops.rows.extent, bm)
        bz = bind(ctx, "bz", ops.batch.extent, "blockIdx.z")
        batched = const_value(ops.batch.extent) != 1
        self.batch = var(bz.var) if batched else const(0)
        self.tile, self.tile_valid = "", None
        if tiles > 1:
            total = mul(across, down)
            grid = ceildiv(total, tiles)
            bx = bind(ctx, "bx", grid, "blockIdx.x")
            blocks = [bx]
            self.tile = ctx.fresh("tile")
            order = add(var(bx.var), mul(var(self.tile), grid))
            self.tile_valid = less(order, total)
            self._place(order, across, down, raster)
        else:
            bx = bind(ctx, "bx", across, "blockIdx.x")
            by = bind(ctx, "by", down, "blockIdx.y")
            blocks = [bx, by]
            if raster > 1:
                self._place(add(mul(var(by.var), across), var(bx.var)), across, down, raster)
            else:
                self.row0, self.col0 = mul(var(by.var), const(bm)), mul(var(bx.var), const(bn))
        tx = bind(ctx, "tx", self.s.threads, "threadIdx.x")
        self.tid = var(tx.var)
        return blocks + ([bz] if batched else []), tx

    def _place(self, order: Expr, across: Expr, down: Expr, raster: int) -> None:
        """The tile `order`-th in the block order (rows of tiles, or groups of `raster` row
        tiles taken column by column) as the locals `block_decls` declares; sets where it
        starts (`row0`, `col0`)."""
        ctx = self.ctx
        if raster > 1:
            per_group = mul(across, const(raster))
            first = mul(Binary("//", order, per_group, INDEX), const(raster))
            size = minimum(sub(down, first), const(raster))
            within = Binary("%", order, per_group, INDEX)
            row = add(first, Binary("%", within, size, INDEX))
            col = Binary("//", within, size, INDEX)
        else:
            row, col = Binary("//", order, across, INDEX), Binary("%", order, across, INDEX)
        named_row, named_col = ctx.fresh("tile_row"), ctx.fresh("tile_col")
        self.block_decls = [Decl(named_row, INDEX, init=row), Decl(named_col, INDEX, init=col)]
        bm, bn = self.s.width("row"), self.s.width("col")
        self.row0, self.col0 = mul(var(named_row), const(bm)), mul(var(named_col), const(bn))

    def _tile_decls(self) -> list[Stmt]:
        """Both tiles' shared arrays, every stage of each."""
        s = self.s
        sizes = {side: s.stages * s.tile_elements(self.ops, side) for side in SIDES}
        return [Decl(self.tiles[side], self.dtype, (sizes[side],), shared=True) for side in SIDES]

    def _at(self, side: str, lane: Expr, kk: Expr) -> Expr:
        """The tile offset of (lane, k offset) within one buffer."""
        raise NotImplementedError

    def _slot(self, side: str, n: str, run: int) -> tuple[Expr, Expr]:
        """(lane, k offset) of the first of the `run` elements that pass `n` of the loading
        loop gives this thread."""
        raise NotImplementedError

    def _compute(self, stage: Expr) -> Stmt:
        """The math of the slice in buffer `stage`."""
        raise NotImplementedError

    def _single(self) -> Stmt:
        """One buffer per tile: load, barrier, compute, barrier per slice."""
        t = self.ctx.fresh("t")
        load, compute = self._load(var(t), const(0)), self._compute(const(0))
        body = seq(load, *self._visible(), Barrier(), compute, Barrier())
        return For(t, ceildiv(self.ops.k.extent, self.bk), body)

    def _pipeline(self) -> Stmt:
        """`stages` buffers per tile, slices issued `stages - 1 - lag` ahead (see the module
        doc). Every thread commits one group per slice, empty or not, so that `wait_group`
        counts slices."""
        s, ctx = self.s, self.ctx
        count = ceildiv(self.ops.k.extent, self.bk)
        ahead = s.stages - 1 - self.lag
        commit = AsyncCopy("commit")
        prologue: list[Stmt] = []
        for n in range(ahead):
            known = const_value(count)
            load = self._load(const(n), const(n))
            if known is None:
                prologue.append(If(less(const(n), count), load))
            elif n < known:
                prologue.append(load)
            prologue.append(commit)
        t = ctx.fresh("t")
        slice_ = add(var(t), const(ahead))
        step = seq(
            AsyncCopy("wait", pending=ahead - 1),
            *self._visible(),
            Barrier(),
            guard(less(slice_, count), self._load(slice_, mod(slice_, s.stages))),
            commit,
            self._compute(mod(var(t), s.stages)),
        )
        return seq(*prologue, For(t, count, step))

    def _packs(self) -> bool:
        """Whether a pass's run of elements (along the tile's contiguous direction) sits
        consecutively in the buffer, aligned to the run's size: one store of the packed
        values then writes it (8 values in 16 bytes, where one store each took 8 slots with
        bank conflicts)."""
        return False

    def _visible(self) -> list[Stmt]:
        """What makes this thread's tile writes readable by the math, before the barrier
        that makes them everyone's (nothing more for WMMA, which reads them as loads)."""
        return []

    def _load(self, slice_: Expr, stage: Expr) -> Stmt:
        """This thread's share of both tiles of k slice `slice_` into buffer `stage`:
        asynchronous copies of a raw side, loads and stores of the others."""
        k0 = mul(slice_, const(self.bk))
        return seq(self._load_side(side, k0, stage) for side in SIDES)

    def _base(self, side: str, stage: Expr) -> Expr:
        """Where buffer `stage` of `side`'s tile starts."""
        return mul(stage, const(self.s.tile_elements(self.ops, side)))

    def _group(self, side: str) -> tuple[Expr, Expr]:
        """The group a tile's lanes run over, and where this block's tile starts in it."""
        if side == "row":
            return self.ops.rows.extent, self.row0
        return self.ops.cols.extent, self.col0

    def _stage(self, side: str, k0: Expr, stage: Expr) -> For:
        """This thread's share of `side`'s tile at k slice `k0`, evaluated (the prologue runs
        here) and stored, out-of-range elements as 0. A side that transforms its values does
        runs of up to 8 consecutive elements of the tile's contiguous direction per pass (an
        int4 side's run along k then dequantizes one weight word and one scale); a plain
        read, one element (fewer registers). More than 2 passes stay a rolled loop (unrolled,
        nvcc holds every load's address in registers); 2 are unrolled (rolled, they cost an
        sm_80 WMMA variant a register spill). A producer warpgroup (loaders fewer than the
        block's threads) unrolls them all: it holds no accumulators, and rolled, each pass's
        load waited for the last pass's (an int4 side's 8 passes per slice were 8 trips to
        memory in turn: the M = 2048 int4 GEMM ran at 0.37x fp16 cuBLAS on an H100)."""
        ops, s, ctx = self.ops, self.s, self.ctx
        extent, start = self._group(side)
        run = register_run(ops, s, side, self.bk)
        n = ctx.fresh("n")
        first, kk0 = self._slot(side, n, run)
        tile = self.tiles[side]
        along_k = ops.k_inner(side)
        # The run walks k or the lanes, checked per element; the other bound is checked once.
        bounds = [(ops.k.extent, self.bk), (extent, s.width(side))]
        (walk_extent, walk_tile), (cross_extent, cross_tile) = bounds if along_k else bounds[::-1]
        exact = covers(walk_extent, walk_tile)  # no element of a run needs its own bound
        stores: list[Stmt] = []
        zeros: list[Stmt] = []
        values: list[Expr] = []
        places: list[tuple[Expr]] = []
        for j in range(run):
            lane, kk = (first, add(kk0, const(j))) if along_k else (add(first, const(j)), kk0)
            position, k = add(start, lane), add(k0, kk)
            if side == "row":
                value = ops.row_value(self.batch, position, k)
            else:
                value = ops.col_value(self.batch, position, k)
            at = (add(self._base(side, stage), self._at(side, lane, kk)),)
            places.append(at)
            zeros.append(Store(tile, at, Const(0, "float32")))
            walk = k if along_k else position
            store = Store(tile, at, value)
            stores.append(store if exact else If(less(walk, walk_extent), store, zeros[-1]))
            values.append(value)
        if exact and run > 1 and self._packs():
            packed = Call("pack", tuple(values), vector(self.dtype, run))
            stores = [Store(tile, places[0], packed)]
        cross = add(start, first) if along_k else add(k0, kk0)
        across = None if covers(cross_extent, cross_tile) else less(cross, cross_extent)
        body = seq(stores) if across is None else If(across, seq(stores), seq(zeros))
        count = s.width(side) * self.bk // run // s.loaders
        unrolled = count <= 2 or s.loaders < s.threads
        return For(n, const(count), body, "unroll", factor=0 if unrolled else 1)

    def _ahead(
        self, t: Expr, stage: Expr, sides: tuple[str, ...] | list[str] = SIDES
    ) -> tuple[list[Stmt], Stmt, Stmt, Stmt]:
        """A producer's loads of `sides` of slice `t` into buffer `stage`, with the memory
        reads of each side staged through registers issued one slice ahead (`split_reads`),
        so that they are in flight while this slice is evaluated and stored. Without it a
        producer paid a whole trip to memory per slice before it could dequantize, with
        nothing else to do.
        Returns (the register arrays, declared, and slice 0's reads into them; slice
        t + 1's reads into a second set; slice t's tiles from the first; the second set
        moved into the first, which waits for its reads, issued a slice earlier)."""
        ctx, count = self.ctx, ceildiv(self.ops.k.extent, self.bk)
        slice_ = ctx.fresh("ks")
        k0 = mul(var(slice_), const(self.bk))

        def at(stmt: Stmt, value: Expr) -> Stmt:
            return map_exprs(stmt, lambda e: substitute(e, {slice_: value}))

        first: list[Stmt] = []
        issue: list[Stmt] = []
        fills: list[Stmt] = []
        moves: list[Stmt] = []
        for side in sides:
            loop = None if self.runs[side] else self._stage(side, k0, stage)
            split = None if loop is None else split_reads(loop, ctx.fresh, index_form)
            if split is None:
                fills.append(self._load_side(side, mul(t, const(self.bk)), stage))
                continue
            ahead = tuple(ctx.fresh("ahead") for _ in split.names)
            first += [*split.decls(split.names), *split.decls(ahead)]
            first.append(at(split.into(split.names), const(0)))
            issue.append(at(split.into(ahead), add(t, const(1))))
            fills.append(at(split.rest, t))
            moves.append(split.moved(ahead))
        more = less(add(t, const(1)), count)
        return first, guard(more, seq(issue)), seq(fills), guard(more, seq(moves))

    def _load_side(self, side: str, k0: Expr, stage: Expr) -> Stmt:
        """This thread's share of `side`'s tile of k slice `k0` (see `_load`)."""
        return self._copy(side, k0, stage) if self.runs[side] else self._stage(side, k0, stage)

    def _copy(self, side: str, k0: Expr, stage: Expr) -> Stmt:
        """This thread's share of raw `side`'s tile at k slice `k0` as `cp.async` runs; a
        run past an edge reads only its elements inside (none past the lanes' edge) and
        zero-fills the rest."""
        ops, s, ctx, run = self.ops, self.s, self.ctx, self.runs[side]
        load = raw(ops, side)
        assert load is not None
        extent, start = self._group(side)
        n = ctx.fresh("n")
        lane, kk = self._slot(side, n, run)
        position, k = add(start, lane), add(k0, kk)
        if side == "row":
            point = ops.at(self.batch, position, None, k)
        else:
            point = ops.at(self.batch, None, position, k)
        src = substitute(load, point)
        assert isinstance(src, Load)
        # The run walks k (a k-major tile) or the lanes; the other axis only needs a bound.
        walks = [(k, ops.k.extent, self.bk), (position, extent, s.width(side))]
        if not ops.k_inner(side):
            walks.reverse()
        (walk, walk_extent, walk_tile), (cross, cross_extent, cross_tile) = walks
        size = itemsize(self.dtype)
        valid: Expr | None = None
        if not covers(walk_extent, walk_tile):
            left = Call("max", (sub(walk_extent, walk), const(0)), INDEX)
            valid = mul(minimum(left, const(run)), const(size))
        if not covers(cross_extent, cross_tile):
            full = const(run * size) if valid is None else valid
            valid = Call("where", (less(cross, cross_extent), full, const(0)), INDEX)
        at = add(self._base(side, stage), self._at(side, lane, kk))
        copy = AsyncCopy("copy", self.tiles[side], at, src, run * size, valid)
        count = s.width(side) * self.bk // run // s.loaders
        # Unrolled: each copy's address is then the thread's base plus a constant, where a
        # rolled loop recomputes the whole 64-bit index per copy (about 40 instructions per
        # 16 bytes, as many issue slots as the wgmma math of a slice on an H100).
        return For(n, const(count), copy, "unroll", factor=0)
