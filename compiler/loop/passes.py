"""Transformations of loop-IR trees that schedules apply."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass

from tunehub.compiler.dtypes import compute_dtype
from tunehub.compiler.ir import Binary, Call, Expr, Load, Unary, Var, children, transform, walk
from tunehub.compiler.loop.builders import all_of, const_value, seq
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


@dataclass(frozen=True)
class SplitReads:
    """A loop's reads of memory taken out of it (`split_reads`): iteration `n` of `reads`
    stores read i into element `n` of a local array, and `rest` is the loop reading it there.
    Who issues the reads early and where the arrays live is the caller's business."""

    reads: tuple[Expr, ...]  # each a load, or a guarded expression that holds loads
    guards: tuple[Expr | None, ...]  # when a read is made: when any of its uses is (None: always)
    rest: For  # the loop with read i replaced by element `n` of array `names[i]`
    names: tuple[str, ...]

    def decls(self, names: tuple[str, ...]) -> list[Stmt]:
        """Local arrays `names` (one per read), an element per iteration."""
        extent = const_value(self.rest.extent)
        assert extent is not None
        return [
            Decl(name, compute_dtype(read.dtype), (extent,))
            for name, read in zip(names, self.reads, strict=True)
        ]

    def into(self, names: tuple[str, ...]) -> For:
        """The loop that makes the reads into arrays `names`, each under its guard."""
        n = Var(self.rest.var)
        body = seq(
            Store(name, (n,), read) if cond is None else If(cond, Store(name, (n,), read))
            for name, read, cond in zip(names, self.reads, self.guards, strict=True)
        )
        return For(self.rest.var, self.rest.extent, body, self.rest.kind, factor=self.rest.factor)

    def moved(self, source: tuple[str, ...]) -> For:
        """The loop that copies arrays `source` into `names`."""
        n = Var(self.rest.var)
        body = seq(
            Store(name, (n,), Load(other, (n,), read.dtype))
            for name, other, read in zip(self.names, source, self.reads, strict=True)
        )
        return For(self.rest.var, self.rest.extent, body, self.rest.kind, factor=self.rest.factor)


def split_reads(
    loop: For,
    fresh: Callable[[str], str],
    same: Callable[[Expr], Expr] = lambda e: e,
    only: Collection[str] | None = None,
) -> SplitReads | None:
    """`loop`'s reads of memory split from the work on their values, so that a caller can
    issue them a step ahead (a producer warpgroup loads the next slice's int4 words while it
    dequantizes this one's). A read is a load (of a buffer in `only`, if given), or a
    `where`/`and`/`or` holding such loads (whose condition may guard an out-of-bounds index:
    it is made whole, as written); reads with the same `same` form (the caller's
    simplification: the 8 values of an int4 word index it 8 ways before `compiler.simplify`)
    are one. Each is made under the conditions of the `If`s around its uses. None where the
    loop's extent is not constant, or a read uses a variable bound inside the loop: its
    element per iteration would not hold it."""
    if const_value(loop.extent) is None:
        return None
    inner = list(stmts(loop.body))
    bound = {s.var for s in inner if isinstance(s, For)}
    bound |= {s.name for s in inner if isinstance(s, Decl | Assign)}
    found: dict[Expr, list[Expr | None]] = {}
    _collect_reads(loop.body, [], found, only)
    forms = {read: same(read) for read in found}
    uses: dict[Expr, list[Expr | None]] = {}
    for read, conds in found.items():
        if {e.name for e in walk(read) if isinstance(e, Var)} & bound:
            return None
        uses.setdefault(forms[read], []).extend(conds)
    if not uses:
        return None
    names = {form: fresh("held") for form in uses}
    n = Var(loop.var)
    replaced = {read: Load(names[form], (n,), read.dtype) for read, form in forms.items()}
    rest = map_exprs(loop, lambda e: transform(e, lambda node: replaced.get(node)))
    assert isinstance(rest, For)
    guards = tuple(_any_of(conds) for conds in uses.values())
    return SplitReads(tuple(uses), guards, rest, tuple(names.values()))


def _collect_reads(
    stmt: Stmt,
    conds: list[Expr],
    found: dict[Expr, list[Expr | None]],
    only: Collection[str] | None,
) -> None:
    """Every read of `stmt`'s tree (see `split_reads`) with the conjunction of the `If`
    conditions around each use."""
    when = all_of(conds)
    for root in exprs(stmt):
        for read in _reads(root, only):
            found.setdefault(read, []).append(when)
    if isinstance(stmt, If):
        _collect_reads(stmt.then, [*conds, stmt.cond], found, only)
        if stmt.orelse is not None:
            _collect_reads(stmt.orelse, [*conds, Unary("not", stmt.cond, "bool")], found, only)
        return
    for child in child_stmts(stmt):
        _collect_reads(child, conds, found, only)


def _reads(expr: Expr, only: Collection[str] | None) -> Iterator[Expr]:
    def wanted(node: Expr) -> bool:
        return isinstance(node, Load) and (only is None or node.tensor in only)

    if wanted(expr):
        yield expr
        return
    guarded = (isinstance(expr, Call) and expr.fn == "where") or (
        isinstance(expr, Binary) and expr.op in ("and", "or")
    )
    if guarded and any(wanted(e) for e in walk(expr)):
        yield expr
        return
    for child in children(expr):
        yield from _reads(child, only)


def _any_of(conds: list[Expr | None]) -> Expr | None:
    """The disjunction of `conds` (None, always true, where any of them is)."""
    if any(cond is None for cond in conds):
        return None
    unique = list(dict.fromkeys(cond for cond in conds if cond is not None))
    result = unique[0]
    for cond in unique[1:]:
        result = Binary("or", result, cond, "bool")
    return result
