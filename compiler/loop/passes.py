"""Transformations of loop-IR trees that schedules apply."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator

from tunehub.compiler.dtypes import compute_dtype
from tunehub.compiler.ir import Binary, Call, Expr, Load, Var, children, transform, walk
from tunehub.compiler.loop.builders import seq
from tunehub.compiler.loop.nodes import Assign, Decl, For, If, Stmt, Store, lanes
from tunehub.compiler.loop.traversal import child_stmts, exprs, map_exprs, stmts


def hoist_loads(loop: For, fresh: Callable[[str], str], buffers: Collection[str]) -> Stmt:
    """`loop` preceded by locals that hold the reads of `buffers` it repeats unchanged: reads
    made on every iteration (not under `If`, `where` or the right of `and`/`or`, which may
    guard an out-of-bounds index) of a buffer the loop does not write, at indices that use no
    variable bound inside it. A compiler would keep such values in registers anyway, but
    gcc's partial redundancy elimination can otherwise reshape a loop past `omp simd`."""
    inner = list(stmts(loop))
    bound = {s.var for s in inner if isinstance(s, For)}
    bound |= {s.name for s in inner if isinstance(s, Decl | Assign)}
    written = {s.buffer for s in inner if isinstance(s, Store)}
    found: dict[Load, str] = {}
    for s in _unguarded(loop):
        for root in exprs(s):
            for ld in _unguarded_loads(root):
                names = {e.name for i in ld.indices for e in walk(i) if isinstance(e, Var)}
                if (
                    ld.tensor in buffers
                    and ld.tensor not in written
                    and lanes(ld.dtype) == 1
                    and not names & bound
                    and ld not in found
                ):
                    found[ld] = fresh(ld.tensor)
    if not found:
        return loop
    decls = [Decl(name, compute_dtype(ld.dtype), init=ld) for ld, name in found.items()]
    hoisted = {ld: Var(name, ld.dtype) for ld, name in found.items()}
    body = map_exprs(
        loop, lambda e: transform(e, lambda n: hoisted.get(n) if isinstance(n, Load) else None)
    )
    return seq(*decls, body)


def _unguarded(stmt: Stmt) -> Iterator[Stmt]:
    """The statements of the tree that run whenever it does (not inside an `If`)."""
    yield stmt
    if not isinstance(stmt, If):
        for child in child_stmts(stmt):
            yield from _unguarded(child)


def _unguarded_loads(expr: Expr) -> Iterator[Load]:
    if isinstance(expr, Load):
        yield expr
    if isinstance(expr, Call) and expr.fn == "where":
        yield from _unguarded_loads(expr.args[0])
        return
    if isinstance(expr, Binary) and expr.op in ("and", "or"):
        yield from _unguarded_loads(expr.a)
        return
    for child in children(expr):
        yield from _unguarded_loads(child)
