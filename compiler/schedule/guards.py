"""`where` guards turned into loop ranges.

A padded read (a convolution's `where(x + rx >= 1 and x + rx <= W, data[.., x + rx - 1], 0)`)
tests its bounds at every element. Along a loop whose variable the test compares linearly
(coefficient +-1), the elements where it holds form one interval: the loop splits into the
part before it, the interval and the part after, the test disappears from all three, and the
interval's reads are contiguous copies the C compiler vectorizes. Comparisons that are not
linear in the variable stay in the interval's test, so a split is always exact.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tunehub.compiler.dtypes import INDEX
from tunehub.compiler.ir import Binary, Call, Cast, Const, Expr, Unary, Var, transform, walk
from tunehub.compiler.loop import For, If, Stmt, add, all_of, const, minimum, seq, sub
from tunehub.compiler.schedule.vectorize import depends

# comparison -> (lower bound offset, upper bound offset) of `x` for `x op r` (coefficient 1);
# a bound is exclusive above: x >= r + lower, x < r + upper.
_BOUNDS = {">=": (0, None), ">": (1, None), "<=": (None, 1), "<": (None, 0), "==": (0, 1)}
_MIRROR = {">=": "<=", ">": "<", "<=": ">=", "<": ">", "==": "=="}


@dataclass(frozen=True)
class Split:
    """A guarded expression along one variable: for `lower <= x < upper` it is `inside`
    where `uniform` (the guard's tests free of `x`; None: none) holds, `outside` otherwise;
    `inside` keeps the tests that depend on `x` but not linearly."""

    lower: Expr
    upper: Expr
    uniform: Expr | None
    inside: Expr
    outside: Expr


def linear(expr: Expr, name: str) -> tuple[int, Expr] | None:
    """`expr` as `coefficient * name + rest` with `rest` free of `name`, or None."""
    if not depends(expr, (name,)):
        return 0, expr
    if isinstance(expr, Var):
        return 1, const(0)
    if isinstance(expr, Cast) and expr.dtype == INDEX:
        return linear(expr.x, name)
    if isinstance(expr, Unary) and expr.op == "neg":
        inner = linear(expr.x, name)
        return None if inner is None else (-inner[0], sub(const(0), inner[1]))
    if not isinstance(expr, Binary) or expr.op not in ("+", "-", "*"):
        return None
    a, b = linear(expr.a, name), linear(expr.b, name)
    if a is None or b is None:
        return None
    if expr.op == "+":
        return a[0] + b[0], add(a[1], b[1])
    if expr.op == "-":
        return a[0] - b[0], sub(a[1], b[1])
    scale, other = (expr.b, a) if b[0] == 0 else (expr.a, b)
    if (a[0] and b[0]) or not isinstance(scale, Const) or not isinstance(scale.value, int):
        return None
    return other[0] * scale.value, Binary("*", other[1], scale, INDEX)


def split(expr: Expr, name: str) -> Split | None:
    """The interval of `name` where the one `where` of `expr` that tests `name` holds, or
    None when no such `where` exists, several do, or none of its tests is linear in it."""
    guards = [
        e
        for e in walk(expr)
        if isinstance(e, Call) and e.fn == "where" and depends(e.args[0], (name,))
    ]
    if len(guards) != 1:
        return None
    (guard,) = guards
    lowers: list[Expr] = []
    uppers: list[Expr] = []
    kept: list[Expr] = []
    for test in _conjuncts(guard.args[0]):
        if not _bound(test, name, lowers, uppers):
            kept.append(test)
    if not lowers and not uppers:
        return None
    taken, other = guard.args[1:]
    varying = all_of([t for t in kept if depends(t, (name,))])
    reduced = taken if varying is None else Call("where", (varying, taken, other), guard.dtype)
    return Split(
        lower=_fold("max", lowers),
        upper=_fold("min", uppers),
        uniform=all_of([t for t in kept if not depends(t, (name,))]),
        inside=transform(expr, lambda e: reduced if e == guard else None),
        outside=transform(expr, lambda e: other if e == guard else None),
    )


def split_loop(
    name: str,
    start: Expr,
    stop: Expr,
    value: Expr,
    body: Callable[[Expr], Stmt],
    kind: str = "serial",
    factor: int = 0,
) -> Stmt:
    """`for name in [start, stop): body(value)`, split where `value`'s guard on `name` holds
    (`split`); one loop when it has none. Every part is a loop of `kind` and `factor`."""

    def loop(first: Expr, last: Expr, part: Expr) -> Stmt:
        return For(name, sub(last, first), body(part), kind, first, factor)

    parts = split(value, name)
    if parts is None:
        return loop(start, stop, value)
    # Each part clamped into [start, stop) and after the one before: empty parts run no
    # iteration, whatever the bounds.
    enter = minimum(Call("max", (parts.lower, start), INDEX), stop)
    leave = minimum(Call("max", (parts.upper, enter), INDEX), stop)
    middle = loop(enter, leave, parts.inside)
    if parts.uniform is not None:  # tested once for the whole range, not per element
        middle = If(parts.uniform, middle, loop(enter, leave, parts.outside))
    return seq(loop(start, enter, parts.outside), middle, loop(leave, stop, parts.outside))


def _conjuncts(cond: Expr) -> list[Expr]:
    if isinstance(cond, Binary) and cond.op == "and":
        return _conjuncts(cond.a) + _conjuncts(cond.b)
    return [cond]


def _bound(test: Expr, name: str, lowers: list[Expr], uppers: list[Expr]) -> bool:
    """Append the bound `test` puts on `name` (`name >= lower`, `name < upper`); False when
    it is no comparison linear in `name` with coefficient +-1."""
    if not isinstance(test, Binary) or test.op not in _BOUNDS or not depends(test, (name,)):
        return False
    difference = linear(Binary("-", test.a, test.b, INDEX), name)
    if difference is None or difference[0] not in (1, -1):
        return False
    coefficient, rest = difference
    # coefficient * x + rest op 0  <=>  x op' -rest (op mirrored when the coefficient is -1)
    op, r = (test.op, sub(const(0), rest)) if coefficient == 1 else (_MIRROR[test.op], rest)
    low, high = _BOUNDS[op]
    if low is not None:
        lowers.append(add(r, const(low)))
    if high is not None:
        uppers.append(add(r, const(high)))
    return True


def _fold(fn: str, bounds: list[Expr]) -> Expr:
    """The max (or min) of `bounds`; an absent side is unbounded."""
    if not bounds:
        return const(-(2**62) if fn == "max" else 2**62)
    out = bounds[0]
    for b in bounds[1:]:
        out = Call(fn, (out, b), INDEX)
    return out
