"""Tokenizer and precedence-climbing parser for the `expr` language of task signatures.

The text is parsed straight into typed IR nodes (`compiler.ir`); nothing is ever evaluated
with `eval`, `ast` or pickle. Syntax and precedence are Python's: `or` < `and` < `not` <
comparisons < `|` < `^` < `&` < shifts < `+ -` < `* / // %` < unary `- + ~` < `**` (right
associative, `-2 ** 2` is `-(2 ** 2)`). Comparison chains (`a < b < c`) are rejected.

Typing rules:

* Axes and symbols are `int64` (`dtypes.INDEX`). `True`/`False` are `bool`.
* Literals are weak: an int literal takes the other operand's dtype (int64 next to a bool),
  a float literal takes it if it is a float and is float32 otherwise; two literals give int64
  or float32. A literal must fit the dtype it takes (`u8 - 300` is an error). Unary `-` and
  `+` on a literal give a literal, so `x16 * -0.5` stays float16.
* Otherwise binary operands combine with `dtypes.promote`. No implicit `Cast` nodes are
  inserted: a `Binary` or `Call` node only records its result dtype, and renderers and the
  evaluator convert each operand to that node's compute type (`dtypes.compute_dtype`).
  Comparisons record `bool`; their operands are compared in `promote(a, b)`.
* `+ - * // %` and `min max abs` need numbers (not bool); `/` needs a float operand (two
  integers are rejected: use `//`). `//` and `%` on integers truncate toward zero as in C;
  on floats `a // b` is `trunc(a / b)` and `a % b` is `fmod(a, b)`, so that
  `a == (a // b) * b + a % b` holds for every operand type.
* `and or not` need bool operands. `& | ^` take integers or bools (bool with bool is bool);
  `~` on a bool is logical negation. `<< >>` take integers and yield the left operand's dtype.
* `exp log sqrt rsqrt tanh sigmoid erf` and `pow` (also written `**`) on integers yield
  float32, on floats the argument's dtype. `abs floor ceil min max` keep integer types
  (`floor`/`ceil` of an integer is the identity).
* `where(c, a, b)` needs a bool `c`; its dtype is that of `a` and `b` combined as above.
* A cast is a call of a dtype name, e.g. `float16(x)`, and always yields a `Cast` node.
* Read indices must be integers; the rank must match the tensor's.

Bounds: at most `MAX_EXPR_CHARS` characters, and `MAX_DEPTH` levels of both parser nesting
(parentheses, calls, reads, unary operators, `**`) and of the resulting tree, so no input can
drive Python into a RecursionError and the recursive passes over the IR stay shallow.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NoReturn

import ml_dtypes
import numpy as np

from tunehub.compiler import dtypes
from tunehub.compiler.errors import SignatureError
from tunehub.compiler.ir import (
    BINARY_FUNCTIONS,
    COMPARISONS,
    PRECEDENCE,
    UNARY_FUNCTIONS,
    UNARY_PRECEDENCE,
    Binary,
    Call,
    Cast,
    Const,
    Expr,
    Load,
    Unary,
    Var,
)

MAX_DEPTH = 64
MAX_EXPR_CHARS = 4096

KEYWORDS = ("and", "or", "not", "True", "False")
# Names a signature may not give to a tensor, axis or symbol: they would shadow the language.
RESERVED = frozenset((*KEYWORDS, *UNARY_FUNCTIONS, *BINARY_FUNCTIONS, "where", *dtypes.ALL))

_FLOAT_ONLY = ("exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "erf", "pow")
_INT64_MAX = 2**63 - 1

# `**` binds tighter than unary operators on its left (`-2 ** 2` is `-(2 ** 2)`).
_BINARY_PREC = {**PRECEDENCE, "**": UNARY_PRECEDENCE + 1}
_NOT_PREC = 3

_TOKEN = re.compile(
    r"""
    (?P<space>\s+)
    | (?P<float>(?:\d+\.\d*|\.\d+)(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+)
    | (?P<int>\d+)
    | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
    | (?P<op>\*\*|//|<<|>>|<=|>=|==|!=|[-+*/%<>&|^~()\[\],])
    """,
    re.VERBOSE | re.ASCII,  # `\d` must not accept other scripts' digits
)


@dataclass(frozen=True)
class Scope:
    """What an expression may refer to, and how to name it in errors.

    `tensors` maps each readable tensor to its (dtype, rank). `hints` explains names that
    exist elsewhere in the signature but may not be used here (a compute defined later, a
    reduce axis of another compute), so the error says why rather than just "unknown".
    """

    context: str
    variables: frozenset[str] = frozenset()
    tensors: Mapping[str, tuple[str, int]] = field(default_factory=dict)
    hints: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class _Token:
    kind: str  # int, float, name, op, end
    text: str
    col: int  # 1-based


@dataclass(frozen=True, slots=True)
class _Val:
    """A parsed subexpression: its IR, tree depth, start column, and whether it is a weak
    literal (a Const still holding its default dtype, free to adopt its neighbour's)."""

    expr: Expr
    depth: int
    col: int
    weak: bool = False

    @property
    def dtype(self) -> str:
        return self.expr.dtype


def parse(text: str, scope: Scope) -> Expr:
    """Parse and type-check one expression; raise SignatureError naming `scope.context`."""
    return _Parser(text, scope).parse()


class _Parser:
    def __init__(self, text: str, scope: Scope) -> None:
        self.scope = scope
        if len(text) > MAX_EXPR_CHARS:
            self.fail(f"expression longer than {MAX_EXPR_CHARS} characters", 1)
        self.tokens = self.tokenize(text)
        self.pos = 0
        self.nesting = 0

    def fail(self, message: str, col: int) -> NoReturn:
        raise SignatureError(f"{self.scope.context}: {message} at column {col}")

    # -- tokens ----------------------------------------------------------------------------

    def tokenize(self, text: str) -> list[_Token]:
        tokens = []
        pos = 0
        while pos < len(text):
            m = _TOKEN.match(text, pos)
            if m is None:
                self.fail(f"unexpected character {text[pos]!r}", pos + 1)
            assert m.lastgroup is not None
            if m.lastgroup != "space":
                tokens.append(_Token(m.lastgroup, m.group(), pos + 1))
            pos = m.end()
        tokens.append(_Token("end", "", len(text) + 1))
        return tokens

    def peek(self) -> _Token:
        return self.tokens[self.pos]

    def next(self) -> _Token:
        tok = self.tokens[self.pos]
        if tok.kind != "end":
            self.pos += 1
        return tok

    def expect(self, text: str) -> _Token:
        tok = self.next()
        if tok.text != text or tok.kind != "op":
            self.fail(f"expected {text!r}, found {_describe(tok)}", tok.col)
        return tok

    # -- grammar ---------------------------------------------------------------------------

    def parse(self) -> Expr:
        val = self.expression(0)
        tok = self.peek()
        if tok.kind != "end":
            self.fail(f"unexpected {_describe(tok)}", tok.col)
        return val.expr

    def expression(self, min_prec: int) -> _Val:
        """Precedence climbing; every recursion into a subexpression passes through here,
        so the nesting counter bounds the Python stack."""
        self.nesting += 1
        if self.nesting > MAX_DEPTH:
            self.fail(f"expression nesting deeper than {MAX_DEPTH} levels", self.peek().col)
        left = self.prefix(min_prec)
        chained = False
        while True:
            tok = self.peek()
            prec = _BINARY_PREC.get(tok.text) if tok.kind in ("op", "name") else None
            if prec is None or prec < min_prec:
                break
            self.next()
            if tok.text in COMPARISONS:
                if chained:
                    self.fail("comparison chains are not allowed", tok.col)
                chained = True
            # `**` is right associative and its right operand may carry a unary sign.
            right = self.expression(UNARY_PRECEDENCE if tok.text == "**" else prec + 1)
            left = self.binary(tok, left, right)
        self.nesting -= 1
        return left

    def prefix(self, min_prec: int) -> _Val:
        tok = self.peek()
        if tok.kind == "name" and tok.text == "not":
            if min_prec > _NOT_PREC:
                self.fail("'not' must be parenthesized here", tok.col)
            self.next()
            x = self.expression(_NOT_PREC)
            if x.dtype != "bool":
                self.fail(f"'not' needs a bool operand, got {x.dtype}", tok.col)
            return self.node(Unary("not", x.expr, "bool"), tok.col, x)
        if tok.kind == "op" and tok.text in ("-", "+", "~"):
            self.next()
            return self.unary(tok, self.expression(UNARY_PRECEDENCE))
        return self.primary()

    def primary(self) -> _Val:
        tok = self.next()
        if tok.kind == "int":
            value = int(tok.text)
            if value > _INT64_MAX:
                self.fail(f"integer literal {tok.text} does not fit int64", tok.col)
            return _Val(Const(value, "int64"), 0, tok.col, weak=True)
        if tok.kind == "float":
            fvalue = float(tok.text)
            if not math.isfinite(fvalue):
                self.fail(f"float literal {tok.text} is out of range", tok.col)
            return _Val(Const(fvalue, "float32"), 0, tok.col, weak=True)
        if tok.kind == "op" and tok.text == "(":
            val = self.expression(0)
            self.expect(")")
            return _Val(val.expr, val.depth, tok.col, val.weak)
        if tok.kind == "name" and tok.text in ("True", "False"):
            return _Val(Const(tok.text == "True", "bool"), 0, tok.col)
        if tok.kind == "name" and tok.text not in KEYWORDS:
            after = self.peek().text if self.peek().kind == "op" else ""
            if after == "(":
                return self.call(tok)
            if after == "[":
                return self.read(tok)
            return self.variable(tok)
        self.fail(f"unexpected {_describe(tok)}", tok.col)

    def arguments(self) -> list[_Val]:
        self.expect("(")
        return self.expressions(")")

    def expressions(self, close: str) -> list[_Val]:
        """One or more comma-separated expressions, then `close` (call arguments, indices)."""
        values = [self.expression(0)]
        while self.peek().text == "," and self.peek().kind == "op":
            self.next()
            values.append(self.expression(0))
        self.expect(close)
        return values

    # -- names -----------------------------------------------------------------------------

    def variable(self, tok: _Token) -> _Val:
        name = tok.text
        if name in self.scope.variables:
            return _Val(Var(name), 0, tok.col)
        if name in self.scope.tensors:
            self.fail(f"'{name}' is a tensor; read it as {name}[...]", tok.col)
        self.unknown(tok, "name")

    def unknown(self, tok: _Token, what: str) -> NoReturn:
        hint = self.scope.hints.get(tok.text)
        self.fail(hint if hint else f"unknown {what} '{tok.text}'", tok.col)

    def read(self, tok: _Token) -> _Val:
        name = tok.text
        if name not in self.scope.tensors:
            if name in self.scope.variables:
                self.fail(f"'{name}' is not a tensor", tok.col)
            self.unknown(tok, "tensor")
        dtype, rank = self.scope.tensors[name]
        self.expect("[")
        indices = self.expressions("]")
        if len(indices) != rank:
            count = f"{len(indices)} index" if len(indices) == 1 else f"{len(indices)} indices"
            self.fail(f"'{name}' has rank {rank} but is read with {count}", tok.col)
        exprs = []
        for n, index in enumerate(indices):
            expr = index.expr
            if not dtypes.is_int(expr.dtype):
                self.fail(f"index {n} of '{name}' must be an integer, got {expr.dtype}", index.col)
            exprs.append(expr)
        return self.node(Load(name, tuple(exprs), dtype), tok.col, *indices)

    def call(self, tok: _Token) -> _Val:
        fn = tok.text
        if fn in dtypes.ALL:
            args = self.arguments()
            self.arity(tok, args, 1)
            return self.node(Cast(fn, args[0].expr), tok.col, *args)
        if fn not in (*UNARY_FUNCTIONS, *BINARY_FUNCTIONS, "where"):
            if fn in self.scope.tensors:
                self.fail(f"'{fn}' is a tensor; read it as {fn}[...]", tok.col)
            self.fail(f"unknown function '{fn}'", tok.col)
        args = self.arguments()
        if fn == "where":
            self.arity(tok, args, 3)
            cond = args[0].expr
            if cond.dtype != "bool":
                self.fail(f"'where' condition must be bool, got {cond.dtype}", args[0].col)
            a, b, dtype = self.combine(args[1], args[2])
            return self.node(Call("where", (cond, a, b), dtype), tok.col, *args)
        self.arity(tok, args, 1 if fn in UNARY_FUNCTIONS else 2)
        if len(args) == 1:
            operands = [args[0].expr]
            dtype = operands[0].dtype
        else:
            a, b, dtype = self.combine(args[0], args[1])
            operands = [a, b]
        if dtype == "bool":
            self.fail(f"'{fn}' needs numeric arguments, got bool", tok.col)
        if fn in _FLOAT_ONLY and not dtypes.is_float(dtype):
            dtype = "float32"
        return self.node(Call(fn, tuple(operands), dtype), tok.col, *args)

    def arity(self, tok: _Token, args: list[_Val], n: int) -> None:
        if len(args) != n:
            what = "cast" if tok.text in dtypes.ALL else "function"
            plural = "argument" if n == 1 else "arguments"
            self.fail(f"{what} '{tok.text}' takes {n} {plural}, got {len(args)}", tok.col)

    # -- typing ----------------------------------------------------------------------------

    def unary(self, tok: _Token, x: _Val) -> _Val:
        op = tok.text
        if x.weak and op in ("-", "+"):
            assert isinstance(x.expr, Const)
            value = -x.expr.value if op == "-" else x.expr.value
            return _Val(Const(value, x.dtype), 0, tok.col, weak=True)
        expr = x.expr
        dtype = expr.dtype
        if op == "~":
            if not (dtypes.is_int(dtype) or dtype == "bool"):
                self.fail(f"'~' needs an integer or bool operand, got {dtype}", tok.col)
            return self.node(Unary("invert", expr, dtype), tok.col, x)
        if dtype == "bool":
            self.fail(f"unary '{op}' needs a numeric operand, got bool", tok.col)
        if op == "+":
            return _Val(expr, x.depth, tok.col)
        return self.node(Unary("neg", expr, dtype), tok.col, x)

    def binary(self, tok: _Token, left: _Val, right: _Val) -> _Val:
        op = tok.text
        if op == "**":
            a, b, dtype = self.combine(left, right)
            if dtype == "bool":
                self.fail("'**' needs numeric operands, got bool", tok.col)
            dtype = dtype if dtypes.is_float(dtype) else "float32"
            return self.node(Call("pow", (a, b), dtype), tok.col, left, right)
        if op in ("<<", ">>"):
            a, b, _ = self.combine(left, right)
            for operand in (a, b):
                if not dtypes.is_int(operand.dtype):
                    self.fail(f"'{op}' needs integer operands, got {operand.dtype}", tok.col)
            return self.node(Binary(op, a, b, a.dtype), tok.col, left, right)
        a, b, dtype = self.combine(left, right)
        if op in COMPARISONS:
            return self.node(Binary(op, a, b, "bool"), tok.col, left, right)
        if op in ("and", "or"):
            for operand in (a, b):
                if operand.dtype != "bool":
                    self.fail(f"'{op}' needs bool operands, got {operand.dtype}", tok.col)
        elif op in ("&", "|", "^"):
            if not (dtypes.is_int(dtype) or dtype == "bool"):
                self.fail(f"'{op}' needs integer or bool operands, got {dtype}", tok.col)
        elif dtype == "bool":
            self.fail(f"'{op}' needs numeric operands, got bool", tok.col)
        elif op == "/" and not dtypes.is_float(dtype):
            self.fail(f"'/' on {a.dtype} and {b.dtype}; use // for integer division", tok.col)
        return self.node(Binary(op, a, b, dtype), tok.col, left, right)

    def combine(self, a: _Val, b: _Val) -> tuple[Expr, Expr, str]:
        """Resolve weak literals against each other and return both operands and the
        promoted dtype."""
        if a.weak and not b.weak:
            ea, eb = self.adopt(a, b.dtype), b.expr
        elif b.weak and not a.weak:
            ea, eb = a.expr, self.adopt(b, a.dtype)
        else:
            ea, eb = a.expr, b.expr
        return ea, eb, dtypes.promote(ea.dtype, eb.dtype)

    def adopt(self, lit: _Val, other: str) -> Expr:
        """The weak literal `lit` typed after its neighbour of dtype `other`."""
        assert isinstance(lit.expr, Const)
        value = lit.expr.value
        if isinstance(value, int) and dtypes.is_int(other):
            info = np.iinfo(dtypes.to_numpy(other))
            if not info.min <= value <= info.max:
                self.fail(f"integer literal {value} does not fit {other}", lit.col)
            return Const(value, other)
        if dtypes.is_float(other):
            fvalue = float(value)
            finfo = ml_dtypes.finfo(dtypes.to_numpy(other))
            if abs(fvalue) > float(finfo.max):
                self.fail(f"literal {value} overflows {other}", lit.col)
            return Const(fvalue, other)
        return lit.expr

    def node(self, expr: Expr, col: int, *children: _Val) -> _Val:
        """Wrap a new IR node; `col` is its operator's or function's column."""
        depth = 1 + max((c.depth for c in children), default=0)
        if depth > MAX_DEPTH:
            self.fail(f"expression nesting deeper than {MAX_DEPTH} levels", col)
        return _Val(expr, depth, min((col, *(c.col for c in children))))


def _describe(tok: _Token) -> str:
    return "end of expression" if tok.kind == "end" else repr(tok.text)
