"""The tiled SIMT contraction template (`mode="tiled"`, "SSSRRSRS"): block tile `bm x bn`,
thread tile `tm x tn` in registers, k slices of `bk` staged in shared memory; `vec` reads
4-element runs as `float4` where alignment is provable; `double` buffers the slices (register
prefetch, one barrier per slice); `split_k` slices k over grid z with a second kernel summing
the slices (for small M x N). A kind may copy raw sides asynchronously (CUDA's `cp.async`:
`targets.cuda.schedule.async_tiles`) through the kernel's hooks (`TiledKernel._copied`).

Grid: x over column tiles of `bn`, y over row tiles of `bm`, z over batch x split-K. Block:
`bn / tn` x `bm / tm` threads, each owning a `tm` x `tn` register tile whose rows and columns
are strided by the thread grid (`ty + i * bm / tm`, `tx + j * bn / tn`), so a warp's shared
memory reads are broadcasts (rows) or consecutive (columns) and its global stores coalesce.

Per `bk` slice of k, every thread loads its share of the `bm x bk` and `bk x bn` tiles into
shared memory (k-major, padded by one word where the load walks k, against bank conflicts),
evaluating the factor sides there (prologue: casts, dequantization, padding), out-of-range
elements as 0; a barrier; the register tile accumulates `bk` outer products; a barrier. With
`double`, the next slice's values are loaded into registers before the current slice is
computed and stored into the other shared buffer after it, hiding the global load latency
with one barrier per slice. With `vec`, each load of 4 consecutive elements along the walked
axis is one `float4` read.

The store applies the epilogue (bias, activation, residual, casts) per element, clipped at
the edges. With split-K (`split` > 1) each z slice sums its share of k into a workspace of
partial results, and a second kernel adds the slices and applies the epilogue.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from tunehub.compiler.analysis import Stage
from tunehub.compiler.dtypes import INDEX, itemsize
from tunehub.compiler.ir import Binary, Const, Expr, Load, Var, substitute
from tunehub.compiler.loop import (
    Assign,
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
    flat_index,
    minimum,
    mul,
    product,
    seq,
    sub,
    var,
)
from tunehub.compiler.schedule.plan import Group
from tunehub.compiler.schedule.stage import Context, first_values, nest
from tunehub.compiler.space.space import Config, Knob
from tunehub.schemas.target import Target
from tunehub.targets.gpu.limits import WARP, block_error
from tunehub.targets.gpu.schedule.blocks import (
    FALLBACK_THREADS,
    bind,
    covers,
    div,
    guard,
    less,
    mod,
)
from tunehub.targets.gpu.schedule.contraction import Planned, grid_error, planned
from tunehub.targets.gpu.schedule.operands import Operands
from tunehub.targets.gpu.schedule.vectors import VEC, aligned, scalarized


@dataclass(frozen=True)
class Shape:
    """The knob values of the tiled kernel."""

    bm: int
    bn: int
    bk: int
    tm: int
    tn: int
    split: int
    vec: bool
    double: bool

    @classmethod
    def of(cls, config: Config) -> Shape:
        return cls(
            int(config["bm"]),
            int(config["bn"]),
            int(config["bk"]),
            int(config["tm"]),
            int(config["tn"]),
            int(config["split_k"]),
            bool(config["vec"]),
            bool(config["double"]),
        )

    @property
    def threads(self) -> int:
        return (self.bm // self.tm) * (self.bn // self.tn)

    def width(self, side: str) -> int:
        return self.bm if side == "row" else self.bn

    def loads(self, side: str) -> int:
        """Elements of `side`'s tile each thread loads per k slice."""
        return self.width(side) * self.bk // self.threads

    def shared_bytes(self, ops: Operands) -> int:
        words = sum(self.bk * (self.width(side) + pad(ops, side)) for side in SIDES)
        return itemsize(ops.acc) * words * (2 if self.double else 1)

    def registers(self) -> int:
        """A rough per-thread estimate, fitted to ptxas on sm_80 (fp32 and int4 matmuls):
        accumulators and fragments, two registers per loaded element (value and address
        arithmetic of the unrolled loads; three when double buffering holds the next slice),
        and about 24 for indices and loop state."""
        per_load = 3 if self.double else 2
        loads = self.loads("row") + self.loads("col")
        return self.tm * self.tn + self.tm + self.tn + per_load * loads + 24


