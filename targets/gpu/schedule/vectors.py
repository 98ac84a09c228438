"""Vector loads for GPU schedules: `float4` reads of 4 consecutive elements, where the
alignment is certain, and the scalar lanes computed from them.

A GPU dialect (CUDA, HIP) has no arithmetic on vector types, so a vectorized expression
(`schedule.vectorize`) is *scalarized*: its vector loads become `float4`/`int4` locals, and
each lane is the scalar expression over `lane(local, l)`. A `float4` read must be 16-byte
aligned: every buffer is (the launch contract in `compiler.kernel`), so the read's element
offset must be a multiple of 4, which `aligned` proves from the index expressions and
constant extents.

Scalar code that reads runs of neighbouring elements (a GEMV lane's run of k) is *chunked*
instead: its loads of one row that differ only by a constant offset become aligned 4-, 8- or
16-byte vector loads into locals, each read replaced by its lane. This covers what a vector
expression cannot: 16-bit elements (8 per 16 bytes) and packed words read by `k // 8`.
"""

from __future__ import annotations

from collections.abc import Callable

from tunehub.compiler import dtypes
from tunehub.compiler.dtypes import INDEX
from tunehub.compiler.ir import (
    Binary,
    Call,
    Cast,
    Const,
    Expr,
    Load,
    Unary,
    Var,
    children,
    transform,
)
from tunehub.compiler.loop import Decl, add, const, const_value, lanes, scalar, vector
from tunehub.compiler.schedule.vectorize import depends, vectorize
from tunehub.compiler.simplify import added, simplified, summands

VECTOR_ELEMENTS = ("float32", "int32")  # element types of float4 / int4
VEC = 4  # elements per vector load
CHUNK_ELEMENTS = ("float16", "bfloat16", "float32", "int32", "uint32")  # what `chunked` groups
CHUNK_BYTES = (16, 8, 4)


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
    return _rows_aligned(shape, width) and _offset_aligned(last, axis, width)


def _rows_aligned(shape: tuple[Expr, ...], width: int) -> bool:
    """Whether every row of a buffer of `shape` starts at a multiple of `width` elements."""
    row = const_value(shape[-1]) if shape else None
    return len(shape) < 2 or (row is not None and row % width == 0)


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


def chunked(
    values: list[Expr],
    shapes: dict[str, tuple[Expr, ...]],
    known: set[str],
    fresh: Callable[[str], str],
) -> tuple[list[Decl], list[Expr]]:
    """`values` with their reads of neighbouring elements taken as aligned vector loads:
    the locals that hold the loads, and the values reading lanes of them (see the module doc).

    Reads group by buffer, outer indices and the last index less its constant term (indices
    simplified with the names in `known` non-negative). A group of two or more elements gets
    chunks of the widest of 16, 8 and 4 bytes that its span fills and its start provably
    aligns to; a chunk holds at least one element the values read, and rows are whole chunks,
    so a chunk is in bounds wherever that element is. The caller guarantees that every read
    `values` always makes is in bounds; a read under a guard is left alone (unless the same
    read is also made unguarded).
    """
    groups: dict[tuple[str, tuple[Expr, ...], Expr], dict[Load, int]] = {}
    for value in values:
        for node in eager_loads(value):
            if node.tensor not in shapes:
                continue
            if lanes(node.dtype) > 1 or node.dtype not in CHUNK_ELEMENTS:
                continue
            *outer, last = [simplified(i, known) for i in node.indices]
            terms = summands(last)
            offset = sum(int(t.value) for t in terms if isinstance(t, Const))
            base = added([t for t in terms if not isinstance(t, Const)] or [const(0)], INDEX)
            groups.setdefault((node.tensor, tuple(outer), base), {})[node] = offset
    decls: list[Decl] = []
    lanes_of: dict[Load, Expr] = {}
    for (tensor, rows, base), members in groups.items():
        dtype = next(iter(members)).dtype
        width = _chunk_width(set(members.values()), base, shapes[tensor], dtype)
        if width is None:
            continue
        held: dict[int, Var] = {}
        for load, offset in members.items():
            chunk = offset // width
            if chunk not in held:
                wide = vector(dtype, width)
                at = Load(tensor, (*rows, add(base, const(chunk * width))), wide)
                held[chunk] = Var(fresh("w"), wide)
                decls.append(Decl(held[chunk].name, wide, init=at))
            lane = Const(offset - chunk * width, INDEX)
            lanes_of[load] = Call("lane", (held[chunk], lane), dtype)
    replaced = [
        transform(v, lambda node: lanes_of.get(node) if isinstance(node, Load) else None)
        for v in values
    ]
    return decls, replaced


def eager_loads(expr: Expr) -> list[Load]:
    """The reads `expr` always makes: not those in a branch of `where` or right of `and` and
    `or`, which run only when taken (a guarded read may be out of bounds when it is not)."""
    if isinstance(expr, Call) and expr.fn == "where":
        return eager_loads(expr.args[0])
    if isinstance(expr, Binary) and expr.op in ("and", "or"):
        return eager_loads(expr.a)
    found = [expr] if isinstance(expr, Load) else []
    return found + [load for child in children(expr) for load in eager_loads(child)]


def _chunk_width(offsets: set[int], base: Expr, shape: tuple[Expr, ...], dtype: str) -> int | None:
    """Elements per chunk of a group of reads (`chunked`), or None to leave them scalar."""
    if len(offsets) < 2:
        return None
    span = max(offsets) - min(offsets) + 1
    for size in CHUNK_BYTES:
        width = size // dtypes.itemsize(dtype)
        if 2 <= width < 2 * span and _multiple(base, width) and _rows_aligned(shape, width):
            return width
    return None
