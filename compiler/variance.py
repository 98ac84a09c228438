"""Variances in one pass (`analysis.analyze`'s `one_pass`): a sum of squared deviations from
another reduction's value rewritten as sums that need no such value, so that a target merging
a row's sibling sums into one loop (the CPU's fused rows) reads each row once for its mean and
variance instead of twice. The shifted-data algorithm, for its precision (see `one_pass`).
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Sequence
from dataclasses import dataclass, replace

from tunehub.compiler import dtypes
from tunehub.compiler.ir import (
    Binary,
    Call,
    Cast,
    Compute,
    Const,
    Expr,
    Extent,
    Load,
    Var,
    loads,
    substitute,
    walk,
)
from tunehub.compiler.products import keeps_values, product_under_casts


@dataclass(frozen=True)
class _Deviation:
    """A sum's term as `(x - c) ** 2`, scaled (`op` `*` or `/` by `by`) or not."""

    x: Expr
    c: Expr
    dtype: str  # of `x - c`
    op: str | None = None
    by: Expr | None = None


def one_pass(
    computes: list[Compute], names: set[str], sums_for: dict[str, str], means_from: dict[str, str]
) -> list[Compute]:
    """Each sum of squared deviations from a value another reduction gives (a variance:
    `sum((x - mean) ** 2)`, or its terms each divided by n, the mean a row sum) as two sums
    that need no mean, so that all three are computed in one pass over the row: with K the
    term at the first reduce point, `sum((x - c) ** 2) = S2 - d * (2 * S1 - n * d)` where
    `S1 = sum(x - K)`, `S2 = sum((x - K) ** 2)` and `d = c - K` (the shifted-data
    algorithm: no cancellation as long as the mean is within a few deviations of K; Welford's
    recurrence would divide per term). The result becomes an injective compute over the two
    sums (inlined into its readers unless it is an output). Where an earlier sum adds up `x`
    itself (the mean's, perhaps scaled), it becomes `S1 + n * K` (`_mean_made`): one
    accumulation fewer per element. `sums_for` gets each new sum's name, to the compute it
    stands for; `means_from` each such mean's, to its S1."""
    reductions = {c.name for c in computes if c.reduce_op is not None}
    slots = [[c] for c in computes]  # what each compute becomes, in its place
    for at, compute in enumerate(computes):
        found = _deviation(compute, reductions)
        if found is None:
            continue
        x, dtype, acc = found.x, found.dtype, dtypes.compute_dtype(compute.term)
        zero: dict[str, Expr] = {r.name: Const(0, dtypes.INDEX) for r in compute.reduce_axes}
        first = substitute(x, zero)
        shifted = Binary("-", x, first, dtype)
        s1, s2 = _fresh(f"{compute.name}_shifted", names), _fresh(f"{compute.name}_squares", names)
        sums_for.update(dict.fromkeys((s1, s2), compute.name))
        # The sums keep the accumulator's precision (a float16 variance's sums as float32:
        # their difference is what is rounded), each term rounded as the program's own.
        sums = [
            replace(compute, name=name, body=term, dtype=acc, term_dtype=compute.term)
            for name, term in ((s1, shifted), (s2, Binary("*", shifted, shifted, dtype)))
        ]
        row = tuple(Var(a) for a in compute.axes)
        d = Cast(acc, Binary("-", found.c, first, dtype))
        n = Cast(acc, _size([r.extent for r in compute.reduce_axes]))
        twice = Binary("*", Const(2.0, acc), Load(s1, row, acc), acc)
        spread = Binary("*", d, Binary("-", twice, Binary("*", n, d, acc), acc), acc)
        value = Binary("-", Load(s2, row, acc), spread, acc)
        if found.op is not None and found.by is not None:
            value = Binary(found.op, value, Cast(acc, found.by), acc)
        variance = Compute(compute.name, compute.axes, compute.shape, compute.dtype, value)
        total = Binary("+", Load(s1, row, acc), Binary("*", n, Cast(acc, first), acc), acc)
        made = _mean_made(computes[:at], compute, found, total)
        if made is None or len(slots[made[0]]) != 1:  # none, or already made of another S1
            slots[at] = [*sums, variance]
            continue
        mean, mean_value = made
        source = computes[mean]
        rebuilt = Compute(source.name, compute.axes, compute.shape, source.dtype, mean_value)
        slots[mean] = [*sums, rebuilt]
        means_from[source.name] = s1
        slots[at] = [variance]
    return [c for slot in slots for c in slot]


