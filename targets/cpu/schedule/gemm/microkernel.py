"""The packed GEMM's microkernel: a register tile of `mr` rows x `nv` vectors of accumulators
over one k block. Per k step it loads the tile's column vectors (and prefetches the column
panel ahead), broadcasts each row's value and adds their products (`mr * nv` fmas); between
k blocks its accumulators rest in per-thread partial sums, and after the last it can spill
them for the stores (`stores`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from tunehub.compiler import dtypes
from tunehub.compiler.ir import Cast, Const, Expr, Load, Var
from tunehub.compiler.loop import (
    Assign,
    Decl,
    For,
    If,
    Prefetch,
    Stmt,
    Store,
    add,
    const,
    mul,
    seq,
    var,
    vector,
)
from tunehub.compiler.schedule.plan import accumulate
from tunehub.compiler.schedule.stage import Context
from tunehub.targets.cpu.schedule.gemm.packing import Panels

# What a tile reads where a side is not packed, at a k offset within the block: its column
# vectors, and one row's value (to be broadcast).
ColumnsInPlace = Callable[[Expr], list[Expr]]
RowInPlace = Callable[[int, Expr], Expr]


@dataclass(frozen=True)
class Partial:
    """Where a tile's accumulators rest between k blocks: `buffer`, the per-thread partial
    sums of a block's tiles, at the tile's index `tile` in its block."""

    buffer: str
    tile: Expr


def _at(buf: str, offset: Expr, dtype: str) -> Expr:
    """A read of `buf` at a flat element offset (a vector of them for a vector dtype)."""
    return Load(buf, (offset,), dtype)


@dataclass(frozen=True)
class RegisterTile:
    """The microkernel of `mr` x `nv` vectors of `lanes` accumulators of `acc`, each term
    rounded to `term` first where it is set (`Plan.term`); its k loop unrolled by `unroll`,
    the column panel prefetched `prefetch` k steps ahead (0: not)."""

    ctx: Context
    mr: int
    nv: int
    lanes: int
    acc: str
    term: str | None
    unroll: int
    prefetch: int
    # Whether the sums are vector locals (`accumulators`), which a whole tile may store
    # directly; an AMX tile's are tile registers, always spilled.
    in_registers: ClassVar[bool] = True

    @property
    def nr(self) -> int:
        return self.nv * self.lanes

    @property
    def vdt(self) -> str:
        return vector(self.acc, self.lanes)

    def accumulators(self) -> list[list[str]]:
        """Fresh names of the accumulators: row r's v-th vector at [r][v]."""
        return [[self.ctx.fresh(f"c{r}x{v}") for v in range(self.nv)] for r in range(self.mr)]

    def prepare(self) -> list[Stmt]:
        """What a block's tiles need once, after its packing and before them (nothing)."""
        return []

    def start(self, accs: list[list[str]], partial: Partial | None, first: Expr) -> list[Stmt]:
        """The accumulators declared at zero; with k blocks (`partial`), zeroed in the
        `first` block and resumed from the partial sums in the others."""
        vdt = self.vdt
        zero = Cast(vdt, Const(0, self.acc))
        decls: list[Stmt] = [
            Decl(name, vdt, init=zero if partial is None else None) for row in accs for name in row
        ]
        if partial is None:
            return decls
        zeros = seq(Assign(name, zero) for row in accs for name in row)
        resume = seq(
            Assign(accs[r][v], _at(partial.buffer, self._partial_at(partial, r, v), vdt))
            for r in range(self.mr)
            for v in range(self.nv)
        )
        return [*decls, If(first, zeros, resume)]

    def k_loop(
        self,
        accs: list[list[str]],
        depth: Expr,
        p: Expr,
        q: Expr,
        cols: Panels | ColumnsInPlace,
        rows: Panels | RowInPlace,
    ) -> Stmt:
        """`depth` k steps of the tile of row panel `p` and column panel `q`, reading each
        side from its panels or in place."""
        ctx, mr, nv, lanes, vdt = self.ctx, self.mr, self.nv, self.lanes, self.vdt
        kk = ctx.fresh("k")
        b_names = [ctx.fresh(f"b{v}") for v in range(nv)]
        if isinstance(cols, Panels):
            at = [cols.at(q, var(kk), const(v * lanes)) for v in range(nv)]
            values = [_at(cols.buffer, offset, vdt) for offset in at]
        else:
            values = cols(var(kk))
        body: list[Stmt] = [
            Decl(name, vdt, init=value) for name, value in zip(b_names, values, strict=True)
        ]
        if self.prefetch and isinstance(cols, Panels):
            # A k step of a column panel is a row of nr lanes.
            ahead = cols.at(q, var(kk), const(self.prefetch * self.nr))
            line = 64 // dtypes.itemsize(self.acc)
            body += [
                Prefetch(cols.buffer, (add(ahead, const(n)),)) for n in range(0, self.nr, line)
            ]
        for r in range(mr):
            a = ctx.fresh(f"a{r}")
            if isinstance(rows, Panels):
                value = _at(rows.buffer, rows.at(p, var(kk), const(r)), self.acc)
            else:
                value = rows(r, var(kk))
            body.append(Decl(a, vdt, init=Cast(vdt, value)))
            for v in range(nv):
                total = accumulate(
                    Var(accs[r][v], vdt), Var(a, vdt), Var(b_names[v], vdt), self.term
                )
                body.append(Assign(accs[r][v], total))
        return self.steps(kk, depth, body)

    def steps(self, kk: str, count: Expr, body: list[Stmt]) -> Stmt:
        """The k loop: `count` steps of `body`, unrolled by `unroll`."""
        kind = "unroll" if self.unroll > 1 else "serial"
        return For(kk, count, seq(body), kind, factor=self.unroll if self.unroll > 1 else 0)

    def spill(self, accs: list[list[str]], buffer: str) -> list[Stmt]:
        """The accumulators stored row by row into `buffer`, `nr` values a row."""
        return [
            Store(buffer, (const(r * self.nr + v * self.lanes),), Var(accs[r][v], self.vdt))
            for r in range(self.mr)
            for v in range(self.nv)
        ]

    def keep(self, accs: list[list[str]], partial: Partial) -> Stmt:
        """The accumulators stored into the partial sums for the next k block."""
        return seq(
            Store(partial.buffer, (self._partial_at(partial, r, v),), Var(accs[r][v], self.vdt))
            for r in range(self.mr)
            for v in range(self.nv)
        )

    def _partial_at(self, partial: Partial, r: int, v: int) -> Expr:
        row = add(mul(partial.tile, const(self.mr)), const(r))
        return add(mul(row, const(self.nr)), const(v * self.lanes))
