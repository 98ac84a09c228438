"""The plan of a contraction stage: each factor side as one expression in the accumulator
dtype and the spatial axes each side alone reads, grouped (`Group`) into flattened virtual axes.
Target-neutral: the CPU's packed GEMM template and the CUDA contraction kernels both tile
what it describes.

Forms are normalized here, so that every way of writing one computation gets one plan: axes
of extent 1 take no part in the tiling (`unit_axes`, fixed at 0: a `[1, seq, K]` batch axis
is not a batch), and a sum whose terms are rounded before they are summed (a 16-bit sum, or a
16-bit cast around the product) keeps that rounding as `term`, applied to the product of the
two sides. A stage the template cannot compute exactly has no plan; `explain` says why.
"""

from __future__ import annotations

from dataclasses import dataclass

from tunehub.compiler import dtypes
from tunehub.compiler.analysis import Stage
from tunehub.compiler.ir import Binary, Call, Cast, Expr
from tunehub.compiler.loop import const, const_value, lanes, mul, product, vector
from tunehub.compiler.products import keeps_values
from tunehub.compiler.schedule.stage import accumulator_dtype


@dataclass(frozen=True)
class Group:
    """Axes flattened into one virtual axis, row-major (the last axis varies fastest)."""

    axes: tuple[str, ...]
    extents: tuple[Expr, ...]

    @property
    def extent(self) -> Expr:
        return product(self.extents)

    def index(self, flat: Expr) -> dict[str, Expr]:
        """The real index of each axis at virtual index `flat`."""
        out: dict[str, Expr] = {}
        stride: Expr = const(1)
        for n in reversed(range(len(self.axes))):
            quotient = _divide(flat, stride)
            out[self.axes[n]] = quotient if n == 0 else _modulo(quotient, self.extents[n])
            stride = mul(stride, self.extents[n])
        return out


@dataclass(frozen=True)
class Plan:
    """A contraction as the template sees it: each factor side as one expression in the
    accumulator dtype (over the anchor's axis names), the axis groups, the axes of extent 1,
    and the dtype each term (lhs * rhs) rounds to before it is summed, if it does."""

    lhs: Expr
    rhs: Expr
    lhs_axes: tuple[str, ...]  # spatial axes only the lhs reads
    rhs_axes: tuple[str, ...]
    acc: str
    unit_axes: tuple[str, ...] = ()
    term: str | None = None

    def accumulate(self, acc: Expr, a: Expr, b: Expr) -> Expr:
        """`acc + a * b` (scalars or vectors of the accumulator dtype) as the sum computes
        it: one fma, or where each term rounds (a 16-bit sum) the product rounded, then
        added."""
        return accumulate(acc, a, b, self.term)


def accumulate(acc: Expr, a: Expr, b: Expr, term: str | None) -> Expr:
    """`acc + a * b`, the product rounded to `term` first where it is set (`Plan.term`)."""
    if term is None:
        return Call("fma", (a, b, acc), acc.dtype)
    product = Binary("*", a, b, acc.dtype)
    rounded = Cast(acc.dtype, Cast(vector(term, lanes(acc.dtype)), product))
    return Binary("+", acc, rounded, acc.dtype)


def plan(stage: Stage) -> Plan | None:
    """The template's view of `stage`, or None when the template cannot compute it exactly."""
    found = plan_or_reason(stage)
    return found if isinstance(found, Plan) else None


def plan_or_reason(stage: Stage) -> Plan | str:
    """The plan of `stage`, or one line saying why it has none."""
    split = stage.contraction
    if split is None:
        return "not a sum of a product of two sides that each read an axis of their own"
    if stage.anchor.reduce_op != "sum" or not stage.anchor.reduce_axes:
        return f"a {stage.anchor.reduce_op} reduction, not a sum of products"
    acc = accumulator_dtype(stage)
    spine, roundings = _unwrap(stage.anchor.body, acc)
    if dtypes.is_half(stage.anchor.term):
        roundings.append(stage.anchor.term)
    if len(set(roundings)) > 1:
        return f"its terms round twice ({' then '.join(roundings)}) before they are summed"
    if not _exact_product(spine, acc):
        return "its product rounds between its factors (a cast inside the product)"
    lhs_axes = _own_axes(stage, split.lhs_axes - split.rhs_axes)
    rhs_axes = _own_axes(stage, split.rhs_axes - split.lhs_axes)
    unit = tuple(a for a in stage.axes if a not in (*lhs_axes, *rhs_axes) and _unit(stage, a))
    term = roundings[0] if roundings else None
    return Plan(_side(split.lhs, acc), _side(split.rhs, acc), lhs_axes, rhs_axes, acc, unit, term)


def describe(found: Plan, stage: Stage) -> str:
    """A plan in words: which axes are the rows, the columns and k, what is fixed, what rounds."""
    k = ", ".join(r.name for r in stage.anchor.reduce_axes)
    parts = [f"lhs axes {', '.join(found.lhs_axes)}", f"rhs axes {', '.join(found.rhs_axes)}"]
    parts.append(f"k {k}")
    if found.unit_axes:
        parts.append(f"{', '.join(found.unit_axes)} of extent 1 fixed at 0")
    if found.term is not None:
        parts.append(f"each term rounded to {found.term}")
    return "; ".join(parts)


def _own_axes(stage: Stage, axes: frozenset[str]) -> tuple[str, ...]:
    """A side's axes in stage order, those of extent 1 left out unless nothing else is."""
    own = tuple(a for a in stage.axes if a in axes)
    return tuple(a for a in own if not _unit(stage, a)) or own


def _unit(stage: Stage, axis: str) -> bool:
    return stage.shape[stage.axes.index(axis)] == 1


def _unwrap(body: Expr, acc: str) -> tuple[Expr, list[str]]:
    """The product under the casts at the top of a reduce body, and the 16-bit dtypes those
    casts round the whole product to (outermost first)."""
    roundings: list[str] = []
    while isinstance(body, Cast):
        if dtypes.is_half(body.dtype):
            roundings.insert(0, body.dtype)
        elif dtypes.compute_dtype(body.dtype) != acc:
            break
        body = body.x
    return body, roundings


def _exact_product(expr: Expr, acc: str) -> bool:
    """Whether the product spine of a reduce body (the casts and `*` nodes above its factors,
    `products.factors`) computes in `acc` without rounding, so that any grouping of its
    factors is the same sum. A factor's own rounding stays inside its side."""
    if isinstance(expr, Cast) and keeps_values(expr):
        return dtypes.compute_dtype(expr.dtype) == acc and _exact_product(expr.x, acc)
    if isinstance(expr, Binary) and expr.op == "*":
        same = dtypes.compute_dtype(expr.dtype) == acc
        return same and _exact_product(expr.a, acc) and _exact_product(expr.b, acc)
    return True


def _side(factors: tuple[Expr, ...], acc: str) -> Expr:
    value: Expr = Cast(acc, factors[0])
    for factor in factors[1:]:
        value = Binary("*", value, Cast(acc, factor), acc)
    return value


def _divide(a: Expr, b: Expr) -> Expr:
    return a if const_value(b) == 1 else Binary("//", a, b, a.dtype)


def _modulo(a: Expr, b: Expr) -> Expr:
    return Binary("%", a, b, a.dtype)
