"""Constructors of the loop IR: index arithmetic that folds constants, sequences, and fresh
names for loop variables and locals."""

from __future__ import annotations

import re
from collections.abc import Iterable

from tunehub.compiler.dtypes import INDEX
from tunehub.compiler.ir import Binary, Call, Const, Expr, Extent, Var
from tunehub.compiler.loop.nodes import For, Seq, Stmt

# ----------------------------------------------------------------------------- index arithmetic
# Smart constructors that fold constants, so schedules can build `jo * 16 + ji` without
# littering the output with `* 1` and `+ 0`.


def const(value: int) -> Const:
    return Const(value, INDEX)


def var(name: str) -> Var:
    return Var(name, INDEX)


def as_expr(extent: Extent | Expr) -> Expr:
    """An extent (literal or symbol name) or expression as an index expression."""
    if isinstance(extent, int):
        return const(extent)
    if isinstance(extent, str):
        return var(extent)
    return extent


def const_value(expr: Expr) -> int | None:
    return expr.value if isinstance(expr, Const) and isinstance(expr.value, int) else None


def add(a: Expr, b: Expr) -> Expr:
    ca, cb = const_value(a), const_value(b)
    if ca is not None and cb is not None:
        return const(ca + cb)
    if ca == 0:
        return b
    if cb == 0:
        return a
    return Binary("+", a, b, INDEX)


def sub(a: Expr, b: Expr) -> Expr:
    ca, cb = const_value(a), const_value(b)
    if ca is not None and cb is not None:
        return const(ca - cb)
    if cb == 0:
        return a
    if a == b:
        return const(0)
    return Binary("-", a, b, INDEX)


def mul(a: Expr, b: Expr) -> Expr:
    ca, cb = const_value(a), const_value(b)
    if ca is not None and cb is not None:
        return const(ca * cb)
    if ca == 0 or cb == 0:
        return const(0)
    if ca == 1:
        return b
    if cb == 1:
        return a
    return Binary("*", a, b, INDEX)


def end(loop: For) -> Expr:
    """The exclusive upper bound of a loop."""
    return add(loop.start, loop.extent)


def ceildiv(a: Expr, b: int) -> Expr:
    """`ceil(a / b)` for non-negative `a` and positive constant `b`."""
    ca = const_value(a)
    if ca is not None:
        return const(-(-ca // b))
    if b == 1:
        return a
    return Binary("//", add(a, const(b - 1)), const(b), INDEX)


def minimum(a: Expr, b: Expr) -> Expr:
    ca, cb = const_value(a), const_value(b)
    if ca is not None and cb is not None:
        return const(min(ca, cb))
    if a == b:
        return a
    return Call("min", (a, b), INDEX)


def product(extents: Iterable[Expr]) -> Expr:
    total: Expr = const(1)
    for extent in extents:
        total = mul(total, extent)
    return total


def all_of(conds: list[Expr]) -> Expr | None:
    """The conjunction of `conds` (None when there are none: always true)."""
    if not conds:
        return None
    result = conds[0]
    for cond in conds[1:]:
        result = Binary("and", result, cond, "bool")
    return result


def flat_index(indices: tuple[Expr, ...], shape: tuple[Expr, ...]) -> Expr:
    """Row-major element offset of `indices` in a buffer of `shape`.

    Adjacent axes indexed by one flat value split the way a flattened group of axes splits
    it (`x // (m * n)` then `(x // m) % n`, or `x // n` then `x % n`) are one axis indexed by
    `x // m` (or `x`): C's truncating division makes `(t / n) * n + t % n == t` for every
    `t`, so a packed convolution weight `W[f, k / 9, k / 3 % 3, k % 3]` is read at
    `f * 576 + k`, not through three divisions per element."""
    merged_indices, merged_shape = list(indices), list(shape)
    i = 0
    while i + 1 < len(merged_indices):
        joined = _joined(merged_indices[i], merged_indices[i + 1], merged_shape[i + 1])
        if joined is None:
            i += 1
            continue
        merged_indices[i : i + 2] = [joined]
        merged_shape[i : i + 2] = [mul(merged_shape[i], merged_shape[i + 1])]
    if len(merged_indices) == 1:
        return merged_indices[0]
    offset: Expr = const(0)
    for index, extent in zip(merged_indices, merged_shape, strict=True):
        offset = add(mul(offset, extent), index)
    return offset


def _joined(outer: Expr, inner: Expr, extent: Expr) -> Expr | None:
    """`t` where `outer` is `t // extent` and `inner` is `t % extent` (`t` itself possibly
    `x // m`, `outer` then written `x // (m * extent)`), else None."""
    if not (isinstance(inner, Binary) and inner.op == "%" and inner.b == extent):
        return None
    if not (isinstance(outer, Binary) and outer.op == "//"):
        return None
    t = inner.a
    if outer.a == t and outer.b == extent:
        return t
    m = const_value(t.b) if isinstance(t, Binary) and t.op == "//" else None
    n = const_value(extent)
    if m is None or n is None or not isinstance(t, Binary) or outer.a != t.a:
        return None
    return t if const_value(outer.b) == m * n else None


# ----------------------------------------------------------------------------- sequences


def seq(*items: Stmt | Iterable[Stmt]) -> Stmt:
    """A `Seq` of the statements given (flattening nested sequences and lists)."""
    out: list[Stmt] = []
    for item in items:
        for stmt in [item] if isinstance(item, Stmt) else item:
            out.extend(stmt.body if isinstance(stmt, Seq) else (stmt,))
    return out[0] if len(out) == 1 else Seq(tuple(out))


# ----------------------------------------------------------------------------- names


# Words a generated name must not be: C, C++ and CUDA keywords a lowering might pick.
_KEYWORDS_TEXT = """auto bool break case char const continue default do double else enum extern
float for goto if inline int long register restrict return short signed sizeof static struct
switch typedef union unsigned void volatile while class new delete this template namespace
dim3 threadIdx blockIdx blockDim gridDim warpSize float2 float3 float4 int2 int3 int4 uint2
uint4 half"""
_KEYWORDS = frozenset(_KEYWORDS_TEXT.split())


class Namer:
    """Fresh identifiers for loop variables and locals, distinct from `reserved` (the
    signature's names) and from each other. Generated names are letters and digits only (no
    `_`): the renderer mangles signature names and its own names with `_`, so no generated
    name can meet them."""

    def __init__(self, reserved: Iterable[str] = ()) -> None:
        self._taken = set(reserved) | _KEYWORDS

    def __call__(self, base: str) -> str:
        base = re.sub(r"[^A-Za-z0-9]", "", base)
        base = base if base[:1].isalpha() else f"v{base}"
        name, n = base, 0
        while name in self._taken:
            n += 1
            name = f"{base}{n}"
        self._taken.add(name)
        return name
