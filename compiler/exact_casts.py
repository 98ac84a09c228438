"""Casts to a 16-bit float that cannot round: of an integer the format holds exactly.

MLC-LLM's int4 linear unpacks each 4-bit level with `float16((W[..] >> s) & 15)`, and the
renderers round every 16-bit cast (on CPUs without float16 arithmetic, a conversion there and
back). Where the integer's range lies within the format's exact integers (|x| <= 2^11 for
float16, 2^8 for bfloat16) the cast is a plain conversion to float32: the same value, one
round trip fewer per weight.

The ranges come from the expression: constants, the dtype of what is read or cast to (an
8-bit integer), `x & c` for c >= 0, shifts and remainders of non-negative values, sums,
differences, products, minima and maxima of ranged values; float arithmetic on such values
counts where it is exact (conversions, and +, -, * below 2^24).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from tunehub.compiler import dtypes
from tunehub.compiler.ir import Binary, Call, Cast, Const, Expr, transform
from tunehub.compiler.loop import Function, lanes, map_exprs, scalar, vector

EXACT = {"float16": 2**11, "bfloat16": 2**8}  # every integer up to this holds exactly

Range = tuple[int, int]


def drop_exact_roundings(fn: Function) -> Function:
    """`fn` with every 16-bit float cast of an exactly held integer a float32 conversion."""
    return replace(fn, body=map_exprs(fn.body, lambda e: transform(e, _conversion)))


def _conversion(expr: Expr) -> Expr | None:
    """A 16-bit cast of an exactly held integer as its float32 value (bottom-up, so a cast
    of such a cast, an inlined unpack block's store, goes too)."""
    if not isinstance(expr, Cast) or scalar(expr.dtype) not in EXACT:
        return None
    if not _exact_integer(expr.x, EXACT[scalar(expr.dtype)]):
        return None
    width = lanes(expr.dtype)
    wide = vector("float32", width) if width > 1 else "float32"
    return expr.x if expr.x.dtype == wide else Cast(wide, expr.x)


def _exact_integer(expr: Expr, limit: int) -> bool:
    """Whether `expr`'s value is always an integer within +-`limit`."""
    found = _integer_valued(expr)
    return found is not None and -limit <= found[0] and found[1] <= limit


def _integer_valued(expr: Expr) -> Range | None:
    """The range of an integer-valued expression: an integer one, or a float one computed
    exactly from such (conversions; sums, differences and products below 2^24)."""
    if dtypes.is_int(scalar(expr.dtype)):
        return integer_range(expr)
    if isinstance(expr, Cast):
        return _integer_valued(expr.x)
    if isinstance(expr, Const) and not isinstance(expr.value, bool):
        value = float(expr.value)
        return (int(value), int(value)) if value.is_integer() else None
    if isinstance(expr, Binary) and expr.op in ("+", "-", "*"):
        a, b = _integer_valued(expr.a), _integer_valued(expr.b)
        found = None if a is None or b is None else _binary(expr.op, a, b)
        return found if found is not None and max(map(abs, found)) < 2**24 else None
    return None


def integer_range(expr: Expr) -> Range:
    """Bounds of an integer expression's value (its dtype's where nothing narrower is known)."""
    full = _dtype_range(scalar(expr.dtype))
    found = _range(expr)
    if found is None:
        return full
    return max(found[0], full[0]), min(found[1], full[1])


def _range(expr: Expr) -> Range | None:
    if isinstance(expr, Const) and isinstance(expr.value, int):
        return int(expr.value), int(expr.value)
    if isinstance(expr, Cast) and dtypes.is_int(scalar(expr.x.dtype)):
        inner = integer_range(expr.x)
        target = _dtype_range(scalar(expr.dtype))
        return inner if target[0] <= inner[0] and inner[1] <= target[1] else None
    if isinstance(expr, Binary) and dtypes.is_int(scalar(expr.dtype)):
        a, b = integer_range(expr.a), integer_range(expr.b)
        return _binary(expr.op, a, b)
    if isinstance(expr, Call) and expr.fn in ("min", "max") and len(expr.args) == 2:
        a, b = (integer_range(x) for x in expr.args)
        pick = min if expr.fn == "min" else max
        return pick(a[0], b[0]), pick(a[1], b[1])
    return None


def _binary(op: str, a: Range, b: Range) -> Range | None:
    if op == "&":
        masks = [r[1] for r in (a, b) if r[0] >= 0]
        return (0, min(masks)) if masks else None
    if op == ">>" and a[0] >= 0 and b[0] >= 0:
        return 0, a[1] >> b[0]
    if op == "%" and b[0] == b[1] and b[0] > 0:
        return (0, b[0] - 1) if a[0] >= 0 else (1 - b[0], b[0] - 1)
    if op == "+":
        return a[0] + b[0], a[1] + b[1]
    if op == "-":
        return a[0] - b[1], a[1] - b[0]
    if op == "*":
        corners = [x * y for x in a for y in b]
        return min(corners), max(corners)
    return None


def _dtype_range(dtype: str) -> Range:
    if dtype == "bool":
        return 0, 1
    info = np.iinfo(dtypes.to_numpy(dtype))
    return int(info.min), int(info.max)
