"""Packing of a contraction's factor sides into panels: each side evaluated over a block of its
lanes (rows or columns) and k values into a contiguous, zero-padded workspace of the
accumulator dtype, so that every layout (NN, NT, TN), conv2d's padded reads and int4
dequantization reach the register tile as the same dense panels.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from tunehub.compiler.dtypes import INDEX
from tunehub.compiler.ir import Binary, Call, Cast, Const, Expr, Load, Var, loads, substitute, walk
from tunehub.compiler.loop import (
    Decl,
    For,
    If,
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
from tunehub.compiler.schedule.plan import Group
from tunehub.compiler.schedule.stage import Context, Loop, nest
from tunehub.compiler.schedule.vectorize import depends, vector_of, vectorize
from tunehub.compiler.simplify import simplified
from tunehub.targets.cpu.schedule.gemm.tiling import vector_kind, vector_loop

# k values packed per run where a side computes its values from k-contiguous reads: the
# eight nibbles of an int4 weight word.
PACK_RUN = 8
# k values per block where a panel is packed from k-contiguous reads (a transposed operand,
# `B[n, k]`): each lane's run of k in turn writes the panel at a stride of a whole row of
# lanes, so unblocked a 64-lane panel's writes spread over 64 KB, past L1, and an NT matmul
# 256^3 ran 1.5x the NN one; in blocks of 16 (a line of floats read per lane) they stay in 4.
PACK_K_BLOCK = 16
WALKED_ROW = 8  # the shortest last axis a packing walks by rows


def k_inner(side: Expr, k_axes: tuple[str, ...], lane_axes: tuple[str, ...]) -> bool:
    """Whether packing `side` should walk k innermost: its reads' last indices follow k and
    not the panel's lane axes (row-major A[i, k], NT B[j, k], int4 W[n, k // 8])."""
    last = [ld.indices[-1] for ld in loads(side) if ld.indices]
    return any(depends(e, k_axes) for e in last) and not any(depends(e, lane_axes) for e in last)


def _transforms(side: Expr) -> bool:
    """Whether a side computes its values (dequantizes) rather than widening one read."""
    while isinstance(side, Cast):
        side = side.x
    return not isinstance(side, Load)


def _walked(group: Group) -> bool:
    """Whether packing walks `group` by rows of its last axis (`Packer._walk`): a group of
    several axes whose last one is long enough to pay for a row loop (3-wide filter rows do
    not; their flat index usually merges back into one, `flat_index`)."""
    last = const_value(group.extents[-1]) if group.axes else 1
    return len(group.axes) > 1 and (last is None or last >= WALKED_ROW)


@dataclass(frozen=True)
class Panels:
    """A workspace of packed panels, each `tile` lanes wide and `stride` k values deep: lanes
    interleaved, buffer[(panel * stride + k) * tile + lane], or with `k_fastest` one run of
    k per lane, buffer[(panel * tile + lane) * stride + k] (a plain copy of row-major rows).
    Interleaved panels of a `group` > 1 keep each lane's `group` consecutive k values
    together (a dot instruction's word: pairs of bfloat16, quads of int8), buffer[(panel *
    stride + k - k % group) * tile + lane * group + k % group]; `stride` is then a multiple of
    `group`."""

    buffer: str
    tile: int
    stride: Expr
    k_fastest: bool = False
    group: int = 1

    def at(self, panel: Expr, k: Expr, lane: Expr) -> Expr:
        """The flat offset of a panel's `lane` at `k`."""
        if self.k_fastest:
            return add(mul(add(mul(panel, const(self.tile)), lane), self.stride), k)
        if self.group > 1:
            within = Binary("%", k, const(self.group), INDEX)
            row = mul(add(mul(panel, self.stride), sub(k, within)), const(self.tile))
            return add(add(row, mul(lane, const(self.group))), within)
        return add(mul(add(mul(panel, self.stride), k), const(self.tile)), lane)


