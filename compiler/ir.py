"""The typed tensor-expression IR that task signatures are parsed into.

A `Program` is a list of `Compute`s over named tensors; each compute's body is an `Expr`
tree whose leaves are constants, index variables (axes and symbols) and `Load`s of inputs or
earlier computes. Every node knows its dtype (see `compiler.dtypes` for the rules).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from tunehub.compiler.dtypes import INDEX

Extent = int | str  # a literal extent, or the name of a symbol


@dataclass(frozen=True, slots=True)
class Const:
    value: int | float | bool
    dtype: str


@dataclass(frozen=True, slots=True)
class Var:
    """An axis of the enclosing compute, one of its reduce axes, or a symbol."""

    name: str
    dtype: str = INDEX


@dataclass(frozen=True, slots=True)
class Load:
    tensor: str
    indices: tuple[Expr, ...]
    dtype: str


@dataclass(frozen=True, slots=True)
class Cast:
    dtype: str
    x: Expr


@dataclass(frozen=True, slots=True)
class Unary:
    """op: `neg` (-x), `not` (logical), `invert` (bitwise ~)."""

    op: str
    x: Expr
    dtype: str


@dataclass(frozen=True, slots=True)
class Binary:
    """op: + - * / // % < <= > >= == != and or & | ^ << >>  (`**` is parsed to Call pow).

    `//` and `%` on integers truncate toward zero, as in C.
    """

    op: str
    a: Expr
    b: Expr
    dtype: str


@dataclass(frozen=True, slots=True)
class Call:
    """fn: exp log sqrt rsqrt tanh sigmoid erf abs min max floor ceil pow where."""

    fn: str
    args: tuple[Expr, ...]
    dtype: str


Expr = Const | Var | Load | Cast | Unary | Binary | Call

UNARY_FUNCTIONS = ("exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "erf", "abs", "floor", "ceil")
BINARY_FUNCTIONS = ("min", "max", "pow")
FUNCTIONS = (*UNARY_FUNCTIONS, *BINARY_FUNCTIONS, "where")
COMPARISONS = ("<", "<=", ">", ">=", "==", "!=")
LOGICAL = ("and", "or")
BITWISE = ("&", "|", "^", "<<", ">>")
ARITHMETIC = ("+", "-", "*", "/", "//", "%")
REDUCE_OPS = ("sum", "max", "min", "prod")
# Binary operator -> how tightly it binds, as in Python, shared by the parser and the
# printers so that text and tree agree; `not` binds at 3 and unary `- ~` at
# `UNARY_PRECEDENCE`, between these.
PRECEDENCE = {
    "or": 1,
    "and": 2,
    **dict.fromkeys(COMPARISONS, 4),
    "|": 5,
    "^": 6,
    "&": 7,
    "<<": 8,
    ">>": 8,
    "+": 9,
    "-": 9,
    **dict.fromkeys(("*", "/", "//", "%"), 10),
}
UNARY_PRECEDENCE = 11


def children(expr: Expr) -> tuple[Expr, ...]:
    if isinstance(expr, Load):
        return expr.indices
    if isinstance(expr, Cast | Unary):
        return (expr.x,)
    if isinstance(expr, Binary):
        return (expr.a, expr.b)
    if isinstance(expr, Call):
        return expr.args
    return ()


def walk(expr: Expr) -> Iterator[Expr]:
    """Every node of the tree, parents before children."""
    stack = [expr]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(reversed(children(node)))


def rebuild(expr: Expr, new_children: tuple[Expr, ...]) -> Expr:
    """The same node over other children."""
    if isinstance(expr, Load):
        return Load(expr.tensor, new_children, expr.dtype)
    if isinstance(expr, Cast):
        return Cast(expr.dtype, new_children[0])
    if isinstance(expr, Unary):
        return Unary(expr.op, new_children[0], expr.dtype)
    if isinstance(expr, Binary):
        return Binary(expr.op, new_children[0], new_children[1], expr.dtype)
    if isinstance(expr, Call):
        return Call(expr.fn, new_children, expr.dtype)
    return expr


def transform(expr: Expr, fn: Callable[[Expr], Expr | None]) -> Expr:
    """Rewrite bottom-up: `fn` sees each node after its children were rewritten and returns a
    replacement, or None to keep it."""
    kids = children(expr)
    if kids:
        new_kids = tuple(transform(k, fn) for k in kids)
        if new_kids != kids:
            expr = rebuild(expr, new_kids)
    replaced = fn(expr)
    return expr if replaced is None else replaced


def substitute(expr: Expr, mapping: dict[str, Expr]) -> Expr:
    """Replace index variables by expressions (used to inline producers into consumers)."""
    return transform(expr, lambda e: mapping.get(e.name) if isinstance(e, Var) else None)


def loads(expr: Expr) -> list[Load]:
    return [e for e in walk(expr) if isinstance(e, Load)]


@dataclass(frozen=True, slots=True)
class Symbol:
    name: str
    min: int
    max: int


@dataclass(frozen=True, slots=True)
class Tensor:
    """An input tensor, row-major and contiguous."""

    name: str
    shape: tuple[Extent, ...]
    dtype: str


@dataclass(frozen=True, slots=True)
class ReduceAxis:
    name: str
    extent: Extent


@dataclass(frozen=True, slots=True)
class Compute:
    """`name[axes] = reduce_op over reduce_axes of body` (or just `body` without a reduce).

    A reduce casts each term (the body's value) to `term` and accumulates in that dtype's
    compute dtype; the result is cast to `dtype` when stored.
    """

    name: str
    axes: tuple[str, ...]
    shape: tuple[Extent, ...]
    dtype: str
    body: Expr
    reduce_op: str | None = None
    reduce_axes: tuple[ReduceAxis, ...] = ()
    term_dtype: str | None = None  # None: `dtype` (signature version 1)

    @property
    def term(self) -> str:
        """The dtype a reduce casts each term to: its own dtype in version 1 signatures; in
        version 2 a 16-bit float sum or product keeps its terms in the float32 accumulator."""
        return self.term_dtype or self.dtype


@dataclass(frozen=True)
class Program:
    name: str
    symbols: tuple[Symbol, ...]
    inputs: tuple[Tensor, ...]
    computes: tuple[Compute, ...]
    outputs: tuple[str, ...]
    _by_name: dict[str, Tensor | Compute] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        by_name: dict[str, Tensor | Compute] = {t.name: t for t in self.inputs}
        by_name.update({c.name: c for c in self.computes})
        object.__setattr__(self, "_by_name", by_name)

    def buffer(self, name: str) -> Tensor | Compute:
        """The input or compute called `name` (both have .shape and .dtype)."""
        return self._by_name[name]

    def compute(self, name: str) -> Compute:
        node = self._by_name[name]
        if not isinstance(node, Compute):
            raise KeyError(f"{name!r} is an input, not a compute")
        return node

    def consumers(self, name: str) -> list[Compute]:
        """Computes whose body reads `name`."""
        return [c for c in self.computes if any(ld.tensor == name for ld in loads(c.body))]

    def extent(self, extent: Extent, symbols: dict[str, int]) -> int:
        return extent if isinstance(extent, int) else symbols[extent]

    def shape_of(self, name: str, symbols: dict[str, int]) -> tuple[int, ...]:
        return tuple(self.extent(e, symbols) for e in self.buffer(name).shape)
