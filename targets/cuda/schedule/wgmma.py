"""The Hopper tensor-core contraction kernel (`mode="wgmma"`, sm_90): warpgroup MMA
(`wgmma.mma_async` m64nNk16, both factors read from shared memory by the tensor cores) with
16-bit inputs and float32 accumulation. See `wgmma_template` for the knobs and seeds, and
`wgmma_shape` for a config's constants, threads, shared memory and registers.

Grid as in the WMMA kernel (x over column tiles of `bn`, y over row tiles of `bm`, z over the
batch), the tiles optionally taken in groups of `raster` row tiles for L2 reuse. Block:
`groups` warpgroups of 128 threads, stacked along M; each owns `bm / groups` rows of the
block tile as `m_tiles` slabs of 64 rows by all `bn` columns, one `wgmma` of
N = `bn` per slab and 16 of k, its accumulators `m_tiles * bn / 2` floats per thread.

Shared tiles are in the 128-byte swizzled layout of `wgmma`'s matrix descriptors. A side
keeps the direction its global memory is contiguous in (so a raw tile is copied as it is):
K-major (`A[m][k]`, `B[n][k]`) where its reads walk k, else M/N-major (`A[k][m]`, `B[k][n]`),
which the instruction reads transposed. With `s` the strided and `c` the contiguous coordinate
of a tile whose strided extent is `S`, the tile is cut into atoms of 8 rows (along s) by 64
elements (128 bytes, along c), 1024 bytes each, atom (c / 64, s / 8) the
`(c / 64) * S / 8 + s / 8`-th; within an atom, row `s % 8` holds 8 chunks of 16 bytes, chunk
`c % 64 / 8` stored at position `(c % 64 / 8) ^ (s % 8)`. So element (s, c) sits at

    ((c / 64) * S / 8 + s / 8) * 512 + (s % 8) * 64 + ((c % 64 / 8) ^ (s % 8)) * 8 + c % 8

The hardware applies the same exclusive-or to address bits 4-6 from bits 7-9, so the tiles
must start 1024-byte aligned. Why swizzle: threads take 16-byte chunks in the order of `c`
(8 consecutive threads read one 128-byte line of global memory, a single L2 request), and the
8 chunks of a row land in 8 different bank groups. The unswizzled layout can have only one
of the two: on an H100, its copies of 16 bytes per line (one sector per request) left L2 93%
busy at 287 GB/s and the kernel at a third of cuBLAS. The descriptor's SBO is 1024 (between
atoms along s); M/N-major, LBO is `S / 8 * 1024` (between atoms along c); K-major tiles have
one atom along c (`BK` = 64) and LBO is unused.

Per slice of `BK` = 64 the tiles load through the `cp.async` pipeline of
`targets.cuda.schedule.staging` (`stages` buffers; raw sides copied in 16-byte chunks, others
evaluated and stored); before the barrier each thread makes its writes visible to the tensor
cores (`fence.proxy.async`). The slice's math is
`fence`, 4 x `m_tiles` `wgmma`s, `commit`, and a wait until at most `in_flight` (0 or 1)
slices of them are still running: with 1 the tensor cores work on while the next slice starts,
and the pipeline issues one slice less ahead, so no buffer they read is refilled.

With `producer` a warpgroup of its own (the first) loads the tiles and the `groups` after it
only compute, as Hopper GEMMs do (warp specialization), so address arithmetic and copy issue
never stall the tensor cores' warps. Stages hand over through two mbarriers each: `full[s]`
completes when all 128 producer threads' copies into stage s have landed (`cp.async` arrivals,
which do not make the producer wait), `empty[s]` when every consumer thread is done with it.
The producer fills slice t into stage t % stages once `empty` has completed for the slice
`stages` earlier; a consumer waits for `full`, makes the tiles visible to the tensor cores,
computes, and releases the stage whose products are complete (with `in_flight`, the one
before). No block-wide barrier is needed after the barriers are armed. With `prefetch` the
producer issues the memory reads of the sides it evaluates (int4 words, scales) for slice t + 1
into registers before it waits for stage t, so they travel while it evaluates slice t
(`StagedTiles._ahead`).

With `tma` the copy engine brings the sides copied as they are (`tma.tensor_sides`): the
producer's first thread announces a stage's bytes on `full[s]` and issues one `TensorCopy` per
box, whose 128-byte swizzle is the layout above; `full[s]` then completes on the arrivals and
the bytes (`_tensor_copies`). With `pingpong` (and tiles in turn) each consumer warpgroup
computes whole tiles, all `bm` rows in its own accumulators, and the block's tiles alternate
between the warpgroups: while one stores a tile, the other's mainloop keeps the tensor cores
busy (CUTLASS's ping-pong kernel); their mainloops take turns (`_handoff`). With `store` the
tile leaves through shared memory and the copy engine (`_store`).

Accumulators follow the instruction's layout: warp w of a warpgroup holds rows 16w..16w+15 of
its 64-row slab; accumulator i of lane l is row 16w + l/4 + 8 * (i % 4 / 2) and column
8 * (i / 4) + 2 * (l % 4) + i % 2. The store applies the epilogue to each, clipped at the edges.
"""

