"""Integer index expressions evaluated as C evaluates them, for tests of index rewrites."""

from __future__ import annotations

from fractions import Fraction

from tunehub.compiler import dtypes
from tunehub.compiler.ir import Binary, Call, Cast, Const, Expr, Unary, Var


def _wrap(value: int, dtype: str) -> int:
    if dtype == "bool":
        return int(bool(value))
    bits = dtypes.BITS[dtype]
    value &= (1 << bits) - 1
    return value - (1 << bits) if dtypes.is_signed(dtype) and value >> (bits - 1) else value


def c_value(expr: Expr, env: dict[str, int]) -> int:
    """The value C computes for an integer index expression (truncating division, wrapping
    casts, comparisons and logic as 0/1)."""
    if isinstance(expr, Const):
        return int(expr.value)
    if isinstance(expr, Var):
        return env[expr.name]
    if isinstance(expr, Cast):
        return _wrap(c_value(expr.x, env), expr.dtype)
    if isinstance(expr, Unary):
        x = c_value(expr.x, env)
        return _wrap(-x if expr.op == "neg" else ~x, expr.dtype)
    if isinstance(expr, Call):
        args = [c_value(a, env) for a in expr.args]
        if expr.fn == "where":
            return args[1] if args[0] else args[2]
        fn = {"abs": lambda x: abs(x), "min": min, "max": max}[expr.fn]
        return _wrap(fn(*args), expr.dtype)
    assert isinstance(expr, Binary)
    a, b = c_value(expr.a, env), c_value(expr.b, env)
    ops = {
        "+": lambda: a + b,
        "-": lambda: a - b,
        "*": lambda: a * b,
        "//": lambda: int(Fraction(a, b)),
        "%": lambda: a - b * int(Fraction(a, b)),
        "&": lambda: a & b,
        "|": lambda: a | b,
        "^": lambda: a ^ b,
        "<<": lambda: a << b,
        ">>": lambda: a >> b,
        "<": lambda: a < b,
        "<=": lambda: a <= b,
        ">": lambda: a > b,
        ">=": lambda: a >= b,
        "==": lambda: a == b,
        "!=": lambda: a != b,
        "and": lambda: bool(a) and bool(b),
        "or": lambda: bool(a) or bool(b),
    }
    return _wrap(ops[expr.op](), expr.dtype)