SIDES = ("row", "col")


def pad(ops: Operands, side: str) -> int:
    """Shared-memory row padding of a tile: one word where its loads walk k (consecutive
    threads then store a column of the k-major tile; the pad spreads it over banks)."""
    return int(ops.k_inner(side))


def walked(ops: Operands, side: str) -> tuple[str, Expr] | None:
    """The axis a side's tile loads walk, and its extent, when that is a single axis."""
    group = ops.k if ops.k_inner(side) else (ops.rows if side == "row" else ops.cols)
    if len(group.axes) != 1:
        return None
    return group.axes[0], group.extents[0]


def vectorized(ops: Operands, side: str, shape: Shape) -> Expr | None:
    """`side` as 4-lane vector loads along its walked axis, or None where the alignment of
    such loads cannot be proven or the tile does not split into whole vectors."""
    found = walked(ops, side)
    if found is None or not covers(found[1], VEC) or shape.loads(side) % VEC:
        return None
    expr = ops.row_side if side == "row" else ops.col_side
    return aligned(expr, found[0], VEC, ops.shapes)


class TiledKernel:
    """Lowers one contraction stage under a tiled config."""

    def __init__(self, ops: Operands, shape: Shape, ctx: Context) -> None:
        self.ops, self.s, self.ctx = ops, shape, ctx
        self.ld = {side: shape.width(side) + pad(ops, side) for side in SIDES}
        self.ty = bind(ctx, "ty", shape.bm // shape.tm, "threadIdx.y")
        self.tx = bind(ctx, "tx", shape.bn // shape.tn, "threadIdx.x")
        self.tiles = {side: ctx.fresh("As" if side == "row" else "Bs") for side in SIDES}
        self.vectors = {side: vectorized(ops, side, shape) if shape.vec else None for side in SIDES}
        self.copied = {side: self._copied(side) for side in SIDES}
        self.shape = tuple(as_expr(e) for e in ops.stage.shape)
        self.partial = ""
        if shape.split > 1:  # raw partial sums, slice by slice, each in the output's layout
            self.partial = ctx.scratch("partial", ops.acc, (shape.split, *ops.stage.shape))

    def lower(self) -> Stmt:
        ops, s, ctx = self.ops, self.s, self.ctx
        bx = bind(ctx, "bx", ceildiv(ops.cols.extent, s.bn), "blockIdx.x")
        by = bind(ctx, "by", ceildiv(ops.rows.extent, s.bm), "blockIdx.y")
        z_extent = mul(ops.batch.extent, const(s.split))
        bz = bind(ctx, "bz", z_extent, "blockIdx.z")
        blocks = [bx, by] + ([bz] if const_value(z_extent) != 1 else [])
        z = var(bz.var) if len(blocks) == 3 else const(0)
        self.batch, self.slice = div(z, s.split), mod(z, s.split)
        self.row0, self.col0 = mul(var(by.var), const(s.bm)), mul(var(bx.var), const(s.bn))
        k_total = ops.k.extent
        bounds: list[Stmt] = []
        self.k_begin: Expr = const(0)
        self.k_end: Expr = k_total
        if s.split > 1:
            chunk = mul(ceildiv(ceildiv(k_total, s.split), s.bk), const(s.bk))
            begin, end = ctx.fresh("kbeg"), ctx.fresh("kend")
            bounds = [
                Decl(begin, INDEX, init=mul(self.slice, chunk)),
                Decl(end, INDEX, init=minimum(k_total, add(var(begin), chunk))),
            ]
            self.k_begin, self.k_end = var(begin), var(end)
        self.k_whole = covers(k_total, s.bk)
        count = ceildiv(sub(self.k_end, self.k_begin), s.bk)
        buffers = 2 if s.double else 1
        shared = [
            Decl(self.tiles[side], ops.acc, (buffers * s.bk * self.ld[side],), shared=True)
            for side in SIDES
        ]
        accs = [[ctx.fresh(f"c{i}x{j}") for j in range(s.tn)] for i in range(s.tm)]
        zero = Const(0, ops.acc)
        main = self._double(count, accs) if s.double else self._single(count, accs)
        kernel = nest(
            blocks,
            seq(
                *shared,
                *bounds,
                *(Decl(name, ops.acc, init=zero) for row in accs for name in row),
                main,
                self._store(accs),
            ),
        )
        return kernel if s.split == 1 else seq(kernel, self._sum_slices())

    # ------------------------------------------------------------------ k slices

    def _threads(self, body: Stmt) -> Stmt:
        return nest([self.ty, self.tx], body)

    def _single(self, count: Expr, accs: list[list[str]]) -> Stmt:
        t = self.ctx.fresh("t")
        k0 = add(self.k_begin, mul(var(t), const(self.s.bk)))
        body = seq(
            self._threads(self._load(k0, const(0))),
            Barrier(),
            self._threads(self._compute(accs, const(0))),
            Barrier(),
        )
        return For(t, count, body)

    def _double(self, count: Expr, accs: list[list[str]]) -> Stmt:
        """Slice t computes from buffer t % 2 while slice t + 1 is read into registers (or
        copied asynchronously), then stored into the other buffer: one barrier per slice."""
        ctx, s, acc = self.ctx, self.s, self.ops.acc
        t = ctx.fresh("t")
        held = {
            side: [ctx.fresh("g") for _ in range(s.loads(side))]
            for side in SIDES
            if self.copied[side] is None
        }
        k_next = add(self.k_begin, mul(add(var(t), const(1)), const(s.bk)))
        more = less(add(var(t), const(1)), count)
        current = mod(var(t), 2)
        other = sub(const(1), current)
        commit, wait = self._fences() if any(self.copied.values()) else ([], [])
        step = seq(
            guard(more, self._load(k_next, other, held)),
            *commit,
            self._compute(accs, current),
            *wait,
            *([guard(more, self._stash(held, other))] if held else []),
        )
        decls = [Decl(name, acc) for names in held.values() for name in names]
        first = self._threads(seq(self._load(self.k_begin, const(0)), *commit, *wait))
        loop = For(t, count, seq(self._threads(step), Barrier()))
        return seq(*decls, first, Barrier(), loop)

    def _tid(self) -> Expr:
        return add(mul(var(self.ty.var), const(self.s.bn // self.s.tn)), var(self.tx.var))

    def _slots(self, side: str, run: int) -> list[tuple[Expr, Expr]]:
        """(tile lane, k offset) of the first element of each run of `run` consecutive
        elements (along the walked axis) this thread loads of `side`'s tile: consecutive
        threads take consecutive runs."""
        s = self.s
        width = s.width(side)
        out = []
        for n in range(s.loads(side) // run):
            f = add(const(n * s.threads), self._tid())
            if self.ops.k_inner(side):
                per_lane = s.bk // run
                out.append((div(f, per_lane), mul(mod(f, per_lane), const(run))))
            else:
                per_k = width // run
                out.append((mul(mod(f, per_k), const(run)), div(f, per_k)))
        return out

    def _elements(
        self, side: str, k0: Expr
    ) -> list[tuple[list[Stmt], list[tuple[Expr, Expr]], Expr | None]]:
        """This thread's loads of `side` at k slice `k0`, one entry per run: the locals it
        declares, (shared offset, value) per element, and the run's range condition."""
        ops = self.ops
        found = self.vectors[side]
        run = VEC if found is not None else 1
        along_k = ops.k_inner(side)
        start = self.row0 if side == "row" else self.col0
        out = []
        for lane, kk in self._slots(side, run):
            position, k = add(start, lane), add(k0, kk)
            if found is None:
                values = [self._value(side, position, k)]
                decls: list[Stmt] = []
            else:
                axis = walked(ops, side)
                assert axis is not None
                point = self._point(side, position, k)
                point[axis[0]] = k if along_k else position
                vector_decls, values = scalarized(substitute(found, point), VEC, self.ctx.fresh)
                decls = list(vector_decls)
            offsets = [self._offset(side, lane, kk, n) for n in range(run)]
            out.append(
                (decls, list(zip(offsets, values, strict=True)), self._bounds(side, position, k))
            )
        return out

    def _offset(self, side: str, lane: Expr, kk: Expr, n: int) -> Expr:
        """The tile offset of element `n` of the run at (lane, k offset) along the walked
        axis."""
        if self.ops.k_inner(side):
            return add(mul(add(kk, const(n)), const(self.ld[side])), lane)
        return add(mul(kk, const(self.ld[side])), add(lane, const(n)))

    def _bounds(self, side: str, position: Expr, k: Expr) -> Expr | None:
        """The condition under which a tile element (or run) is inside the operand (None:
        always)."""
        group = self.ops.rows if side == "row" else self.ops.cols
        conds = [] if covers(group.extent, self.s.width(side)) else [less(position, group.extent)]
        conds += [] if self.k_whole else [less(k, self.k_end)]
        return all_of(conds)

    # ------------------------------------------------------------------ a kind's copies

    def _copied(self, side: str) -> Load | None:
        """`side`'s read, where the kind copies its tiles raw into shared memory in the
        background (with `double`: the next slice while this one is computed) instead of
        through registers; None here, where every side is loaded and stored."""
        return None

    def _copy(self, side: str, k0: Expr, buffer: Expr) -> Stmt:
        """This thread's share of copied `side`'s tile at k slice `k0` into shared `buffer`,
        out-of-range elements zero-filled (a kind whose `_copied` names a side)."""
        raise NotImplementedError("a kind that copies sides lowers their copies")

    def _fences(self) -> tuple[list[Stmt], list[Stmt]]:
        """Where sides are copied: what commits a slice's copies, and what waits for them."""
        return [], []

    def _point(self, side: str, position: Expr, k: Expr) -> dict[str, Expr]:
        if side == "row":
            return self.ops.at(self.batch, position, None, k)
        return self.ops.at(self.batch, None, position, k)

    def _value(self, side: str, position: Expr, k: Expr) -> Expr:
        expr = self.ops.row_side if side == "row" else self.ops.col_side
        return substitute(expr, self._point(side, position, k))

    def _load(self, k0: Expr, buffer: Expr, held: dict[str, list[str]] | None = None) -> Stmt:
        """This thread's loads of both tiles at k slice `k0`, out-of-range elements as 0:
        into shared `buffer`, or into the registers `held` where given (a copied side is
        always copied into `buffer`)."""
        zero = Const(0, self.ops.acc)
        stmts: list[Stmt] = []
        for side in SIDES:
            if self.copied[side] is not None:
                stmts.append(self._copy(side, k0, buffer))
                continue
            names = iter(held[side] if held else [])
            for decls, elements, cond in self._elements(side, k0):
                if held is not None:
                    targets = [next(names) for _ in elements]
                    writes: list[Stmt] = [
                        Assign(name, value)
                        for name, (_, value) in zip(targets, elements, strict=True)
                    ]
                    zeros: list[Stmt] = [Assign(name, zero) for name in targets]
                else:
                    tile, base = self.tiles[side], self._base(side, buffer)
                    writes = [Store(tile, (add(base, at),), value) for at, value in elements]
                    zeros = [Store(tile, (add(base, at),), zero) for at, _ in elements]
                body = seq(*decls, *writes)
                stmts.append(body if cond is None else If(cond, body, seq(zeros)))
        return seq(stmts)

    def _stash(self, held: dict[str, list[str]], buffer: Expr) -> Stmt:
        """Store the registers `held` (filled by `_load(..., held)`) into `buffer`."""
        stmts: list[Stmt] = []
        for side in held:
            names = iter(held[side])
            tile, base = self.tiles[side], self._base(side, buffer)
            for _, elements, _ in self._elements(side, const(0)):
                stmts += [
                    Store(tile, (add(base, at),), Var(next(names), self.ops.acc))
                    for at, _ in elements
                ]
        return seq(stmts)

    def _base(self, side: str, buffer: Expr) -> Expr:
        """Where shared buffer `buffer` (0 or 1) of `side`'s tile starts."""
        return mul(buffer, const(self.s.bk * self.ld[side]))

    def _compute(self, accs: list[list[str]], buffer: Expr) -> Stmt:
        """`bk` outer products of the thread's fragments into its accumulators."""
        ctx, s, acc = self.ctx, self.s, self.ops.acc
        kk = ctx.fresh("kk")
        body: list[Stmt] = []
        fragments = {}
        for side, count, thread, step in (
            ("row", s.tm, self.ty, s.bm // s.tm),
            ("col", s.tn, self.tx, s.bn // s.tn),
        ):
            names = [ctx.fresh("a" if side == "row" else "b") for _ in range(count)]
            for n, name in enumerate(names):
                within = add(var(thread.var), const(n * step))
                offset = add(
                    self._base(side, buffer), add(mul(var(kk), const(self.ld[side])), within)
                )
                body.append(Decl(name, acc, init=Load(self.tiles[side], (offset,), acc)))
            fragments[side] = names
        for i, a in enumerate(fragments["row"]):
            for j, b in enumerate(fragments["col"]):
                product_ = self.ops.accumulate(Var(accs[i][j], acc), Var(a, acc), Var(b, acc))
                body.append(Assign(accs[i][j], product_))
        return For(kk, const(s.bk), seq(body), "unroll")

    # ------------------------------------------------------------------ stores

    def _store(self, accs: list[list[str]]) -> Stmt:
        """The register tile through the epilogue into the output (or, with split-K, raw
        into this slice's partial results), clipped at the edges."""
        ops, s, stage = self.ops, self.s, self.ops.stage
        stores: list[Stmt] = []
        for i in range(s.tm):
            row = add(self.row0, add(var(self.ty.var), const(i * (s.bm // s.tm))))
            for j in range(s.tn):
                col = add(self.col0, add(var(self.tx.var), const(j * (s.bn // s.tn))))
                point = ops.at(self.batch, row, col, None)
                value = Var(accs[i][j], ops.acc)
                indices = tuple(point[a] for a in stage.axes)
                if s.split > 1:
                    at = flat_index(indices, self.shape)
                    slot = add(mul(self.slice, product(self.shape)), at)
                    store: Stmt = Store(self.partial, (slot,), value)
                else:
                    store = Store(stage.buffer, indices, stage.finish(value, point))
                conds = [] if covers(ops.rows.extent, s.bm) else [less(row, ops.rows.extent)]
                conds += [] if covers(ops.cols.extent, s.bn) else [less(col, ops.cols.extent)]
                stores.append(guard(all_of(conds), store))
        return self._threads(seq(stores))

    def _sum_slices(self) -> Stmt:
        """The second kernel of split-K: per output element, the slices' partial sums added
        in order, then the epilogue."""
        ctx, stage, acc, shape = self.ctx, self.ops.stage, self.ops.acc, self.shape
        size = product(shape)
        blk = bind(ctx, "blk", ceildiv(size, FALLBACK_THREADS), "blockIdx.x")
        tx = bind(ctx, "tx", FALLBACK_THREADS, "threadIdx.x")
        e, total, n = ctx.fresh("e"), ctx.fresh("acc"), ctx.fresh("n")
        flat = add(mul(var(blk.var), const(FALLBACK_THREADS)), var(tx.var))
        index = Group(stage.axes, shape).index(var(e))
        partial = self.partial
        later = Load(partial, (add(mul(var(n), size), var(e)),), acc)
        body = seq(
            Decl(total, acc, init=Load(partial, (var(e),), acc)),
            For(
                n,
                const(self.s.split - 1),
                Assign(total, Binary("+", Var(total, acc), later, acc)),
                start=const(1),
            ),
            Store(
                stage.buffer,
                tuple(index[a] for a in stage.axes),
                stage.finish(Var(total, acc), index),
            ),
        )
        guarded = guard(None if covers(size, FALLBACK_THREADS) else less(var(e), size), body)
        return nest([blk, tx], seq(Decl(e, INDEX, init=flat), guarded))


TILED: dict[str, tuple[Knob, ...]] = {
    "bm": (64, 16, 32, 128),
    "bn": (64, 16, 32, 128),
    "bk": (16, 8, 32),
    "tm": (4, 1, 2, 8),
    "tn": (4, 1, 2, 8),
    "split_k": (1, 2, 4, 8, 16),
    "vec": (False, True),
    "double": (False, True),
}


class TiledContraction(Planned):
    """The tiled SIMT kernel (see the module doc): the default wherever no GEMV is."""

    kind = "tiled"
    summary = "tiled SIMT: block tiles staged in shared memory, a register tile per thread"
    knob_docs: ClassVar[Mapping[str, str]] = {
        "bm": "tiled: rows of the block tile",
        "bn": "tiled: columns of the block tile",
        "bk": "tiled: k values per shared-memory slice",
        "tm": "tiled: rows of a thread's register tile",
        "tn": "tiled: columns of a thread's register tile",
        "vec": "tiled: read runs of 4 elements as float4 where alignment is provable",
        "double": "tiled: double-buffer the k slices (prefetch into registers)",
        "split_k": "tiled: k split over grid z, summed by a second kernel (small M x N)",
    }

    def knobs(self, stage: Stage, target: Target) -> dict[str, tuple[Knob, ...]]:
        return dict(TILED)

    def naive(self, stage: Stage, target: Target) -> Config:
        return first_values(self.knobs(stage, target))

    def default(self, stage: Stage, target: Target) -> Config | None:
        ops = planned(stage)
        config = self.naive(stage, target)
        rows, cols, k = (const_value(g.extent) for g in (ops.rows, ops.cols, ops.k))
        small = rows is not None and cols is not None and rows * cols <= 256 * 256
        config.update(bk=16, double=True)
        if small:
            config.update(bm=32, bn=32, tm=2, tn=2)
            if k is not None and k >= 1024 and rows * cols <= 128 * 128:  # type: ignore[operator]
                config.update(split_k=4)
        config["vec"] = any(vectorized(ops, side, self.shape(config)) for side in SIDES)
        if self.check(stage, target, config) is not None:
            config.update(vec=False)
        return config

    def shape(self, config: Config) -> Shape:
        return Shape.of(config)

    def check(self, stage: Stage, target: Target, config: Config) -> str | None:
        ops, shape = planned(stage), self.shape(config)
        if shape.tm > shape.bm or shape.tn > shape.bn:
            return "a thread tile larger than its block tile"
        if shape.threads < WARP:
            return f"{shape.threads} threads per block (at least one warp)"
        for side in SIDES:
            if (shape.width(side) * shape.bk) % shape.threads:
                return f"the {side} tile does not split evenly over {shape.threads} threads"
        if shape.vec and not any(vectorized(ops, side, shape) for side in SIDES):
            return "no tile side can be read as aligned 4-element vectors"
        error = self.copies_error(ops, shape, target)
        if error is not None:
            return error
        k = const_value(ops.k.extent)
        if shape.split > 1 and k is not None and (shape.split - 1) * shape.bk >= k:
            return f"split_k={shape.split} leaves slices of k={k} empty"
        error = grid_error(ops, shape.bm, target, shape.split)
        if error is not None:
            return error
        return block_error(target, shape.threads, shape.shared_bytes(ops), shape.registers())

    def copies_error(self, ops: Operands, shape: Shape, target: Target) -> str | None:
        """Why a kind's copies of raw sides (`TiledKernel._copied`) cannot run so, or None."""
        return None

    def kernel(self, ops: Operands, config: Config, ctx: Context) -> Stmt:
        return TiledKernel(ops, self.shape(config), ctx).lower()
