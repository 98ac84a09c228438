"""The packed GEMM template of contraction stages: the plan (sides and axis groups) and its
lowering to loop IR. `targets.cpu.schedule.contraction` owns the knobs and constraints; the
module doc there describes the loop structure.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from tunehub.compiler import dtypes
from tunehub.compiler.analysis import Stage, replace_loads
from tunehub.compiler.dtypes import INDEX
from tunehub.compiler.ir import (
    Binary,
    Call,
    Cast,
    Const,
    Expr,
    Extent,
    Load,
    Var,
    loads,
    substitute,
    walk,
)
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
    const_value,
    minimum,
    mul,
    seq,
    sub,
    var,
)
from tunehub.compiler.schedule.guards import split_loop
from tunehub.compiler.schedule.plan import Group, Plan
from tunehub.compiler.schedule.stage import Context, Loop, nest
from tunehub.compiler.schedule.vectorize import depends, vector_of, vectorize
from tunehub.compiler.simplify import simplified
from tunehub.compiler.space.space import Config
from tunehub.targets.cpu.schedule.gemm.relayout import as_written, relaid
from tunehub.targets.cpu.schedule.gemm.tiling import (
    lanes_of,
    tiling,
    vector_kind,
    vector_loop,
)

# k values packed per run where a side computes its values from k-contiguous reads: the
# eight nibbles of an int4 weight word.
PACK_RUN = 8
# k values per block where a panel is packed from k-contiguous reads (a transposed operand,
# `B[n, k]`): each lane's run of k in turn writes the panel at a stride of a whole row of
# lanes, so unblocked a 64-lane panel's writes spread over 64 KB, past L1, and an NT matmul
# 256^3 ran 1.5x the NN one; in blocks of 16 (a line of floats read per lane) they stay in 4.
PACK_K_BLOCK = 16


def _transforms(side: Expr) -> bool:
    """Whether a side computes its values (dequantizes) rather than widening one read."""
    while isinstance(side, Cast):
        side = side.x
    return not isinstance(side, Load)


def k_inner(side: Expr, k_axes: tuple[str, ...], lane_axes: tuple[str, ...]) -> bool:
    """Whether packing `side` should walk k innermost: its reads' last indices follow k and
    not the panel's lane axes (row-major A[i, k], NT B[j, k], int4 W[n, k // 8])."""
    last = [ld.indices[-1] for ld in loads(side) if ld.indices]
    return any(depends(e, k_axes) for e in last) and not any(depends(e, lane_axes) for e in last)


# ----------------------------------------------------------------------------- the lowering


def _walked(group: Group) -> bool:
    """Whether packing walks `group` by rows of its last axis (`Template._walk`): a group of
    several axes whose last one is long enough to pay for a row loop (3-wide filter rows do
    not; their flat index usually merges back into one, `flat_index`)."""
    last = const_value(group.extents[-1]) if group.axes else 1
    return len(group.axes) > 1 and (last is None or last >= WALKED_ROW)


def _eq(a: Expr, b: Expr) -> Expr:
    return Binary("==", a, b, "bool")


def _at(buf: str, offset: Expr, dtype: str) -> Expr:
    """A read of `buf` at a flat element offset (a vector of them for a vector dtype)."""
    return Load(buf, (offset,), dtype)


WALKED_ROW = 8  # the shortest last axis a packing walks by rows


