"""The packed GEMM template of contraction stages: the plan (sides and axis groups) and its
lowering to loop IR. `targets.cpu.schedule.contraction` owns the knobs and constraints; the
module doc there describes the loop structure.
"""

from __future__ import annotations

from tunehub.compiler import dtypes
from tunehub.compiler.analysis import Stage
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
    substitute,
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
    minimum,
    mul,
    seq,
    sub,
    var,
)
from tunehub.compiler.schedule.plan import Plan
from tunehub.compiler.schedule.stage import Context, Loop, nest
from tunehub.compiler.space.space import Config
from tunehub.targets.cpu.schedule.gemm.packing import Packer, Panels
from tunehub.targets.cpu.schedule.gemm.relayout import as_written, relaid
from tunehub.targets.cpu.schedule.gemm.stores import TileStores
from tunehub.targets.cpu.schedule.gemm.tiling import lanes_of, tiling


def _eq(a: Expr, b: Expr) -> Expr:
    return Binary("==", a, b, "bool")


def _at(buf: str, offset: Expr, dtype: str) -> Expr:
    """A read of `buf` at a flat element offset (a vector of them for a vector dtype)."""
    return Load(buf, (offset,), dtype)


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
        self.packer = Packer(ctx, self.t.k, self.t.kc, self.t.acc, self.t.lanes)
        self.stores = TileStores(
            ctx,
            stage,
            self.relaid.out_buffer,
            self.relaid.out_axes,
            self.t.row,
            self.t.col,
            self.t.acc,
            self.t.lanes,
        )

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
        t, ext = self.t, self._panel_depth()
        self.col_panels = (
            Panels(ctx.scratch("packcols", t.acc, (t.nc, *ext), per_thread=True), t.nr, t.k_stride)
            if t.pack_cols
            else None
        )
        self.row_panels = (
            Panels(
                ctx.scratch("packrows", t.acc, (t.mc, *ext), per_thread=True),
                t.mr,
                t.k_stride,
                k_fastest=t.pack_rows == "rows",
            )
            if t.pack_rows != "none"
            else None
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
        if self.col_panels is not None:
            pack = self.packer.pack(
                self.col_panels, t.col_side, t.col, col0, count[1], index, k0, var(depth)
            )
            if self.t.reuse_cols:
                packed = ctx.scratch("packed", INDEX, (1,), per_thread=True, zeroed=True)
                at = (const(0),)
                fresh = Binary("!=", Load(packed, at, INDEX), block, "bool")
                pack = If(fresh, seq(pack, Store(packed, at, block)))
            packs.append(pack)
        if self.row_panels is not None:
            packs.append(
                self.packer.pack(
                    self.row_panels, t.row_side, t.row, row0, count[0], index, k0, var(depth)
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
        cols = self.col_panels
        if cols is None:
            k = add(k0, var(kk))
            direct = self.packer.vectors(self.t.col_side, self.t.col, self.t.nr, col_base, index, k)
            assert direct is not None, "check() allows pack_cols=False only where this works"
            values = direct
        else:
            values = [
                _at(cols.buffer, cols.at(q, var(kk), const(v * lanes)), vdt) for v in range(nv)
            ]
        body += [Decl(name, vdt, init=value) for name, value in zip(b_names, values, strict=True)]
        if self.t.prefetch and cols is not None:
            ahead = cols.at(q, var(kk), const(self.t.prefetch * self.t.nr))
            line = 64 // dtypes.itemsize(self.t.acc)
            body += [
                Prefetch(cols.buffer, (add(ahead, const(n)),)) for n in range(0, self.t.nr, line)
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
        clipped = self.stores.spilled(
            self.spill, self.t.nr, index, row_base, col_base, rows_left, cols_left
        )
        finish = seq(*spill, clipped)
        vector_store = self.stores.direct(index, row_base, col_base, accs)
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
        if self.row_panels is not None:
            return _at(self.row_panels.buffer, self.row_panels.at(p, kk, const(r)), self.t.acc)
        last_row = sub(self.t.row.extent, const(1))
        row = Call("min", (add(row_base, const(r)), last_row), INDEX)
        point = {**index, **self.t.row.index(row), **self.t.k.index(add(k0, kk))}
        return substitute(self.t.row_side, point)
