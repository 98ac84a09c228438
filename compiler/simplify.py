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

Two more rules of the same kind: a remainder by c divided by d >= c is 0, and taken again
modulo d is `x % d` (d dividing c) or itself (c <= d); and where every variable term is a
multiple of a common factor g of d and the constant terms sum to r < g, `(g * q + r) // d` is
`q // (d / g)` (the 8 elements of a run share one int4 scale index). Constants fold where C
would compute the same value.

Provably non-negative: integer constants >= 0, symbols, loop variables whose loop starts at a
non-negative value, locals initialized to a non-negative value and never assigned, and sums,
products, quotients, remainders, minima and maxima of those.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from tunehub.compiler import dtypes
from tunehub.compiler.ir import Binary, Call, Const, Expr, Var, transform, walk
from tunehub.compiler.loop import Assign, Decl, For, Function, map_exprs, stmts


def simplify(fn: Function) -> Function:
    """`fn` with its integer divisions and remainders by constants split where they can be."""
    known = _non_negative_names(fn)
    return replace(fn, body=map_exprs(fn.body, lambda expr: simplified(expr, known)))


def simplified(expr: Expr, known: set[str]) -> Expr:
    """`expr` with its divisions and remainders split, the names in `known` non-negative."""
    if not any(isinstance(e, Binary) and e.op in ("//", "%") for e in walk(expr)):
        return expr  # most expressions: nothing to split, nothing to rebuild
    return transform(expr, lambda node: _rewrite(node, known))


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
    terms = summands(expr.a)
    if not all(non_negative(t, known) for t in terms):
        return None
    division = _Division(expr.op, expr.b.value, expr.dtype, known)
    return division.of_remainder(terms) or division.multiples(terms) or division.common(terms)


@dataclass(frozen=True)
class _Division:
    """`(sum of non-negative terms) op d` for op `//` or `%` and a positive constant d."""

    op: str
    d: int
    dtype: str
    known: set[str]

    def of_remainder(self, terms: list[Expr]) -> Expr | None:
        """`(x % c) // d` is 0 for c <= d; `(x % c) % d` is `x % d` where d divides c, and
        `x % c` for c <= d."""
        inner = terms[0] if len(terms) == 1 else None
        if not (isinstance(inner, Binary) and inner.op == "%" and isinstance(inner.b, Const)):
            return None
        c = int(inner.b.value)
        if self.op == "//":
            return Const(0, self.dtype) if c <= self.d else None
        if c % self.d == 0:
            return Binary("%", inner.a, Const(self.d, self.dtype), self.dtype)
        return inner if c <= self.d else None

    def multiples(self, terms: list[Expr]) -> Expr | None:
        """`(d * q + r) // d = q + r // d` and `(d * q + r) % d = r % d`."""
        quotients: list[Expr] = []
        rest: list[Expr] = []
        for term in terms:
            exact = _exact(term, self.d)
            if exact is None:
                rest.append(term)
            else:
                quotients.append(exact)
        if not quotients:
            return None
        remainder = self.apply(added(rest, self.dtype)) if rest else Const(0, self.dtype)
        if self.op == "%":
            return remainder
        return added([*quotients, remainder], self.dtype)

    def common(self, terms: list[Expr]) -> Expr | None:
        """With g dividing d, every variable term a multiple of g and the constant terms
        summing to 0 <= r < g: `(g * q + r) // d = q // (d / g)` and `(g * q + r) % d =
        (q % (d / g)) * g + r` (r stays inside one group of g)."""
        r = sum(int(t.value) for t in terms if isinstance(t, Const))
        variables = [t for t in terms if not isinstance(t, Const)]
        g = math.gcd(self.d, *(_factor(t) for t in variables))
        if not variables or g == 1 or not 0 <= r < g:
            return None
        exact = [_exact(t, g) for t in variables]
        if any(e is None for e in exact):
            return None
        q = added([e for e in exact if e is not None], self.dtype)
        outer = _Division(self.op, self.d // g, self.dtype, self.known)
        if self.op == "//":
            return outer.apply(q)
        low = _product(outer.apply(q), Const(g, self.dtype), self.dtype)
        return added([low, Const(r, self.dtype)], self.dtype)

    def apply(self, x: Expr) -> Expr:
        """`x op d`, simplified at its root (`x` is already)."""
        expr = Binary(self.op, x, Const(self.d, self.dtype), self.dtype)
        found = _rewrite(expr, self.known)
        return expr if found is None else found


def summands(expr: Expr) -> list[Expr]:
    """The summands of a tree of integer additions."""
    if isinstance(expr, Binary) and expr.op == "+" and dtypes.is_int(expr.dtype):
        return summands(expr.a) + summands(expr.b)
    return [expr]


def _factor(term: Expr) -> int:
    """The constant factor visible in a product (1 where there is none)."""
    if isinstance(term, Const) and isinstance(term.value, int):
        return abs(term.value)
    if isinstance(term, Binary) and term.op == "*" and dtypes.is_int(term.dtype):
        return _factor(term.a) * _factor(term.b)
    return 1


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


def added(terms: list[Expr], dtype: str) -> Expr:
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
    bits = 8 * dtypes.itemsize(expr.dtype)
    signed = dtypes.is_signed(expr.dtype)
    low, high = (-(1 << (bits - 1)), 1 << (bits - 1)) if signed else (0, 1 << bits)
    if result is None or not low <= result < high:
        return expr  # C would wrap (or, signed, not define) what Python computes exactly
    return Const(result, expr.dtype)