class Template:
    """Lowers one contraction stage under one config (see `contraction` for the knobs)."""

    def __init__(
        self, stage: Stage, found: Plan, config: Config, ctx: Context, rows: tuple[Expr, ...]
    ) -> None:
        lanes = lanes_of(ctx.target, found.acc)
        vec_side = str(config["vec_side"])
        self.relaid = (
            relaid(ctx, stage, found, vec_side, lanes)
            if config.get("relayout") and not rows
            else as_written(stage, found)
        )
        self.t = tiling(stage, found, self.relaid.found, config, lanes, rows)
        self.stage, self.ctx, self.found = stage, ctx, found

    # ------------------------------------------------------------------ loops

    def lower(self) -> Stmt:
        index = dict(self.t.fixed)
        outer = []
        for axis, size in self.t.batch:
            outer.append(Loop(self.ctx.fresh(axis), size))
            index[axis] = var(outer[-1].var)
        jc = Loop(self.ctx.fresh("jc"), ceildiv(self.t.col.extent, self.t.nc))
        ic = Loop(self.ctx.fresh("ic"), ceildiv(self.t.row.extent, self.t.mc))
        outer += [jc, ic]
        outer[: self.t.parallel] = [
            Loop(lp.var, lp.extent, "parallel") for lp in outer[: self.t.parallel]
        ]
        col0, row0 = mul(var(jc.var), const(self.t.nc)), mul(var(ic.var), const(self.t.mc))
        # The column block's index among all of them (batch and jc), from 1: which panels a
        # thread holds (0: none yet).
        block: Expr = const(0)
        for loop in outer[:-1]:
            block = add(mul(block, loop.extent), var(loop.var))
        blocks = nest(outer, self._block(index, row0, col0, add(block, const(1))))
        return seq(*self.relaid.before, blocks, *self.relaid.after)

    def _block(self, index: dict[str, Expr], row0: Expr, col0: Expr, block: Expr) -> Stmt:
        """One mc x nc block of the output: k blocks of packing and register tiles."""
        ctx = self.ctx
        nrows, ncols, depth = ctx.fresh("nrows"), ctx.fresh("ncols"), ctx.fresh("depth")
        count = (var(nrows), var(ncols))
        ext = self._panel_depth()
        self.col_panels = (
            ctx.scratch("packcols", self.t.acc, (self.t.nc, *ext), per_thread=True)
            if self.t.pack_cols
            else ""
        )
        self.row_panels = (
            ctx.scratch("packrows", self.t.acc, (self.t.mc, *ext), per_thread=True)
            if self.t.pack_rows != "none"
            else ""
        )
        self.spill = ctx.scratch("tile", self.t.acc, (self.t.mr * self.t.nr,), per_thread=True)
        self.partial = (
            ctx.scratch("partial", self.t.acc, (self.t.mc * self.t.nc,), per_thread=True)
            if self.t.kc
            else ""
        )
        if self.t.kc:
            pc = ctx.fresh("pc")
            blocks = ceildiv(self.t.k.extent, self.t.kc)
            k0 = mul(var(pc), const(self.t.kc))
            first, last = _eq(var(pc), const(0)), _eq(var(pc), sub(blocks, const(1)))
        else:
            k0 = const(0)
            first = last = Const(True, "bool")
        q, p = ctx.fresh("q"), ctx.fresh("p")
        panels = [Loop(q, ceildiv(var(ncols), self.t.nr)), Loop(p, ceildiv(var(nrows), self.t.mr))]
        tiles = nest(
            panels if self.t.cols_outer else panels[::-1],
            self._tile(index, row0, col0, count, var(p), var(q), k0, var(depth), first, last),
        )
        packs = []
        if self.t.pack_cols:
            pack = self._pack(
                self.col_panels,
                self.t.col_side,
                self.t.col,
                self.t.nr,
                col0,
                count[1],
                index,
                k0,
                var(depth),
            )
            if self.t.reuse_cols:
                packed = ctx.scratch("packed", INDEX, (1,), per_thread=True, zeroed=True)
                at = (const(0),)
                fresh = Binary("!=", Load(packed, at, INDEX), block, "bool")
                pack = If(fresh, seq(pack, Store(packed, at, block)))
            packs.append(pack)
        if self.t.pack_rows != "none":
            packs.append(
                self._pack(
                    self.row_panels,
                    self.t.row_side,
                    self.t.row,
                    self.t.mr,
                    row0,
                    count[0],
                    index,
                    k0,
                    var(depth),
                    k_fastest=self.t.pack_rows == "rows",
                )
            )
        k_block = seq(
            Decl(depth, INDEX, init=minimum(self.t.k_stride, sub(self.t.k.extent, k0))),
            *packs,
            tiles,
        )
        if self.t.kc:
            k_block = For(pc, blocks, k_block)
        return seq(
            Decl(nrows, INDEX, init=minimum(const(self.t.mc), sub(self.t.row.extent, row0))),
            Decl(ncols, INDEX, init=minimum(const(self.t.nc), sub(self.t.col.extent, col0))),
            k_block,
        )

    def _panel_depth(self) -> tuple[Extent, ...]:
        """The k extent of a packed panel, as workspace extents (literals or symbol names)."""
        if self.t.kc:
            return (self.t.kc,)
        return tuple(r.extent for r in self.stage.anchor.reduce_axes)

    # ------------------------------------------------------------------ packing

    def _pack(
        self,
        buf: str,
        side: Expr,
        group: Group,
        tile: int,
        start: Expr,
        count: Expr,
        index: dict[str, Expr],
        k0: Expr,
        depth: Expr,
        k_fastest: bool = False,
    ) -> Stmt:
        """Evaluate `side` over `count` lanes of `group` from `start` and `depth` k values
        from `k0` into zero-padded panels, lanes interleaved,
        buf[(panel * k_stride + k) * tile + lane], or with `k_fastest` one run of k per lane,
        buf[(panel * tile + lane) * k_stride + k] (a plain copy of row-major rows)."""
        ctx = self.ctx
        panel, kk, lane, width = ctx.fresh("pp"), ctx.fresh("pk"), ctx.fresh("pl"), ctx.fresh("pw")
        first_lane = add(start, mul(var(panel), const(tile)))

        def at(k: Expr, lane_at: Expr | None = None) -> Expr:
            lane_at = var(lane) if lane_at is None else lane_at
            if k_fastest:
                return add(mul(add(mul(var(panel), const(tile)), lane_at), self.t.k_stride), k)
            return add(mul(add(mul(var(panel), self.t.k_stride), k), const(tile)), lane_at)

        def lanes_at(at_lane: Expr) -> dict[str, Expr]:
            return group.index(add(first_lane, at_lane))

        def ks_at(k: Expr) -> dict[str, Expr]:
            return self.t.k.index(add(k0, k))

        def point(lanes: dict[str, Expr], ks: dict[str, Expr]) -> Expr:
            return substitute(side, {**index, **lanes, **ks})

        def value(k: Expr) -> Expr:
            return point(lanes_at(var(lane)), ks_at(k))

        def over_lanes(k: Expr) -> Stmt:
            """The panel's lanes at one k."""
            if not _walked(group):
                return nest([self._vector_loop(lane, var(width))], Store(buf, (at(k),), value(k)))
            return self._walk(
                group,
                first_lane,
                var(width),
                lambda lanes: point(lanes, ks_at(k)),
                lambda at_lane, packed: Store(buf, (at(k, at_lane),), packed),
            )

        def over_k() -> Stmt:
            """One lane's k values (a plain k walks here only as `k_fastest`'s vector copy;
            otherwise `_k_blocked` packs it)."""
            if not _walked(self.t.k):
                loop = self._vector_loop(kk, depth)
                return nest([loop], Store(buf, (at(var(kk)),), value(var(kk))))
            return self._walk(
                self.t.k,
                k0,
                depth,
                lambda ks: point(lanes_at(var(lane)), ks),
                lambda k, packed: Store(buf, (at(k),), packed),
            )

        offset = at(var(kk))
        if k_inner(side, self.t.k.axes, group.axes) and _transforms(side) and not k_fastest:
            fill = self._runs(buf, lane, var(width), depth, value, at)
        elif k_inner(side, self.t.k.axes, group.axes) and not (k_fastest or _walked(self.t.k)):
            fill = self._k_blocked(
                lane, var(width), kk, depth, lambda k: Store(buf, (at(k),), value(k))
            )
        elif k_fastest or k_inner(side, self.t.k.axes, group.axes):
            fill = For(lane, var(width), over_k())
        else:
            fill = For(kk, depth, over_lanes(var(kk)))
        zero = Store(buf, (offset,), Const(0, self.t.acc))
        pad = For(kk, depth, For(lane, sub(const(tile), var(width)), zero, start=var(width)))
        lanes_left = minimum(const(tile), sub(count, mul(var(panel), const(tile))))
        vectors = self._vectors(side, group, tile, first_lane, index, add(k0, var(kk)))
        if vectors is None or k_fastest:
            fill = seq(fill, If(Binary("<", var(width), const(tile), "bool"), pad))
        else:  # whole panels by vector copies, the partial one lane by lane
            row = add(mul(var(panel), self.t.k_stride), var(kk))
            whole = seq(
                Store(buf, (add(mul(row, const(tile)), const(n * self.t.lanes)),), value)
                for n, value in enumerate(vectors)
            )
            fill = If(_eq(var(width), const(tile)), For(kk, depth, whole), seq(fill, pad))
        return For(panel, ceildiv(count, tile), seq(Decl(width, INDEX, init=lanes_left), fill))

    def _k_blocked(
        self, lane: str, width: Expr, kk: str, depth: Expr, store: Callable[[Expr], Stmt]
    ) -> Stmt:
        """`store` at every lane and k, the k values in blocks of `PACK_K_BLOCK`, the lanes
        within a block (see `PACK_K_BLOCK`)."""
        block = self.ctx.fresh("pkb")
        first = mul(var(block), const(PACK_K_BLOCK))
        run = For(kk, minimum(const(PACK_K_BLOCK), sub(depth, first)), store(var(kk)), start=first)
        return For(block, ceildiv(depth, PACK_K_BLOCK), For(lane, width, run))

    def _walk(
        self,
        group: Group,
        first: Expr,
        count: Expr,
        value: Callable[[dict[str, Expr]], Expr],
        store: Callable[[Expr, Expr], Stmt],
    ) -> Stmt:
        """Flat indices `first` .. `first + count` of a group of axes walked row by row of its
        last axis: the other axes' indices are divided out once per row, and the last axis
        runs as a loop of its own, split where a padding guard holds (`guards`), so a value
        costs no division and no test and its reads are contiguous (a convolution's im2col
        panel: divisions by the image width and bound tests were most of its packing).
        `value(index)` is the value at an index of the group's axes, `store(n, value)`
        stores the n-th."""
        row, x = self.ctx.fresh("prow"), self.ctx.fresh("px")
        extent = group.extents[-1]
        base = mul(var(row), extent)
        rows_from = Binary("//", first, extent, INDEX)
        rows_to = Binary("//", add(add(first, count), sub(extent, const(1))), extent, INDEX)
        x_from = Call("max", (const(0), sub(first, base)), INDEX)
        x_to = minimum(extent, sub(add(first, count), base))
        outer = Group(group.axes[:-1], group.extents[:-1])
        at = {**outer.index(var(row)), group.axes[-1]: var(x)}
        n = sub(add(base, var(x)), first)
        columns = split_loop(x, x_from, x_to, value(at), partial(store, n), *self._vector_kind())
        return For(row, sub(rows_to, rows_from), columns, start=rows_from)

    def _runs(
        self,
        buf: str,
        lane: str,
        width: Expr,
        depth: Expr,
        value: Callable[[Expr], Expr],
        at: Callable[[Expr], Expr],
    ) -> Stmt:
        """A side that computes its values from k-contiguous reads (an int4 weight: eight
        nibbles of one word along k) packed in runs of PACK_RUN k values per lane, each run
        one vector computation (`vectorize.vector_of`: the word and the scale read once, the
        shifts a vector constant) stored lane by lane into the panel; where the run does not
        vectorize, value by value. k values past the last whole run one by one."""
        kr, kk, run = self.ctx.fresh("pr"), self.ctx.fresh("pt"), self.ctx.fresh("pv")
        ks = [add(mul(var(kr), const(PACK_RUN)), const(j)) for j in range(PACK_RUN)]
        # Every name in a packed value is a loop variable, a symbol or a size: non-negative.
        values = [
            simplified(v, {e.name for e in walk(v) if isinstance(e, Var)}) for v in map(value, ks)
        ]
        vectorized = vector_of(values)
        if vectorized is None:
            body = seq(Store(buf, (at(k),), v) for k, v in zip(ks, values, strict=True))
        else:
            lanes = Var(run, vectorized.dtype)
            stores = [
                Store(buf, (at(k),), Call("lane", (lanes, const(j)), self.t.acc))
                for j, k in enumerate(ks)
            ]
            body = seq(Decl(run, vectorized.dtype, init=vectorized), *stores)
        runs = Binary("//", depth, const(PACK_RUN), INDEX)
        whole = nest([Loop(kr, runs), Loop(lane, width)], body)
        k_extent = const_value(self.t.k.extent)
        if k_extent is not None and k_extent % PACK_RUN == 0 and self.t.kc % PACK_RUN == 0:
            return whole  # every k block holds whole runs
        done = mul(runs, const(PACK_RUN))
        one = For(lane, width, Store(buf, (at(var(kk)),), value(var(kk))))
        tail = For(kk, sub(depth, done), one, start=done)
        return seq(whole, tail)

    def _vectors(
        self,
        side: Expr,
        group: Group,
        tile: int,
        first: Expr,
        index: dict[str, Expr],
        k: Expr,
    ) -> list[Expr] | None:
        """`side` over the `tile` lanes of `group` from `first` at reduce index `k` as vector
        values, or None when that cannot be done with contiguous vector reads."""
        if len(group.axes) != 1 or tile % self.t.lanes or self.t.lanes == 1:
            return None
        (axis,) = group.axes
        vectorized = vectorize(side, axis, self.t.lanes)
        if vectorized is None:
            return None
        point = {**index, **self.t.k.index(k)}
        return [
            substitute(vectorized, {**point, axis: add(first, const(n * self.t.lanes))})
            for n in range(tile // self.t.lanes)
        ]

    def _vector_loop(self, name: str, extent: Expr) -> Loop:
        return vector_loop(name, extent, self.t.lanes)

    def _vector_kind(self) -> tuple[str, int]:
        return vector_kind(self.t.lanes)

    # ------------------------------------------------------------------ the register tile

    def _tile(
        self,
        index: dict[str, Expr],
        row0: Expr,
        col0: Expr,
        count: tuple[Expr, Expr],
        p: Expr,
        q: Expr,
        k0: Expr,
        depth: Expr,
        first: Expr,
        last: Expr,
    ) -> Stmt:
        ctx, mr, nv, lanes, vdt = self.ctx, self.t.mr, self.t.nv, self.t.lanes, self.t.vdt
        row_base = add(row0, mul(p, const(mr)))
        col_base = add(col0, mul(q, const(self.t.nr)))
        accs = [[ctx.fresh(f"c{r}x{v}") for v in range(nv)] for r in range(mr)]
        kk = ctx.fresh("k")
        zero = Cast(vdt, Const(0, self.t.acc))

        def partial_at(r: int, v: int) -> Expr:
            tile = add(mul(p, const(self.t.nb)), q)
            return add(mul(add(mul(tile, const(mr)), const(r)), const(self.t.nr)), const(v * lanes))

        decls = [
            Decl(name, vdt, init=zero if not self.t.kc else None) for row in accs for name in row
        ]
        init: list[Stmt] = []
        if self.t.kc:
            zeros = seq(Assign(name, zero) for row in accs for name in row)
            resume = seq(
                Assign(accs[r][v], _at(self.partial, partial_at(r, v), vdt))
                for r in range(mr)
                for v in range(nv)
            )
            init = [If(first, zeros, resume)]
        b_names = [ctx.fresh(f"b{v}") for v in range(nv)]
        body: list[Stmt] = []
        direct = None
        if not self.t.pack_cols:
            k = add(k0, var(kk))
            direct = self._vectors(self.t.col_side, self.t.col, self.t.nr, col_base, index, k)
            assert direct is not None, "check() allows pack_cols=False only where this works"
        for v, name in enumerate(b_names):
            offset = add(
                mul(add(mul(q, self.t.k_stride), var(kk)), const(self.t.nr)), const(v * lanes)
            )
            value = _at(self.col_panels, offset, vdt) if direct is None else direct[v]
            body.append(Decl(name, vdt, init=value))
        if self.t.prefetch and self.t.pack_cols:
            ahead = add(
                mul(add(mul(q, self.t.k_stride), var(kk)), const(self.t.nr)),
                const(self.t.prefetch * self.t.nr),
            )
            line = 64 // dtypes.itemsize(self.t.acc)
            body += [
                Prefetch(self.col_panels, (add(ahead, const(n)),))
                for n in range(0, self.t.nr, line)
            ]
        for r in range(mr):
            a = ctx.fresh(f"a{r}")
            body.append(
                Decl(a, vdt, init=Cast(vdt, self._row_value(index, p, row_base, r, k0, var(kk))))
            )
            for v in range(nv):
                body.append(Assign(accs[r][v], self._accumulate(a, b_names[v], accs[r][v])))
        kind = "unroll" if self.t.unroll > 1 else "serial"
        k_loop = For(kk, depth, seq(body), kind, factor=self.t.unroll if self.t.unroll > 1 else 0)
        spill = [
            Store(self.spill, (const(r * self.t.nr + v * lanes),), Var(accs[r][v], vdt))
            for r in range(mr)
            for v in range(nv)
        ]
        rows_left = minimum(const(mr), sub(count[0], mul(p, const(mr))))
        cols_left = minimum(const(self.t.nr), sub(count[1], mul(q, const(self.t.nr))))
        finish = seq(*spill, self._epilogue(index, row_base, col_base, rows_left, cols_left))
        vector_store = self._direct_store(index, row_base, col_base, accs)
        if vector_store is not None:
            whole = Binary(
                "and", _eq(rows_left, const(mr)), _eq(cols_left, const(self.t.nr)), "bool"
            )
            finish = If(whole, vector_store, finish)
        if self.t.kc:
            keep = seq(
                Store(self.partial, (partial_at(r, v),), Var(accs[r][v], vdt))
                for r in range(mr)
                for v in range(nv)
            )
            finish = If(last, finish, keep)
        return seq(*decls, *init, k_loop, finish)

    def _accumulate(self, a: str, b: str, acc: str) -> Expr:
        vdt = self.t.vdt
        return self.found.accumulate(Var(acc, vdt), Var(a, vdt), Var(b, vdt))

    def _row_value(
        self, index: dict[str, Expr], p: Expr, row_base: Expr, r: int, k0: Expr, kk: Expr
    ) -> Expr:
        """The broadcast side at tile row `r`, k offset `kk`: from its packed panel, or
        evaluated in place at a row clamped into range (rows past the edge are computed but
        never stored)."""
        if self.t.pack_rows == "interleaved":
            offset = add(mul(add(mul(p, self.t.k_stride), kk), const(self.t.mr)), const(r))
            return _at(self.row_panels, offset, self.t.acc)
        if self.t.pack_rows == "rows":
            offset = add(mul(add(mul(p, const(self.t.mr)), const(r)), self.t.k_stride), kk)
            return _at(self.row_panels, offset, self.t.acc)
        last_row = sub(self.t.row.extent, const(1))
        row = Call("min", (add(row_base, const(r)), last_row), INDEX)
        point = {**index, **self.t.row.index(row), **self.t.k.index(add(k0, kk))}
        return substitute(self.t.row_side, point)

    def _direct_store(
        self, index: dict[str, Expr], row_base: Expr, col_base: Expr, accs: list[list[str]]
    ) -> Stmt | None:
        """The epilogue of a whole tile straight from the accumulators, one vector store per
        accumulator, when the columns are the output's contiguous last axis and the
        epilogue vectorizes along them; None otherwise (the spill path does it all)."""
        stage, lanes, vdt = self.stage, self.t.lanes, self.t.vdt
        if lanes == 1 or self.t.col.axes != self.relaid.out_axes[-1:]:
            return None
        (axis,) = self.t.col.axes
        marker = self.ctx.fresh("acc")  # stands for the accumulator lanes in the epilogue
        stores: list[Stmt] = []
        for r, row in enumerate(accs):
            point = {**index, **self.t.row.index(add(row_base, const(r))), axis: var(axis)}
            value = stage.finish(Load(marker, (var(axis),), self.t.acc), point)
            vectorized = vectorize(value, axis, lanes)
            if vectorized is None:
                return None
            for v, name in enumerate(row):
                at = {axis: add(col_base, const(v * lanes))}
                result = substitute(replace_loads(vectorized, marker, Var(name, vdt)), at)
                indices = tuple(substitute(point[a], at) for a in self.relaid.out_axes)
                stores.append(Store(self.relaid.out_buffer, indices, result))
        return seq(stores)

    def _epilogue(
        self,
        index: dict[str, Expr],
        row_base: Expr,
        col_base: Expr,
        rows_left: Expr,
        cols_left: Expr,
    ) -> Stmt:
        """Store the spilled tile through the stage's epilogue, clipped to the output."""
        r, lane = self.ctx.fresh("er"), self.ctx.fresh("el")
        point = {
            **index,
            **self.t.row.index(add(row_base, var(r))),
            **self.t.col.index(add(col_base, var(lane))),
        }
        value = _at(self.spill, add(mul(var(r), const(self.t.nr)), var(lane)), self.t.acc)
        stage = self.stage
        indices = tuple(point[a] for a in self.relaid.out_axes)
        store = Store(self.relaid.out_buffer, indices, stage.finish(value, point))
        return nest([Loop(r, rows_left), self._vector_loop(lane, cols_left)], store)