from __future__ import annotations

from tunehub.compiler import dtypes
from tunehub.compiler.dtypes import INDEX, itemsize
from tunehub.compiler.ir import Binary, Call, Const, Expr, Load, substitute
from tunehub.compiler.loop import (
    Barrier,
    Decl,
    For,
    If,
    Stmt,
    Store,
    add,
    all_of,
    as_expr,
    ceildiv,
    const,
    const_value,
    mul,
    seq,
    sub,
    var,
    vector,
)
from tunehub.compiler.schedule.stage import Context, nest
from tunehub.targets.cuda.loop import (
    CORE_ROW_BYTES,
    AsyncCopy,
    BulkGroup,
    Mbarrier,
    NamedBarrier,
    SharedMatrix,
    TensorCopy,
    Wgmma,
)
from tunehub.targets.cuda.schedule.staging import SIDES, StagedTiles, evaluated, raw
from tunehub.targets.cuda.schedule.tma import tensor_output, tensor_sides
from tunehub.targets.cuda.schedule.wgmma_shape import (
    ATOM,
    BK,
    CORE,
    K_STEP,
    SLAB,
    WARPGROUP,
    WgmmaShape,
)
from tunehub.targets.gpu.limits import WARP
from tunehub.targets.gpu.schedule.blocks import covers, div, equal, guard, less, mod
from tunehub.targets.gpu.schedule.operands import Operands


