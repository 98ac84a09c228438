"""Vectorizing an index expression along one axis: the expression at `lanes` consecutive
values of that axis as one vector expression of the loop IR (`compiler.loop`), for schedules
that emit explicit vector code instead of relying on the C compiler's vectorizer."""

from __future__ import annotations

from collections.abc import Sequence

from tunehub.compiler.ir import (
    COMPARISONS,
    LOGICAL,
    Binary,
    Call,
    Cast,
    Const,
    Expr,
    Load,
    Unary,
    Var,
    children,
    walk,
)
from tunehub.compiler.loop import vector
from tunehub.compiler.simplify import summands


def depends(expr: Expr, axes: tuple[str, ...]) -> bool:
    """Whether `expr` reads any of the index variables `axes`."""
    return any(isinstance(e, Var) and e.name in axes for e in walk(expr))


def vectorize(expr: Expr, axis: str, lanes: int) -> Expr | None:
    """`expr` at `lanes` consecutive values of index `axis` (from the value `axis` holds) as
    one vector expression, or None where that would take a gather or a per-lane select.

    Reads that do not depend on `axis` stay scalar (the renderer broadcasts them where they
    meet a vector); reads whose last index walks `axis` with stride one become vector loads.
    """
    if not depends(expr, (axis,)):
        return expr
    if isinstance(expr, Load):
        *outer, last = expr.indices
        if any(depends(i, (axis,)) for i in outer) or not _unit_stride(last, axis):
            return None
        return Load(expr.tensor, expr.indices, vector(expr.dtype, lanes))
    if isinstance(expr, Var) or _selects(expr):
        return None
    kids = [vectorize(k, axis, lanes) for k in children(expr)]
    if any(k is None for k in kids):
        return None
    a = kids[0]
    assert a is not None
    if isinstance(expr, Cast):
        return Cast(vector(expr.dtype, lanes), a)
    if isinstance(expr, Unary):
        return Unary(expr.op, a, vector(expr.dtype, lanes))
    if isinstance(expr, Binary):
        b = kids[1]
        assert b is not None
        return Binary(expr.op, a, b, vector(expr.dtype, lanes))
    assert isinstance(expr, Call)
    args = tuple(k for k in kids if k is not None)
    return Call(expr.fn, args, vector(expr.dtype, lanes))


def _selects(expr: Expr) -> bool:
    """Nodes whose vector form would need a lane mask (C has no vector `?:`)."""
    if isinstance(expr, Binary):
        return expr.op in (*COMPARISONS, *LOGICAL)
    if isinstance(expr, Unary):
        return expr.op == "not"
    return isinstance(expr, Call) and expr.fn == "where"


def _unit_stride(expr: Expr, axis: str) -> bool:
    """Whether `expr` is `axis` plus terms that do not depend on it."""
    if isinstance(expr, Var):
        return expr.name == axis
    if isinstance(expr, Binary) and expr.op in ("+", "-"):
        a, b = depends(expr.a, (axis,)), depends(expr.b, (axis,))
        if a and not b:
            return _unit_stride(expr.a, axis)
        return expr.op == "+" and b and not a and _unit_stride(expr.b, axis)
    return False


def vector_of(values: Sequence[Expr]) -> Expr | None:
    """One expression's values at consecutive lanes (`values[l]` at lane l, each simplified)
    as one vector expression, lane by lane: a part equal at every lane stays scalar (the
    renderer broadcasts it where it meets a vector), constants that differ become a vector of
    them, reads whose last index grows by one per lane a vector load. None where the lanes
    differ otherwise (a gather, a per-lane select). For an int4 weight's run of 8 k values
    its word and scale reads are the same at every lane and its shifts a vector constant."""
    first, n = values[0], len(values)
    if all(v == first for v in values):
        return first
    if any(type(v) is not type(first) or v.dtype != first.dtype for v in values):
        return None
    if isinstance(first, Const):
        return Call("vector", tuple(values), vector(first.dtype, n))
    if isinstance(first, Load):
        return _vector_load(first, values)
    if _uniform_where(values):
        return _vector_where(values)
    if isinstance(first, Var) or _selects(first):
        return None
    if any(_shape(v) != _shape(first) for v in values):
        return None
    kids = [vector_of([children(v)[i] for v in values]) for i in range(len(children(first)))]
    if any(k is None for k in kids):
        return None
    parts = tuple(k for k in kids if k is not None)
    dtype = vector(first.dtype, n)
    if isinstance(first, Cast):
        return Cast(dtype, parts[0])
    if isinstance(first, Unary):
        return Unary(first.op, parts[0], dtype)
    if isinstance(first, Binary):
        return Binary(first.op, parts[0], parts[1], dtype)
    assert isinstance(first, Call)
    return Call(first.fn, parts, dtype)


def _uniform_where(values: Sequence[Expr]) -> bool:
    """A `where` whose condition is the same at every lane (a convolution's padding test,
    which the channel a run walks does not change): one scalar test picks whole vectors."""
    first = values[0]
    if not (isinstance(first, Call) and first.fn == "where"):
        return False
    return all(
        isinstance(v, Call) and v.fn == "where" and v.args[0] == first.args[0] for v in values
    )


def _vector_where(values: Sequence[Expr]) -> Expr | None:
    picks = [vector_of([v.args[n] for v in values if isinstance(v, Call)]) for n in (1, 2)]
    if picks[0] is None or picks[1] is None:
        return None
    dtype = vector(values[0].dtype, len(values))
    cond = values[0].args[0] if isinstance(values[0], Call) else None
    assert cond is not None
    return Call("where", (cond, picks[0], picks[1]), dtype)


def _shape(expr: Expr) -> tuple[object, ...]:
    """What two nodes must share to be one lane-wise operation (their op or function)."""
    return (getattr(expr, "op", None), getattr(expr, "fn", None), len(children(expr)))


def _vector_load(first: Load, values: Sequence[Expr]) -> Expr | None:
    loads = [v for v in values if isinstance(v, Load)]
    if any(ld.tensor != first.tensor or ld.indices[:-1] != first.indices[:-1] for ld in loads):
        return None
    terms, start = _terms(first.indices[-1])
    if any(_terms(ld.indices[-1]) != (terms, start + lane) for lane, ld in enumerate(loads)):
        return None
    return Load(first.tensor, first.indices, vector(first.dtype, len(loads)))


def _terms(index: Expr) -> tuple[list[str], int]:
    """An index as its non-constant summands (in a canonical order) and its constant."""
    parts = summands(index)
    constant = sum(int(p.value) for p in parts if isinstance(p, Const))
    return sorted(repr(p) for p in parts if not isinstance(p, Const)), constant
