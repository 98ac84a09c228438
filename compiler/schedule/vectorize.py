"""Vectorizing an index expression along one axis: the expression at `lanes` consecutive
values of that axis as one vector expression of the loop IR (`compiler.loop`), for schedules
that emit explicit vector code instead of relying on the C compiler's vectorizer."""

from __future__ import annotations

from compiler.ir import (
    COMPARISONS,
    LOGICAL,
    Binary,
    Call,
    Cast,
    Expr,
    Load,
    Unary,
    Var,
    children,
    walk,
)
from compiler.loop import vector


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
