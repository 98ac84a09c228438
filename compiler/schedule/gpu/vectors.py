"""Vector loads for GPU schedules: `float4` reads of 4 consecutive elements, where the
alignment is certain, and the scalar lanes computed from them.

CUDA has no arithmetic on vector types, so a vectorized expression (`schedule.vectorize`) is
*scalarized*: its vector loads become `float4`/`int4` locals, and each lane is the scalar
expression over `lane(local, l)`. A `float4` read must be 16-byte aligned: every buffer is
(the launch contract in `compiler.kernel`), so the read's element offset must be a multiple
of 4, which `aligned` proves from the index expressions and constant extents.
"""

from __future__ import annotations

from collections.abc import Callable

from compiler.ir import Binary, Call, Cast, Const, Expr, Load, Unary, Var, children
from compiler.loop import Decl, const_value, lanes, scalar
from compiler.schedule.vectorize import depends, vectorize

VECTOR_ELEMENTS = ("float32", "int32")  # element types of float4 / int4
VEC = 4  # elements per vector load


def aligned(
    expr: Expr, axis: str, width: int, shapes: dict[str, tuple[Expr, ...]] | None
) -> Expr | None:
    """`expr` at `width` consecutive values of `axis` as a vector expression whose vector
    loads are aligned whenever `axis` is a multiple of `width`, or None. `shapes` holds the
    buffers' shapes; without them, rows are assumed to start aligned (a space check that the
    lowering, which has them, repeats)."""
    found = vectorize(expr, axis, width)
    if found is None:
        return None
    for node in _nodes(found):
        if not isinstance(node, Load) or lanes(node.dtype) == 1:
            continue
        if scalar(node.dtype) not in VECTOR_ELEMENTS or not aligned_run(node, axis, width, shapes):
            return None
    return found


def aligned_run(
    load: Load, axis: str, width: int, shapes: dict[str, tuple[Expr, ...]] | None
) -> bool:
    """Whether `load` at `width` consecutive values of `axis` (from a multiple of `width`)
    reads consecutive elements starting at a multiple of `width` of its buffer (`shapes` as
    in `aligned`)."""
    *outer, last = load.indices
    if any(depends(i, (axis,)) for i in outer):
        return False
    shape = shapes[load.tensor] if shapes is not None else ()
    row = const_value(shape[-1]) if shape else None
    if len(shape) > 1 and (row is None or row % width):
        return False  # rows would not start at multiples of `width`
    return _offset_aligned(last, axis, width)


def _offset_aligned(index: Expr, axis: str, width: int) -> bool:
    """Whether `index` is `axis` plus terms that are multiples of `width`."""
    if isinstance(index, Var):
        return index.name == axis
    if isinstance(index, Binary) and index.op == "+":
        if depends(index.a, (axis,)):
            return _offset_aligned(index.a, axis, width) and _multiple(index.b, width)
        return _multiple(index.a, width) and _offset_aligned(index.b, axis, width)
    return False


def _multiple(expr: Expr, width: int) -> bool:
    value = const_value(expr)
    if value is not None:
        return value % width == 0
    if isinstance(expr, Binary) and expr.op == "*":
        return _multiple(expr.a, width) or _multiple(expr.b, width)
    if isinstance(expr, Binary) and expr.op == "+":
        return _multiple(expr.a, width) and _multiple(expr.b, width)
    return False


def _nodes(expr: Expr) -> list[Expr]:
    out = [expr]
    for child in children(expr):
        out += _nodes(child)
    return out


def scalarized(
    found: Expr, width: int, fresh: Callable[[str], str]
) -> tuple[list[Decl], list[Expr]]:
    """The vector expression `found` (of `width` lanes) as locals holding its vector loads,
    and one scalar expression per lane over them."""
    decls: list[Decl] = []
    held: dict[Load, str] = {}

    def hold(load: Load) -> str:
        if load not in held:
            held[load] = fresh("v")
            decls.append(Decl(held[load], load.dtype, init=load))
        return held[load]

    def lane(expr: Expr, n: int) -> Expr:
        width = lanes(expr.dtype)
        if width == 1:
            return expr
        if isinstance(expr, Load):
            return Call(
                "lane", (Var(hold(expr), expr.dtype), Const(n, "int64")), scalar(expr.dtype)
            )
        if isinstance(expr, Cast):
            return Cast(scalar(expr.dtype), lane(expr.x, n))
        if isinstance(expr, Unary):
            return Unary(expr.op, lane(expr.x, n), scalar(expr.dtype))
        if isinstance(expr, Binary):
            return Binary(expr.op, lane(expr.a, n), lane(expr.b, n), scalar(expr.dtype))
        assert isinstance(expr, Call)
        return Call(expr.fn, tuple(lane(a, n) for a in expr.args), scalar(expr.dtype))

    values = [lane(found, n) for n in range(width)]
    return decls, values