def _mean_made(
    earlier: Sequence[Compute], variance: Compute, found: _Deviation, total: Expr
) -> tuple[int, Expr] | None:
    """The first of `earlier` that sums the variance's `x` over the same row and reduce
    axes (its terms perhaps times or over a value free of the reduce axes), with its value
    from `total`, the sum of `x` as `S1 + n * K`: where that keeps its precision (float
    terms that no 16-bit rounding stands between, in the same accumulator). Else None."""
    acc, reduce = dtypes.compute_dtype(variance.term), {r.name for r in variance.reduce_axes}
    x = _uncast(found.x)
    extents = [r.extent for r in variance.reduce_axes]
    for at, mean in enumerate(earlier):
        kept = (mean.term, variance.term, found.dtype)
        if mean.reduce_op != "sum" or any(
            not dtypes.is_float(t) or dtypes.is_half(t) for t in kept
        ):
            continue
        if dtypes.compute_dtype(mean.term) != acc or mean.shape != variance.shape:
            continue
        if [r.extent for r in mean.reduce_axes] != extents:
            continue
        body = _uncast(_renamed(mean, variance))
        if body == x:
            return at, total
        if isinstance(body, Binary) and body.op in ("*", "/"):
            for term, by in ((body.a, body.b), (body.b, body.a))[: 2 if body.op == "*" else 1]:
                if _uncast(term) == x and not _uses_any(by, reduce):
                    return at, Binary(body.op, total, Cast(acc, by), acc)
    return None


def _renamed(mean: Compute, variance: Compute) -> Expr:
    """`mean`'s body over the variance's axes and reduce axes (position by position)."""
    names = [*mean.axes, *(r.name for r in mean.reduce_axes)]
    to = [*variance.axes, *(r.name for r in variance.reduce_axes)]
    return substitute(mean.body, {a: Var(b) for a, b in zip(names, to, strict=True)})


def _deviation(compute: Compute, reductions: set[str]) -> _Deviation | None:
    """`compute`'s term as a `_Deviation` where it is a float sum of `(x - c) ** 2` (a
    difference times itself, or squared by `pow`; casts that keep values aside), perhaps
    times or over a value free of the reduce axes, with `x` depending on the reduce axes, `c`
    not, and `c` reading another reduction: else None."""
    if compute.reduce_op != "sum" or not dtypes.is_float(compute.term):
        return None
    reduce = {r.name for r in compute.reduce_axes}
    body = product_under_casts(compute.body)
    square, op, by = _square(body), None, None
    if square is None and isinstance(body, Binary) and body.op in ("*", "/"):
        for term, other in ((body.a, body.b), (body.b, body.a))[: 2 if body.op == "*" else 1]:
            if _square(term) is not None and not _uses_any(other, reduce):
                square, op, by = _square(term), body.op, other
                break
    if square is None:
        return None
    x, c = (square.a, square.b) if _uses_any(square.a, reduce) else (square.b, square.a)
    if _uses_any(c, reduce) or not _uses_any(x, reduce):
        return None
    if not any(ld.tensor in reductions - {compute.name} for ld in loads(c)):
        return None
    return _Deviation(x, c, square.dtype, op, by)


def _square(e: Expr) -> Binary | None:
    """The difference `e` squares (`d * d` or `pow(d, 2)`, under casts that keep values)."""
    e = _uncast(e)
    if isinstance(e, Call) and e.fn == "pow" and _is_two(e.args[1]):
        a = b = e.args[0]
    elif isinstance(e, Binary) and e.op == "*":
        a, b = e.a, e.b
    else:
        return None
    a, b = _uncast(a), _uncast(b)
    return a if a == b and isinstance(a, Binary) and a.op == "-" else None


def _is_two(e: Expr) -> bool:
    return isinstance(e, Const) and e.value == 2


def _uncast(e: Expr) -> Expr:
    """`e` under the casts at its top that keep every value."""
    while isinstance(e, Cast) and keeps_values(e):
        e = e.x
    return e


def _uses_any(e: Expr, axes: set[str]) -> bool:
    return any(isinstance(v, Var) and v.name in axes for v in walk(e))


def _fresh(name: str, taken: set[str]) -> str:
    """`name`, or it with the first free numeric suffix; taken from then on."""
    found = next(f"{name}{n or ''}" for n in itertools.count() if f"{name}{n or ''}" not in taken)
    taken.add(found)
    return found


def _size(extents: Sequence[Extent]) -> Expr:
    """The product of extents (symbols as variables), as an index expression."""
    terms: list[Expr] = [Const(e, dtypes.INDEX) if isinstance(e, int) else Var(e) for e in extents]
    return functools.reduce(lambda a, b: Binary("*", a, b, dtypes.INDEX), terms)
