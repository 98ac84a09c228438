"""The product a sum reduces: its factors, and its split into the two sides of a contraction.

A sum whose body, under casts, is a product of factors that split into two sides reading
disjoint tensors, each depending on a spatial axis the other lacks (matmul, batched matmul,
conv2d, dequantized matmul), is a contraction (`analysis.classify`); its plan evaluates each
side on its own (`schedule.plan`). Casts that keep every value are looked through, those that
round are not: a factor is what the program computes, roundings included.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from tunehub.compiler import dtypes
from tunehub.compiler.ir import Binary, Cast, Compute, Expr, Var, loads, walk

_MAX_FACTORS = 8


@dataclass(frozen=True)
class ProductSides:
    """The two sides of a contraction's product: `lhs` and `rhs` are lists of factors (each
    as written, casts included) and `lhs_axes`/`rhs_axes` the spatial axes each side reads."""

    lhs: tuple[Expr, ...]
    rhs: tuple[Expr, ...]
    lhs_axes: frozenset[str]
    rhs_axes: frozenset[str]


def factors(expr: Expr) -> list[Expr]:
    """The multiplicative factors of `expr`: nested products split apart through casts that
    keep every value (widening ones); a cast that rounds (to a 16-bit float, or to a
    narrower type) keeps what it rounds as one factor, as the program computes it."""
    inner = expr
    while isinstance(inner, Cast) and keeps_values(inner):
        inner = inner.x
    if isinstance(inner, Binary) and inner.op == "*":
        return factors(inner.a) + factors(inner.b)
    return [expr]


def keeps_values(cast: Cast) -> bool:
    """Whether a cast leaves every value as it was: same compute dtype, not a 16-bit one."""
    same = dtypes.compute_dtype(cast.dtype) == dtypes.compute_dtype(cast.x.dtype)
    return same and not dtypes.is_half(cast.dtype)


def product_under_casts(expr: Expr) -> Expr:
    """A reduce body under the casts at its top, which apply to the whole product (each
    term's rounding, for a plan to keep) and so never split it."""
    while isinstance(expr, Cast):
        expr = expr.x
    return expr


def split_product(compute: Compute) -> ProductSides | None:
    """Split a reduce body into two sides that read disjoint tensors and each depend on a
    spatial axis the other does not, or None if there is no such split."""
    parts = factors(product_under_casts(compute.body))
    if not 2 <= len(parts) <= _MAX_FACTORS:
        return None
    spatial = set(compute.axes)
    tensors = [{ld.tensor for ld in loads(p)} for p in parts]
    axes = [{e.name for e in walk(p) if isinstance(e, Var)} & spatial for p in parts]
    for size in range(1, len(parts)):
        for left in itertools.combinations(range(len(parts)), size):
            if 0 not in left:
                continue  # each split once: the side holding the first factor is `lhs`
            right = [n for n in range(len(parts)) if n not in left]
            lt = set().union(*(tensors[n] for n in left))
            rt = set().union(*(tensors[n] for n in right))
            la = set().union(*(axes[n] for n in left))
            ra = set().union(*(axes[n] for n in right))
            if lt and rt and not lt & rt and la - ra and ra - la:
                return ProductSides(
                    tuple(parts[n] for n in left),
                    tuple(parts[n] for n in right),
                    frozenset(la),
                    frozenset(ra),
                )
    return None