@dataclass(frozen=True)
class Packer:
    """Packs sides whose reduce axes are flattened into `k` (k blocks of `kc`, 0: one) into
    panels of `acc`, copying with vectors of `lanes` where the reads allow."""

    ctx: Context
    k: Group
    kc: int
    acc: str
    lanes: int

    def pack(
        self,
        panels: Panels,
        side: Expr,
        group: Group,
        start: Expr,
        count: Expr,
        index: dict[str, Expr],
        k0: Expr,
        depth: Expr,
    ) -> Stmt:
        """Evaluate `side` over `count` lanes of `group` from `start` and `depth` k values
        from `k0` into zero-padded `panels`."""
        ctx, buf, tile, k_fastest = self.ctx, panels.buffer, panels.tile, panels.k_fastest
        panel, kk, lane, width = ctx.fresh("pp"), ctx.fresh("pk"), ctx.fresh("pl"), ctx.fresh("pw")
        first_lane = add(start, mul(var(panel), const(tile)))

        def at(k: Expr, lane_at: Expr | None = None) -> Expr:
            return panels.at(var(panel), k, var(lane) if lane_at is None else lane_at)

        def lanes_at(at_lane: Expr) -> dict[str, Expr]:
            return group.index(add(first_lane, at_lane))

        def ks_at(k: Expr) -> dict[str, Expr]:
            return self.k.index(add(k0, k))

        def point(lanes: dict[str, Expr], ks: dict[str, Expr]) -> Expr:
            return substitute(side, {**index, **lanes, **ks})

        def value(k: Expr) -> Expr:
            return point(lanes_at(var(lane)), ks_at(k))

        def over_lanes(k: Expr) -> Stmt:
            """The panel's lanes at one k."""
            if not _walked(group):
                loop = vector_loop(lane, var(width), self.lanes)
                return nest([loop], Store(buf, (at(k),), value(k)))
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
            if not _walked(self.k):
                loop = vector_loop(kk, depth, self.lanes)
                return nest([loop], Store(buf, (at(var(kk)),), value(var(kk))))
            return self._walk(
                self.k,
                k0,
                depth,
                lambda ks: point(lanes_at(var(lane)), ks),
                lambda k, packed: Store(buf, (at(k),), packed),
            )

        offset = at(var(kk))
        if k_inner(side, self.k.axes, group.axes) and _transforms(side) and not k_fastest:
            fill = self._runs(buf, lane, var(width), depth, value, at)
        elif k_inner(side, self.k.axes, group.axes) and not (k_fastest or _walked(self.k)):
            fill = self._k_blocked(
                lane, var(width), kk, depth, lambda k: Store(buf, (at(k),), value(k))
            )
        elif k_fastest or k_inner(side, self.k.axes, group.axes):
            fill = For(lane, var(width), over_k())
        elif panels.group > 1 and not _walked(group):
            fill = self._words(
                panels.group, kk, lane, var(width), depth, lambda k: Store(buf, (at(k),), value(k))
            )
        else:
            fill = For(kk, depth, over_lanes(var(kk)))
        zero = Store(buf, (offset,), Const(0, self.acc))
        pad = For(kk, depth, For(lane, sub(const(tile), var(width)), zero, start=var(width)))
        lanes_left = minimum(const(tile), sub(count, mul(var(panel), const(tile))))
        vectors = self.vectors(side, group, tile, first_lane, index, add(k0, var(kk)))
        if vectors is None or k_fastest or panels.group > 1:
            fill = seq(fill, If(Binary("<", var(width), const(tile), "bool"), pad))
        else:  # whole panels by vector copies, the partial one lane by lane
            whole = seq(
                Store(buf, (at(var(kk), const(n * self.lanes)),), value)
                for n, value in enumerate(vectors)
            )
            full = Binary("==", var(width), const(tile), "bool")
            fill = If(full, For(kk, depth, whole), seq(fill, pad))
        return For(panel, ceildiv(count, tile), seq(Decl(width, INDEX, init=lanes_left), fill))

    def vectors(
        self,
        side: Expr,
        group: Group,
        tile: int,
        first: Expr,
        index: dict[str, Expr],
        k: Expr,
    ) -> list[Expr] | None:
        """`side` over the `tile` lanes of `group` from `first` at reduce index `k` as vector
        values, or None when that cannot be done with contiguous vector reads (whole panels
        copy these, and a tile reading its columns in place loads them)."""
        if len(group.axes) != 1 or tile % self.lanes or self.lanes == 1:
            return None
        (axis,) = group.axes
        vectorized = vectorize(side, axis, self.lanes)
        if vectorized is None:
            return None
        point = {**index, **self.k.index(k)}
        return [
            substitute(vectorized, {**point, axis: add(first, const(n * self.lanes))})
            for n in range(tile // self.lanes)
        ]

    def _words(
        self,
        group: int,
        kk: str,
        lane: str,
        width: Expr,
        depth: Expr,
        store: Callable[[Expr], Stmt],
    ) -> Stmt:
        """`store` at every lane and k, a lane's `group` k values (its word, consecutive in
        the panel) stored together: the vectorizer merges them into interleaving shuffles
        of `group` rows, where a k at a time each store strides over the others' places (a
        bfloat16 512^3 matmul's packing 0.21 -> 0.10 ms, int8 0.12 -> 0.05)."""
        ks = [add(mul(var(kk), const(group)), const(w)) for w in range(group)]
        words = nest([vector_loop(lane, width, self.lanes)], seq(store(k) for k in ks))
        return For(kk, Binary("//", depth, const(group), INDEX), words)

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
        kind = vector_kind(self.lanes)
        columns = split_loop(x, x_from, x_to, value(at), partial(store, n), *kind)
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
                Store(buf, (at(k),), Call("lane", (lanes, const(j)), self.acc))
                for j, k in enumerate(ks)
            ]
            body = seq(Decl(run, vectorized.dtype, init=vectorized), *stores)
        runs = Binary("//", depth, const(PACK_RUN), INDEX)
        whole = nest([Loop(kr, runs), Loop(lane, width)], body)
        k_extent = const_value(self.k.extent)
        if k_extent is not None and k_extent % PACK_RUN == 0 and self.kc % PACK_RUN == 0:
            return whole  # every k block holds whole runs
        done = mul(runs, const(PACK_RUN))
        one = For(lane, width, Store(buf, (at(var(kk)),), value(var(kk))))
        tail = For(kk, sub(depth, done), one, start=done)
        return seq(whole, tail)
