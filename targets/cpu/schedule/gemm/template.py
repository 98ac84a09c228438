"""The packed GEMM template's blocks: the loops over batch, column and row blocks and k blocks
that tie its parts together (the tiling, the relayout copies, packing, the register tile and
the stores). `targets.cpu.schedule.contraction` owns the knobs and constraints; the module
doc there describes the loop structure.
"""

from __future__ import annotations

from dataclasses import dataclass

from tunehub.compiler.analysis import Stage
from tunehub.compiler.dtypes import INDEX
from tunehub.compiler.ir import Binary, Call, Const, Expr, Extent, Load, substitute
from tunehub.compiler.loop import (
    Decl,
    For,
    If,
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
from tunehub.targets.cpu.schedule.gemm.engines import DotTile, Engine, TileKernel
from tunehub.targets.cpu.schedule.gemm.microkernel import (
    ColumnsInPlace,
    Partial,
    RegisterTile,
    RowInPlace,
)
from tunehub.targets.cpu.schedule.gemm.packing import Packer, Panels
from tunehub.targets.cpu.schedule.gemm.relayout import as_written, relaid
from tunehub.targets.cpu.schedule.gemm.stores import TileStores
from tunehub.targets.cpu.schedule.gemm.tiling import lanes_of, tiling


def _eq(a: Expr, b: Expr) -> Expr:
    return Binary("==", a, b, "bool")


@dataclass(frozen=True)
class _Workspaces:
    """A block's per-thread workspaces: each packed side's panels (None: read in place), the
    spilled tile, and the partial sums kept between k blocks (None: one k block)."""

    cols: Panels | None
    rows: Panels | None
    spill: str
    partial: str | None


class Template:
    """Lowers one contraction stage under one config (see `contraction` for the knobs), its
    register tile of fmas or, with an `engine`, of dot instructions (`engines`)."""

    def __init__(
        self,
        stage: Stage,
        found: Plan,
        config: Config,
        ctx: Context,
        rows: tuple[Expr, ...],
        engine: Engine | None = None,
    ) -> None:
        lanes = lanes_of(ctx.target, found.acc)
        self.relaid = (
            relaid(ctx, stage, found, str(config["vec_side"]), lanes)
            if config.get("relayout") and not rows
            else as_written(stage, found)
        )
        t = self.tiling = tiling(stage, found, self.relaid.found, config, lanes, rows)
        self.stage, self.ctx = stage, ctx
        self.packer = Packer(ctx, t.k, t.kc, t.acc, t.lanes)
        tile = (ctx, t.mr, t.nv, t.lanes, t.acc, t.term, t.unroll, t.prefetch)
        self.engine = engine
        self.kernel: RegisterTile = RegisterTile(*tile)
        if engine is not None and engine.tiles:
            self.kernel = TileKernel(*tile, engine=engine)
        elif engine is not None:
            sums = ctx.scratch("colsums", t.acc, (t.nc,), per_thread=True) if engine.offset else ""
            self.kernel = DotTile(*tile, engine=engine, sums=sums)
        # What each side's panels hold: its values, or an engine's narrow ones.
        self.row_side = t.row_side if engine is None else engine.row_value(t.row_side)
        self.col_side = t.col_side if engine is None else engine.col_value(t.col_side)
        self.stores = TileStores(
            ctx, stage, self.relaid.out_buffer, self.relaid.out_axes, t.row, t.col, t.acc, lanes
        )

    def lower(self) -> Stmt:
        t = self.tiling
        index = dict(t.fixed)
        outer = []
        for axis, size in t.batch:
            outer.append(Loop(self.ctx.fresh(axis), size))
            index[axis] = var(outer[-1].var)
        jc = Loop(self.ctx.fresh("jc"), ceildiv(t.col.extent, t.nc))
        ic = Loop(self.ctx.fresh("ic"), ceildiv(t.row.extent, t.mc))
        outer += [jc, ic]
        outer[: t.parallel] = [Loop(lp.var, lp.extent, "parallel") for lp in outer[: t.parallel]]
        col0, row0 = mul(var(jc.var), const(t.nc)), mul(var(ic.var), const(t.mc))
        # The column block's index among all of them (batch and jc), from 1: which panels a
        # thread holds (0: none yet).
        block: Expr = const(0)
        for loop in outer[:-1]:
            block = add(mul(block, loop.extent), var(loop.var))
        blocks = nest(outer, self._block(index, row0, col0, add(block, const(1))))
        return seq(*self.relaid.before, blocks, *self.relaid.after)

    def _block(self, index: dict[str, Expr], row0: Expr, col0: Expr, block: Expr) -> Stmt:
        """One mc x nc block of the output: k blocks of packing and register tiles."""
        ctx, t = self.ctx, self.tiling
        nrows, ncols, depth = ctx.fresh("nrows"), ctx.fresh("ncols"), ctx.fresh("depth")
        count = (var(nrows), var(ncols))
        w = self._workspaces()
        if t.kc:
            pc = ctx.fresh("pc")
            blocks = ceildiv(t.k.extent, t.kc)
            k0 = mul(var(pc), const(t.kc))
            first, last = _eq(var(pc), const(0)), _eq(var(pc), sub(blocks, const(1)))
        else:
            k0 = const(0)
            first = last = Const(True, "bool")
        q, p = ctx.fresh("q"), ctx.fresh("p")
        panels = [Loop(q, ceildiv(var(ncols), t.nr)), Loop(p, ceildiv(var(nrows), t.mr))]
        tiles = nest(
            panels if t.cols_outer else panels[::-1],
            self._tile(w, index, row0, col0, count, var(p), var(q), k0, var(depth), first, last),
        )
        packs = []
        if w.cols is not None:
            pack = self.packer.pack(
                w.cols, self.col_side, t.col, col0, count[1], index, k0, var(depth)
            )
            if isinstance(self.kernel, DotTile) and self.kernel.sums:
                pack = seq(pack, self.kernel.column_sums(w.cols, count[1], var(depth)))
            if t.reuse_cols:
                packed = ctx.scratch("packed", INDEX, (1,), per_thread=True, zeroed=True)
                at = (const(0),)
                fresh = Binary("!=", Load(packed, at, INDEX), block, "bool")
                pack = If(fresh, seq(pack, Store(packed, at, block)))
            packs.append(pack)
        if w.rows is not None:
            packs.append(
                self.packer.pack(
                    w.rows, self.row_side, t.row, row0, count[0], index, k0, var(depth)
                )
            )
        k_block = seq(
            Decl(depth, INDEX, init=minimum(t.k_stride, sub(t.k.extent, k0))),
            *packs,
            *self.kernel.prepare(),
            tiles,
        )
        if t.kc:
            k_block = For(pc, blocks, k_block)
        return seq(
            Decl(nrows, INDEX, init=minimum(const(t.mc), sub(t.row.extent, row0))),
            Decl(ncols, INDEX, init=minimum(const(t.nc), sub(t.col.extent, col0))),
            k_block,
        )

    def _workspaces(self) -> _Workspaces:
        """A block's workspaces, allocated per thread."""
        ctx, t, engine = self.ctx, self.tiling, self.engine
        ext = self._panel_depth()
        cols: Panels | None = None
        rows: Panels | None = None
        group = 1 if engine is None else engine.group
        if t.pack_cols:
            dtype = t.acc if engine is None else engine.cols
            buffer = ctx.scratch("packcols", dtype, (t.nc, *ext), per_thread=True)
            cols = Panels(buffer, t.nr, t.k_stride, group=group)
        if t.pack_rows != "none":
            dtype = t.acc if engine is None else engine.rows
            buffer = ctx.scratch("packrows", dtype, (t.mc, *ext), per_thread=True)
            k_fastest = t.pack_rows == "rows"
            rows = Panels(buffer, t.mr, t.k_stride, k_fastest, 1 if k_fastest else group)
        spill = ctx.scratch("tile", t.acc, (t.mr * t.nr,), per_thread=True)
        partial = ctx.scratch("partial", t.acc, (t.mc * t.nc,), per_thread=True) if t.kc else None
        return _Workspaces(cols, rows, spill, partial)

    def _panel_depth(self) -> tuple[Extent, ...]:
        """The k extent of a packed panel, as workspace extents (literals or symbol names)."""
        if self.tiling.kc:
            return (self.tiling.kc,)
        return tuple(r.extent for r in self.stage.anchor.reduce_axes)

    def _tile(
        self,
        w: _Workspaces,
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
        """The register tile at row panel `p` and column panel `q` of a block, stored after
        the last k block (kept in the partial sums after the others)."""
        t, kernel = self.tiling, self.kernel
        row_base = add(row0, mul(p, const(t.mr)))
        col_base = add(col0, mul(q, const(t.nr)))
        accs = kernel.accumulators()
        partial = None if w.partial is None else Partial(w.partial, add(mul(p, const(t.nb)), q))
        cols = self._columns_in_place(index, col_base, k0) if w.cols is None else w.cols
        rows = self._row_in_place(index, row_base, k0) if w.rows is None else w.rows
        k_loop = kernel.k_loop(accs, depth, p, q, cols, rows)
        rows_left = minimum(const(t.mr), sub(count[0], mul(p, const(t.mr))))
        cols_left = minimum(const(t.nr), sub(count[1], mul(q, const(t.nr))))
        clipped = self.stores.spilled(
            w.spill, kernel.nr, index, row_base, col_base, rows_left, cols_left
        )
        finish = seq(*kernel.spill(accs, w.spill), clipped)
        vector_store = (
            self.stores.direct(index, row_base, col_base, accs) if kernel.in_registers else None
        )
        if vector_store is not None:
            whole = Binary("and", _eq(rows_left, const(t.mr)), _eq(cols_left, const(t.nr)), "bool")
            finish = If(whole, vector_store, finish)
        if partial is not None:
            finish = If(last, finish, kernel.keep(accs, partial))
        return seq(*kernel.start(accs, partial, first), k_loop, finish)

    def _columns_in_place(self, index: dict[str, Expr], col_base: Expr, k0: Expr) -> ColumnsInPlace:
        """The vector side's columns of the tile from `col_base`, vector-loaded where they are."""
        t = self.tiling

        def vectors(kk: Expr) -> list[Expr]:
            found = self.packer.vectors(t.col_side, t.col, t.nr, col_base, index, add(k0, kk))
            assert found is not None, "check() allows pack_cols=False only where this works"
            return found

        return vectors

    def _row_in_place(self, index: dict[str, Expr], row_base: Expr, k0: Expr) -> RowInPlace:
        """The broadcast side at tile row `r`, k offset `kk`, evaluated in place at a row
        clamped into range (rows past the edge are computed but never stored)."""
        t = self.tiling

        def value(r: int, kk: Expr) -> Expr:
            last_row = sub(t.row.extent, const(1))
            row = Call("min", (add(row_base, const(r)), last_row), INDEX)
            point = {**index, **t.row.index(row), **t.k.index(add(k0, kk))}
            return substitute(t.row_side, point)

        return value
