"""The row cache of a fused row group: the block copies its row of each input the group reads
more than once into shared memory, once, in 16-byte loads, and every member stage then reads
the row there.

Without it a softmax block reads its row three times from global memory (the max, the sum,
the normalized store), twice of them hoping the row is still in L1; with it, once, as a
stream of vector loads all in flight together (what torch's softmax does for rows that fit).
A row is cached where its input is a tensor of the signature indexed by the group's row axes
and one more axis of constant length, read by two or more of the group's stages (the
`g<n>.cache` knob, valid where `cached_rows` finds one).
"""

from __future__ import annotations

from dataclasses import dataclass

from tunehub.compiler import dtypes
from tunehub.compiler.analysis import Analysis, RowGroup
from tunehub.compiler.ir import Expr, Load, Var, transform
from tunehub.compiler.loop import (
    THREAD_KINDS,
    Decl,
    For,
    Stmt,
    Store,
    add,
    as_expr,
    ceildiv,
    const,
    const_value,
    lanes,
    map_exprs,
    mul,
    seq,
    stmts,
    var,
)
from tunehub.compiler.schedule.stage import Context, nest
from tunehub.targets.gpu.schedule.blocks import bind, guard, less
from tunehub.targets.gpu.schedule.vectors import chunked

CHUNK_BYTES = 16  # one vector load per thread and step of the copy


@dataclass(frozen=True)
class CachedRow:
    """An input whose row the block holds in shared array `name` of `length` elements."""

    tensor: str
    dtype: str
    length: int

    @property
    def bytes(self) -> int:
        return self.length * dtypes.itemsize(self.dtype)


def cached_rows(analysis: Analysis, group: RowGroup) -> list[CachedRow]:
    """The inputs whose rows the group's stages read more than once (see the module doc)."""
    inputs = {t.name: t for t in analysis.program.inputs}
    readers: dict[str, set[int]] = {}
    for n in group.stages:
        stage = analysis.stages[n]
        rows = tuple(Var(a, dtypes.INDEX) for a in stage.axes[: group.rows])
        for load in stage.reads():
            tensor = inputs.get(load.tensor)
            if tensor is None or len(tensor.shape) != group.rows + 1:
                continue
            if load.indices[: group.rows] == rows and isinstance(tensor.shape[-1], int):
                readers.setdefault(load.tensor, set()).add(n)
    return [
        CachedRow(name, inputs[name].dtype, int(inputs[name].shape[-1]))
        for name, stages in readers.items()
        if len(stages) > 1
    ]


def with_cached_rows(
    ctx: Context, rows: list[CachedRow], row: tuple[Expr, ...], bodies: list[Stmt]
) -> list[Stmt]:
    """`bodies` (the members of a fused group at row index `row`) reading `rows` from shared
    memory, after a first body that copies them there."""
    threads = max((_threads_x(s) for b in bodies for s in stmts(b)), default=1)
    names = {r.tensor: ctx.fresh(f"{r.tensor}_row") for r in rows}
    shapes = {t.name: tuple(as_expr(e) for e in t.shape) for t in ctx.analysis.program.inputs}

    def cached(node: Expr) -> Expr | None:
        if isinstance(node, Load) and node.tensor in names and node.indices[: len(row)] == row:
            return Load(names[node.tensor], node.indices[len(row) :], node.dtype)
        return None

    copies = [_copy(ctx, r, names[r.tensor], row, threads, shapes) for r in rows]
    return [seq(*copies), *(map_exprs(b, lambda x: transform(x, cached)) for b in bodies)]


def _threads_x(stmt: Stmt) -> int:
    """The threads along x a statement binds (1: none); the block has the most of them."""
    if isinstance(stmt, For) and stmt.kind == THREAD_KINDS[0]:
        return const_value(stmt.extent) or 1
    return 1


def _copy(
    ctx: Context,
    row: CachedRow,
    name: str,
    at: tuple[Expr, ...],
    threads: int,
    shapes: dict[str, tuple[Expr, ...]],
) -> Stmt:
    """The block's threads copy the row into shared array `name`: thread `t` takes elements
    `(u * threads + t) * width + v`, `v < width`, a chunk of 16 bytes where the row is
    whole chunks (each chunk one vector load), else one element."""
    width = CHUNK_BYTES // dtypes.itemsize(row.dtype)
    width = width if row.length % width == 0 else 1
    chunks = row.length // width
    tx = bind(ctx, "tx", threads, THREAD_KINDS[0])
    u = ctx.fresh("u")
    first = mul(add(mul(var(u), const(threads)), var(tx.var)), const(width))
    elements = [add(first, const(v)) for v in range(width)]
    values: list[Expr] = [Load(row.tensor, (*at, e), row.dtype) for e in elements]
    loads, values = chunked(values, shapes, {u, tx.var}, ctx.fresh)
    stores = [Store(name, (e,), value) for e, value in zip(elements, values, strict=True)]
    if len(loads) == 1 and lanes(loads[0].dtype) == width:  # one 16-byte store: no conflicts
        stores = [Store(name, (first,), Var(loads[0].name, loads[0].dtype))]
    whole = chunks % threads == 0
    body = guard(None if whole else less(first, const(row.length)), seq(*loads, *stores))
    loop = For(u, ceildiv(const(chunks), threads), body, "unroll")
    return seq(Decl(name, row.dtype, (row.length,), shared=True), nest([tx], loop))