class WgmmaKernel(StagedTiles):
    """Lowers one contraction stage under a `wgmma` config."""

    bk = BK
    s: WgmmaShape

    def __init__(self, ops: Operands, shape: WgmmaShape, ctx: Context) -> None:
        super().__init__(ops, shape, ctx)
        self.runs = {side: 0 if side in evaluated(ops) else CORE for side in SIDES}
        self.tensor = tensor_sides(ops) if shape.tma else {}
        self.lag = shape.in_flight
        names = (ctx.fresh("full"), ctx.fresh("empty")) if shape.producer else ()
        self.barriers = [Decl(name, INDEX, (shape.stages,), shared=True) for name in names]
        self.out_tile = ctx.fresh("Cs") if shape.store and tensor_output(ops) else ""
        if shape.pingpong:  # see `_specialized`
            handoff = Decl(ctx.fresh("handoff"), INDEX, (shape.groups,), shared=True)
            self.barriers.append(handoff)

    def _contiguous(self, side: str) -> int:
        """The tile's extent along its contiguous direction (c in the module doc)."""
        return BK if self.ops.k_inner(side) else self.s.width(side)

    def _strided(self, side: str) -> int:
        """The tile's extent along its strided direction (`S` in the module doc)."""
        return self.s.width(side) if self.ops.k_inner(side) else BK

    def _at(self, side: str, lane: Expr, kk: Expr) -> Expr:
        """The tile offset of (lane, k offset): the swizzled layout of the module doc."""
        s, c = (lane, kk) if self.ops.k_inner(side) else (kk, lane)
        atom = add(mul(div(c, ATOM), const(self._strided(side) // CORE)), div(s, CORE))
        chunk = Binary("^", div(mod(c, ATOM), CORE), mod(s, CORE), INDEX)
        row = add(mul(mod(s, CORE), const(ATOM)), mul(chunk, const(CORE)))
        return add(add(mul(atom, const(ATOM * CORE)), row), mod(c, CORE))

    def _slot(self, side: str, n: str, run: int) -> tuple[Expr, Expr]:
        """(lane, k offset) of the first of the `run` elements that pass `n`'s flat index f
        gives this thread: the tile in row-major order of (s, c), so that consecutive threads
        read consecutive bytes of global memory (the swizzle keeps their stores apart)."""
        f = add(mul(var(n), const(self.s.loaders)), self.tid)
        per_chunk = CORE // run  # flat indices per 16-byte chunk
        chunk, within = div(f, per_chunk), mul(mod(f, per_chunk), const(run))
        per_row = self._contiguous(side) // CORE
        strided = div(chunk, per_row)
        contiguous = add(mul(mod(chunk, per_row), const(CORE)), within)
        if self.ops.k_inner(side):
            return strided, contiguous
        return contiguous, strided

    def _packs(self) -> bool:
        """A run along c starts at a multiple of its length within one 16-byte chunk."""
        return True

    def _visible(self) -> list[Stmt]:
        return [Wgmma("proxy_fence")]

    def lower(self) -> Stmt:
        s, ctx = self.s, self.ctx
        blocks, tx = self._bindings(s.raster, s.tiles)
        group, warp, lane = ctx.fresh("group"), ctx.fresh("warp"), ctx.fresh("lane")
        self.group, self.warp, self.lane = var(group), var(warp), var(lane)
        # Where the warpgroup's rows start in the block tile.
        self.slab0 = const(0) if s.pingpong else mul(self.group, const(s.m_tiles * SLAB))
        self.acc = ctx.fresh("acc")
        warpgroup = div(self.tid, WARPGROUP)  # the math's warpgroups follow the producer's
        head: list[Stmt] = [
            Decl(group, INDEX, init=sub(warpgroup, const(1)) if s.producer else warpgroup),
            Decl(warp, INDEX, init=div(mod(self.tid, WARPGROUP), WARP)),
            Decl(lane, INDEX, init=mod(self.tid, WARP)),
        ]
        if s.producer:
            inner = seq(*head, *self._specialized())
        else:
            inner = seq(*head, *self._accumulators(), self._pipeline(), self._store())
        return nest(
            blocks,
            seq(
                *([] if s.producer else self.block_decls),
                *self._tile_decls(),
                *self._out_decls(),
                *self.barriers,
                nest([tx], inner),
            ),
        )

    def _accumulators(self) -> list[Stmt]:
        """The thread's float32 accumulators, zeroed."""
        return [Decl(self.acc, "float32", (self.s.acc_size,)), self._zero()]

    def _zero(self) -> Stmt:
        i = self.ctx.fresh("i")
        zero = Store(self.acc, (var(i),), Const(0.0, "float32"))
        return For(i, const(self.s.acc_size), zero, "unroll")

    def _each_tile(self, body: Stmt, mine: Expr | None = None) -> Stmt:
        """`body` for each of the block's tiles that exists and, where given, is `mine`
        (just `body` with one a block)."""
        if not self.tile:
            return body
        valid = all_of([c for c in (self.tile_valid, mine) if c is not None])
        return For(self.tile, const(self.s.tiles), guard(valid, body))

    def _slice(self, t: str) -> Expr:
        """The block's count of slices before slice `t` of its current tile: the stages
        and the barriers' phases run on across its tiles."""
        if not self.tile:
            return var(t)
        return add(mul(var(self.tile), ceildiv(self.ops.k.extent, BK)), var(t))

    def _specialized(self) -> list[Stmt]:
        """The producer's and the consumers' parts (module doc), after one thread arms the
        stages' barriers: `full[s]` completes when the producer has filled stage s,
        `empty[s]` when every consumer is done with it. The producer's threads load the
        sides the copy engine does not bring (`tensor_sides`); where it brings both, the
        producer is one thread."""
        s, ctx = self.s, self.ctx
        full, empty = self.barriers[0].name, self.barriers[1].name
        count = ceildiv(self.ops.k.extent, BK)
        loaded = [side for side in SIDES if side not in self.tensor]
        consumers = WARPGROUP if s.pingpong else s.groups * WARPGROUP  # of each slice
        b = ctx.fresh("b")
        init: list[Stmt] = [
            For(
                b,
                const(s.stages),
                seq(
                    Mbarrier("init", full, var(b), count=WARPGROUP if loaded else 1),
                    Mbarrier("init", empty, var(b), count=consumers),
                ),
            )
        ]
        if s.pingpong:
            handoff = self.barriers[2].name
            init.append(For(b, const(s.groups), Mbarrier("init", handoff, var(b), count=WARPGROUP)))
        if self.tensor:
            init.append(Mbarrier("fence_init", full))
        arm = [guard(equal(self.tid, const(0)), seq(init)), Barrier()]
        copies = any(self.runs[side] for side in loaded)
        stores = not all(self.runs[side] for side in loaded)
        t = ctx.fresh("t")
        stage, round_ = mod(self._slice(t), s.stages), div(self._slice(t), s.stages)
        first: list[Stmt] = []
        issue = move = seq()
        fills = seq(self._load_side(side, mul(var(t), const(BK)), stage) for side in loaded)
        if s.prefetch:
            first, issue, fills, move = self._ahead(var(t), stage, loaded)
        fill = seq(
            issue,
            Mbarrier("wait", empty, stage, parity=mod(add(round_, const(1)), 2)),
            self._tensor_copies(var(t), stage, bool(loaded)),
            fills,
            *([Wgmma("proxy_fence")] if stores else []),
            Mbarrier("arrive_copies" if copies else "arrive", full, stage),
            move,
        )
        drain = [AsyncCopy("commit"), AsyncCopy("wait", pending=0)] if copies else []
        producer = seq(self._each_tile(seq(*self.block_decls, *first, For(t, count, fill))), *drain)
        if not loaded:
            producer = guard(equal(self.tid, const(0)), producer)
        u = ctx.fresh("t")
        stage, round_ = mod(self._slice(u), s.stages), div(self._slice(u), s.stages)
        done = stage  # the stage whose products are complete: this one, or the one before
        if s.in_flight:
            done = mod(add(self._slice(u), const(s.stages - 1)), s.stages)
        release = Mbarrier("arrive", empty, done)
        # With pingpong the slice before a tile's first is the other warpgroup's: each
        # releases its tile's last stage itself, once its products are complete.
        before = var(u) if s.pingpong else self._slice(u)
        use = seq(
            Mbarrier("wait", full, stage, parity=mod(round_, 2)),
            Wgmma("proxy_fence"),
            self._compute(stage),
            guard(less(const(0), before) if s.in_flight else None, release),
        )
        last: list[Stmt] = []
        if s.pingpong and s.in_flight:
            final = mod(add(mul(var(self.tile), count), sub(count, const(1))), s.stages)
            last = [
                Wgmma("wait", pending=0, acc=self.acc, acc_size=s.acc_size),
                guard(less(const(0), count), Mbarrier("arrive", empty, final)),
            ]
        # The tile position (grouped order) is computed where it is used: the producer's
        # copies, the consumers' store. Held by the consumers through the loop, it spilled.
        # With tiles in turn the producer runs on into the next tile while they store.
        wait, arrive = self._handoff()
        mainloop = seq(*wait, For(u, count, use), *arrive)
        tile = seq(mainloop, *last, *self.block_decls, self._store())
        acc = Decl(self.acc, "float32", (s.acc_size,))
        mine = equal(mod(var(self.tile), s.groups), self.group) if s.pingpong else None
        flush = [guard(self._issuer(), BulkGroup("wait"))] if self.out_tile else []
        consumer = seq(acc, self._each_tile(seq(self._zero(), tile), mine), *flush)
        return [*arm, If(less(self.tid, const(WARPGROUP)), producer, consumer)]

    def _handoff(self) -> tuple[list[Stmt], list[Stmt]]:
        """With pingpong, the wait before the mainloop of a block's tile i (after the first)
        until the warpgroup of tile i - 1 has waited for every slice of it, and the arrival
        that then frees the warpgroup of tile i + 1 (`_specialized` puts the loop over the
        slices between them). Without it a warpgroup would wait on its first slice's `full`
        barrier tiles ahead, where a parity wait cannot tell the phase it wants from one two
        phases earlier. So the mainloops take turns, as CUTLASS's ping-pong orders its
        warpgroups, while one's epilogue overlaps the next one's mainloop.

        Each warpgroup waits on a barrier of its own, `handoff[g]`, which only the warpgroup
        before it arrives on: tile i waits for the ((i - 1) / groups)-th phase of
        `handoff[i % groups]`. One barrier for all let a thread pass its next wait on the
        parity of a phase its own arrival had not completed yet (a deadlock in the
        emulator); with one per warpgroup a waiter has passed the phase before the one it
        waits for, and the phase after needs its own arrival first."""
        if not self.s.pingpong:
            return [], []
        handoff, tile, groups = self.barriers[2].name, var(self.tile), self.s.groups
        parity = mod(div(sub(tile, const(1)), groups), 2)
        wait = Mbarrier("wait", handoff, mod(tile, groups), parity=parity)
        arrive = Mbarrier("arrive", handoff, mod(add(tile, const(1)), groups))
        return [guard(less(const(0), tile), wait)], [arrive]

    def _tensor_copies(self, t: Expr, stage: Expr, shared: bool) -> Stmt:
        """The copy engine's share of slice `t` into buffer `stage`, issued by the producer's
        first thread (`shared`: the others load the other side): the stage's `full` barrier
        told to expect the bytes, then one box per tensor side, a K-major tile in one box of
        64 k by its lanes, an M/N-major one in boxes of 64 lanes by 64 k, one per swizzle atom
        column (the layout of the module doc is the boxes' one after another)."""
        if not self.tensor:
            return seq()
        ops, full = self.ops, self.barriers[0].name
        k0 = mul(t, const(BK))
        out: list[Stmt] = []
        for side, (at_k, at_lane) in self.tensor.items():
            load = raw(ops, side)
            assert load is not None
            _, start = self._group(side)
            row, col = (start, None) if side == "row" else (None, start)
            src = substitute(load, ops.at(self.batch, row, col, k0))
            assert isinstance(src, Load)
            along_k = ops.k_inner(side)
            box = [1] * len(src.indices)
            box[at_k], box[at_lane] = BK, self.s.width(side) if along_k else ATOM
            for j in range(1 if along_k else self.s.width(side) // ATOM):
                coords = list(src.indices)
                coords[at_lane] = add(coords[at_lane], const(j * ATOM))
                offset = add(self._base(side, stage), const(j * ATOM * BK))
                copy = TensorCopy(
                    self.tiles[side],
                    offset,
                    load.tensor,
                    tuple(reversed(box)),
                    tuple(reversed(coords)),
                    full,
                    stage,
                )
                out.append(copy)
        size = sum(self.s.width(side) * BK * 2 for side in self.tensor)
        issue = seq(Mbarrier("expect", full, stage, count=size), *out)
        return guard(equal(self.tid, const(0)) if shared else None, issue)

    def _factor(self, side: str, stage: Expr, lane: Expr, kk: int) -> SharedMatrix:
        """The descriptor view of `side`'s tile in buffer `stage` from (lane, kk) on."""
        offset = add(self._base(side, stage), self._at(side, lane, const(kk)))
        atom_bytes = CORE * ATOM * 2
        along_c = self._strided(side) // CORE * atom_bytes
        if self.ops.k_inner(side):  # one atom along c: LBO unused (1, as CUTLASS sets it)
            return SharedMatrix(self.tiles[side], offset, True, CORE_ROW_BYTES, atom_bytes)
        return SharedMatrix(self.tiles[side], offset, False, along_c, atom_bytes)

    def _compute(self, stage: Expr) -> Stmt:
        """The slice's products: per 16 of k, one wgmma per 64-row slab; then a wait that
        leaves at most `in_flight` slices of them running."""
        s = self.s
        out: list[Stmt] = [Wgmma("fence", acc=self.acc, acc_size=s.acc_size)]
        first = self.slab0
        for kk in range(0, BK, K_STEP):
            b = self._factor("col", stage, const(0), kk)
            for t in range(s.m_tiles):
                a = self._factor("row", stage, add(first, const(t * SLAB)), kk)
                offset = t * s.bn // 2
                out.append(Wgmma("mma", self.acc, offset, s.bn, self.dtype, a, b))
        out.append(Wgmma("commit"))
        out.append(Wgmma("wait", pending=s.in_flight, acc=self.acc, acc_size=s.acc_size))
        return seq(out)

    def _out_decls(self) -> list[Stmt]:
        """The output tile in shared memory, a warpgroup's rows each (`_store`)."""
        if not self.out_tile:
            return []
        s = self.s
        return [Decl(self.out_tile, self.ops.stage.dtype, (s.groups * s.rows * s.bn,), shared=True)]

    def _issuer(self) -> Expr:
        """Whether this thread is its warpgroup's first: the one that issues its stores."""
        return equal(mod(self.tid, WARPGROUP), const(0))

    def _store(self) -> Stmt:
        """Every accumulator through the epilogue to its (row, col), clipped at the edges;
        a thread's two neighbouring columns as one 4-byte store where `_pairs` allows.

        With `store` (and `tensor_output`) the values go into the warpgroup's part of the
        output tile in shared memory instead, in boxes of 128 bytes of a row by the
        warpgroup's rows, swizzled as the input tiles are (a warp's stores then hit 32
        banks), and the warpgroup's first thread has the copy engine store the boxes; the
        copy engine leaves out what lies past the output's edges. Before the tile is
        written, that thread waits until the previous stores have read it, and the
        warpgroup meets (a named barrier of its own); after, the writes are made visible to
        the copy engine and the warpgroup meets again."""
        ops, s, stage = self.ops, self.s, self.ops.stage
        out: list[Stmt] = []
        if s.in_flight and not s.pingpong:  # ping-pong waited already, to free its last stage
            out.append(Wgmma("wait", pending=0, acc=self.acc, acc_size=s.acc_size))
        meet = NamedBarrier(add(self.group, const(1)), WARPGROUP)
        if self.out_tile:
            out += [guard(self._issuer(), BulkGroup("wait_read")), meet]
        per_slab = s.bn // 2
        step = 2 if self._pairs() else 1
        for t in range(s.m_tiles):
            slab = add(self.row0, self.slab0)
            in_slab = add(mul(self.warp, const(16)), div(self.lane, 4))
            e = self.ctx.fresh("e")
            first = mul(var(e), const(step))  # the accumulator (of the pair)
            lower = mul(div(mod(first, 4), 2), const(8))
            row = add(add(add(slab, const(t * SLAB)), in_slab), lower)
            column = mul(div(first, 4), const(CORE))
            pair = add(mul(mod(self.lane, 4), const(2)), mod(first, 2))
            col = add(add(self.col0, column), pair)
            values = []
            for j in range(step):
                point = ops.at(self.batch, row, add(col, const(j)), None)
                acc = Load(self.acc, (add(const(t * per_slab), add(first, const(j))),), "float32")
                values.append(stage.finish(acc, point))
            value = values[0] if step == 1 else Call("pack", tuple(values), vector(stage.dtype, 2))
            point = ops.at(self.batch, row, col, None)
            store = Store(stage.buffer, tuple(point[a] for a in stage.axes), value)
            if self.out_tile:  # at the row within the warpgroup's, the column within the tile
                at = self._out_at(add(add(const(t * SLAB), in_slab), lower), add(column, pair))
                store = Store(self.out_tile, (at,), value)
            conds = [] if covers(ops.rows.extent, s.bm) else [less(row, ops.rows.extent)]
            conds += [] if covers(ops.cols.extent, s.bn) else [less(col, ops.cols.extent)]
            out.append(For(e, const(per_slab // step), guard(all_of(conds), store), "unroll"))
        if self.out_tile:
            stores = [*self._tensor_stores(), BulkGroup("commit")]
            out += [Wgmma("proxy_fence"), meet, guard(self._issuer(), seq(stores))]
        return seq(out)

    def _out_at(self, row: Expr, col: Expr) -> Expr:
        """Where the warpgroup's (row, col) sits in the output tile: its part, its box of
        128 bytes of a row, the 16-byte chunk swizzled by the row (`_store`)."""
        s, size = self.s, itemsize(self.ops.stage.dtype)
        per_row, per_chunk = 128 // size, 16 // size
        box, within = div(col, per_row), mod(col, per_row)
        chunk = Binary("^", div(within, per_chunk), mod(row, CORE), INDEX)
        at = add(mul(box, const(s.rows * per_row)), mul(row, const(per_row)))
        at = add(at, add(mul(chunk, const(per_chunk)), mod(within, per_chunk)))
        return add(mul(self.group, const(s.rows * s.bn)), at)

    def _tensor_stores(self) -> list[Stmt]:
        """The warpgroup's boxes of the output tile, stored by the copy engine."""
        ops, s, stage = self.ops, self.s, self.ops.stage
        per_row = 128 // itemsize(stage.dtype)
        row = add(self.row0, self.slab0)
        box = [
            s.rows if a == ops.rows.axes[0] else per_row if a == stage.axes[-1] else 1
            for a in stage.axes
        ]
        out: list[Stmt] = []
        for j in range(s.bn // per_row):
            point = ops.at(self.batch, row, add(self.col0, const(j * per_row)), None)
            coords = tuple(reversed([point[a] for a in stage.axes]))
            offset = add(mul(self.group, const(s.rows * s.bn)), const(j * s.rows * per_row))
            out.append(
                TensorCopy(
                    self.out_tile, offset, stage.buffer, tuple(reversed(box)), coords, store=True
                )
            )
        return out

    def _pairs(self) -> bool:
        """Whether accumulator pairs (columns 2i, 2i + 1) store as one 16-bit pair: the result
        is 16-bit, stored along a single column axis, its rows and the column extent even (a
        pair is whole and 4-byte aligned)."""
        ops, stage = self.ops, self.ops.stage
        if not dtypes.is_half(stage.dtype) or ops.cols.axes != (stage.axes[-1],):
            return False
        row = const_value(as_expr(stage.shape[-1]))
        extent = const_value(ops.cols.extent)
        return row is not None and extent is not None and row % 2 == 0 and extent % 2 == 0
