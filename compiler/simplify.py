"""Integer division and remainder split over sums, where every term is provably non-negative.

Substituting a tiled axis into a signature's expression leaves indices such as
`W[n, ((r * 32 + lane) * 32 + 3) // 8]` (the int4 dequantize at `k = (r * 32 + lane) * 32 + 3`).
C cannot fold these: its division truncates and it does not know the operands' signs. So
each unrolled copy reads the same word through a different expression, nvcc loads it once per
copy (8 loads of each weight word, 32 of each scale in a GEMV) and shifts by amounts computed
at run time. Here

    (c * q + r) // c  ->  q + r // c        (c * q + r) % c  ->  r % c

for a positive constant `c` whenever `q` and `r` are provably non-negative, where truncating
and floor division agree: the index above becomes `(r * 32 + lane) * 4`, the same for all 8
copies, and the shift `4 * (k % 8)` a constant.

Provably non-negative: integer constants >= 0, symbols, loop variables whose loop starts at a
non-negative value, locals initialized to a non-negative value and never assigned, and sums,
products, quotients, remainders, minima and maxima of those.
"""

from __future__ import annotations

from dataclasses import replace

from compiler import dtypes
from compiler.ir import Binary, Call, Const, Expr, Var, transform
from compiler.loop import Assign, Decl, For, Function, map_exprs, stmts


def simplify(fn: Function) -> Function:
    """`fn` with its integer divisions and remainders by constants split where they can be."""
    known = _non_negative_names(fn)
    body = map_exprs(fn.body, lambda e: transform(e, lambda node: _rewrite(node, known)))
    return replace(fn, body=body)


def _non_negative_names(fn: Function) -> set[str]:
    """Symbols, loop variables and never-assigned locals that cannot be negative."""
    assigned = {s.name for s in stmts(fn.body) if isinstance(s, Assign)}
    known = set(fn.symbols)
    for s in stmts(fn.body):  # parents first: a name is bound before its uses
        if isinstance(s, For) and non_negative(s.start, known):
            known.add(s.var)
        elif (
            isinstance(s, Decl)
            and s.init is not None
            and s.name not in assigned
            and non_negative(s.init, known)
        ):
            known.add(s.name)
    return known


def non_negative(expr: Expr, known: set[str]) -> bool:
    """Whether `expr` is an integer that cannot be negative, given the names in `known`."""
    if isinstance(expr, Const):
        return isinstance(expr.value, int) and not isinstance(expr.value, bool) and expr.value >= 0
    if isinstance(expr, Var):
        return expr.name in known and dtypes.is_int(expr.dtype)
    if isinstance(expr, Binary) and expr.op in ("+", "*", "//", "%"):
        return (
            dtypes.is_int(expr.dtype)
            and non_negative(expr.a, known)
            and non_negative(expr.b, known)
        )
    if isinstance(expr, Call) and expr.fn in ("min", "max"):
        return dtypes.is_int(expr.dtype) and all(non_negative(a, known) for a in expr.args)
    return False


def _rewrite(expr: Expr, known: set[str]) -> Expr | None:
    if isinstance(expr, Binary) and dtypes.is_int(expr.dtype):
        folded = _fold(expr)
        if folded is not expr:
            return folded
    return _split(expr, known)


def _split(expr: Expr, known: set[str]) -> Expr | None:
    if not (
        isinstance(expr, Binary)
        and expr.op in ("//", "%")
        and dtypes.is_int(expr.dtype)
        and isinstance(expr.b, Const)
        and isinstance(expr.b.value, int)
        and expr.b.value > 0
    ):
        return None
    divisor, dtype = expr.b.value, expr.dtype
    terms = _terms(expr.a)
    if not all(non_negative(t, known) for t in terms):
        return None
    quotients: list[Expr] = []
    rest: list[Expr] = []
    for term in terms:
        exact = _exact(term, divisor)
        if exact is None:
            rest.append(term)
        else:
            quotients.append(exact)
    if not quotients:
        return None
    remainder = _fold(Binary(expr.op, _sum(rest, dtype), expr.b, dtype)) if rest else None
    if expr.op == "%":
        return remainder if remainder is not None else Const(0, dtype)
    return _sum([*quotients, *([remainder] if remainder is not None else [])], dtype)


def _terms(expr: Expr) -> list[Expr]:
    """The summands of a tree of integer additions."""
    if isinstance(expr, Binary) and expr.op == "+" and dtypes.is_int(expr.dtype):
        return _terms(expr.a) + _terms(expr.b)
    return [expr]


def _exact(term: Expr, divisor: int) -> Expr | None:
    """`term / divisor` where `term` is a visible multiple of `divisor`, else None."""
    if isinstance(term, Const) and isinstance(term.value, int):
        return Const(term.value // divisor, term.dtype) if term.value % divisor == 0 else None
    if isinstance(term, Binary) and term.op == "*" and dtypes.is_int(term.dtype):
        a = _exact(term.a, divisor)
        if a is not None:
            return _product(a, term.b, term.dtype)
        b = _exact(term.b, divisor)
        if b is not None:
            return _product(term.a, b, term.dtype)
    return None


def _product(a: Expr, b: Expr, dtype: str) -> Expr:
    for x, y in ((a, b), (b, a)):
        if isinstance(x, Const) and x.value == 1:
            return y
        if isinstance(x, Const) and x.value == 0:
            return Const(0, dtype)
    return _fold(Binary("*", a, b, dtype))


def _sum(terms: list[Expr], dtype: str) -> Expr:
    """The terms added up, their constants folded into one (last)."""
    constant = sum(int(t.value) for t in terms if isinstance(t, Const))
    others: list[Expr] = [t for t in terms if not isinstance(t, Const)]
    if constant or not others:
        others.append(Const(constant, dtype))
    total = others[0]
    for term in others[1:]:
        total = Binary("+", total, term, dtype)
    return total


def _fold(expr: Binary) -> Expr:
    """A binary node of two integer constants as its value."""
    a, b = expr.a, expr.b
    if not (isinstance(a, Const) and isinstance(b, Const)):
        return expr
    x, y = int(a.value), int(b.value)
    if expr.op in ("//", "%") and (x < 0 or y <= 0):
        return expr  # C truncates where Python floors
    value = {"*": x * y, "+": x + y, "-": x - y, "//": x // y if y else 0, "%": x % y if y else 0}
    result = value.get(expr.op)
    return expr if result is None else Const(result, expr.dtype)
