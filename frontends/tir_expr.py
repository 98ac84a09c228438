"""TIR expressions as signature text, for the TIR frontend.

A typed constant such as `T.float16(7)` or `T.int64(8)` is a plain literal: TIR gives both
operands of an op one dtype, which a literal takes (two constants keep their casts). TIR's
`//` and `%` floor, the signature's truncate: they are written as such only where both
operands are provably non-negative (indices, mostly), and with a correction otherwise.
`T.Cast`, `T.bitwise_*`, `T.shift_*`, `T.if_then_else`, `T.exp`, `T.max`, `T.sqrt`,
`T.rsqrt` and the like map onto the language's operators and functions; anything else is
`Unsupported`, with the text that has no counterpart.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Mapping
from dataclasses import dataclass

import ml_dtypes
import numpy as np

from tunehub.compiler import dtypes
from tunehub.frontends.computes import Unsupported, number
from tunehub.schemas.signature import DTYPES

_BINARY = {
    ast.Add: "+",
    ast.Sub: "-",
    ast.Mult: "*",
    ast.Div: "/",
    ast.BitAnd: "&",
    ast.BitOr: "|",
    ast.BitXor: "^",
    ast.LShift: "<<",
    ast.RShift: ">>",
}
_COMPARE = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}
_CALLS = {
    "bitwise_and": "({0} & {1})",
    "bitwise_or": "({0} | {1})",
    "bitwise_xor": "({0} ^ {1})",
    "bitwise_not": "(~{0})",
    "shift_right": "({0} >> {1})",
    "shift_left": "({0} << {1})",
    "truncdiv": "({0} // {1})",
    "truncmod": "({0} % {1})",
    "if_then_else": "where({0}, {1}, {2})",
    "Select": "where({0}, {1}, {2})",
    "exp": "exp({0})",
    "exp2": "pow(2.0, {0})",
    "log": "log({0})",
    "log2": "(log({0}) * 1.4426950408889634)",
    "sqrt": "sqrt({0})",
    "rsqrt": "rsqrt({0})",
    "tanh": "tanh({0})",
    "sigmoid": "sigmoid({0})",
    "erf": "erf({0})",
    "fabs": "abs({0})",
    "abs": "abs({0})",
    "floor": "floor({0})",
    "ceil": "ceil({0})",
    "pow": "pow({0}, {1})",
    "max": "max({0}, {1})",
    "min": "min({0}, {1})",
    "likely": "{0}",
    "And": "({0} and {1})",
    "Or": "({0} or {1})",
    "Not": "(not {0})",
}
_UNSIGNED = ("uint8", "uint32", "bool")


@dataclass
class _Term:
    """A translated expression: its text, and the dtype of a typed constant (`T.int64(8)`)."""

    text: str
    constant: str | None = None
    nonnegative: bool = False


class Expression:
    """A block's TIR expressions as signature text: `axes` and `symbols` map TIR names to
    the signature's, `buffers` a TIR buffer to its name there and its dtype."""

    def __init__(
        self,
        axes: Mapping[str, str],
        symbols: Mapping[str, str],
        buffers: Mapping[str, tuple[str, str]],
    ) -> None:
        self.axes, self.symbols, self.buffers = axes, symbols, buffers

    def text(self, node: ast.expr) -> str:
        return self._term(node).text

    def _term(self, node: ast.expr) -> _Term:
        value = constant(node)
        if value is not None:
            text = number(value)
            if text is None:
                raise Unsupported(f"`{short(node)}`: an infinite or NaN constant")
            dtype = call_name(node) if call_name(node) in DTYPES else None
            return _Term(text, dtype, not isinstance(value, bool) and value >= 0)
        if isinstance(node, ast.Name):
            return self._name(node.id)
        if isinstance(node, ast.Subscript):
            return self._load(node)
        if isinstance(node, ast.BinOp):
            return self._binary(node.op, self._term(node.left), self._term(node.right), node)
        if isinstance(node, ast.UnaryOp):
            x = self._term(node.operand)
            prefix = {ast.USub: "-", ast.Invert: "~", ast.Not: "not "}.get(type(node.op))
            if prefix is None:
                raise Unsupported(f"`{short(node)}` is not mapped")
            return _Term(f"({prefix}{x.text})")
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _COMPARE:
            a, b = self._operands([node.left, node.comparators[0]])
            return _Term(f"({a} {_COMPARE[type(node.ops[0])]} {b})")
        if isinstance(node, ast.BoolOp):
            joiner = " and " if isinstance(node.op, ast.And) else " or "
            return _Term(f"({joiner.join(self._operands(node.values))})")
        if isinstance(node, ast.Call):
            return self._call(node)
        raise Unsupported(f"`{short(node)}` is not mapped")

    def _name(self, name: str) -> _Term:
        if name in self.axes:
            return _Term(self.axes[name], nonnegative=True)
        if name in self.symbols:
            return _Term(self.symbols[name], nonnegative=True)
        raise Unsupported(f"{name} is not a block axis or a symbol")

    def _load(self, node: ast.Subscript) -> _Term:
        buffer = self.buffers.get(ast.unparse(node.value))
        if buffer is None:
            raise Unsupported(f"`{short(node)}` reads no buffer")
        name, dtype = buffer
        indices = ", ".join(self.text(i) for i in elements(node.slice))
        return _Term(f"{name}[{indices}]", nonnegative=dtype in _UNSIGNED)

    def _operands(self, nodes: list[ast.expr]) -> list[str]:
        """The operands' texts; typed constants keep their type when all operands are such
        (with another operand, a literal takes that one's type, as TIR's would)."""
        terms = [self._term(n) for n in nodes]
        if all(t.constant for t in terms):
            return [f"{t.constant}({t.text})" for t in terms]
        return [t.text for t in terms]

    def _binary(self, op: ast.operator, a: _Term, b: _Term, node: ast.expr) -> _Term:
        nonnegative = a.nonnegative and b.nonnegative
        if isinstance(op, ast.FloorDiv | ast.Mod):
            return _floor("//" if isinstance(op, ast.FloorDiv) else "%", a, b)
        if type(op) not in _BINARY:
            raise Unsupported(f"`{short(node)}` is not mapped")
        x, y = (
            (a.text, b.text)
            if not (a.constant and b.constant)
            else (
                f"{a.constant}({a.text})",
                f"{b.constant}({b.text})",
            )
        )
        keeps_sign = not isinstance(op, ast.Sub | ast.BitXor | ast.LShift)
        return _Term(f"({x} {_BINARY[type(op)]} {y})", nonnegative=nonnegative and keeps_sign)

    def _call(self, node: ast.Call) -> _Term:
        name = call_name(node)
        args = node.args
        if name == "Cast" or (name in DTYPES and len(args) == 1):
            dtype, value = (string(args[0]), args[1]) if name == "Cast" else (name, args[0])
            if dtype not in DTYPES:
                raise Unsupported(f"`{short(node)}`: dtype {dtype} has no counterpart")
            x = self._term(value)
            return _Term(f"{dtype}({x.text})", nonnegative=x.nonnegative or dtype in _UNSIGNED)
        if name in ("floordiv", "floormod") and len(args) == 2:
            return _floor(
                "//" if name == "floordiv" else "%", self._term(args[0]), self._term(args[1])
            )
        if name in _CALLS:
            template = _CALLS[name]
            return _Term(template.format(*self._operands(list(args))))
        raise Unsupported(f"T.{name} has no counterpart in signatures")


def _floor(op: str, a: _Term, b: _Term) -> _Term:
    """TIR's floor division (or modulo) as the signature's truncating one, corrected where an
    operand may be negative."""
    if a.nonnegative and b.nonnegative:
        return _Term(f"({a.text} {op} {b.text})", nonnegative=True)
    quotient, remainder = f"({a.text} // {b.text})", f"({a.text} % {b.text})"
    differ = f"({remainder} != 0 and (({a.text} < 0) ^ ({b.text} < 0)))"
    if op == "//":
        return _Term(f"where({differ}, {quotient} - 1, {quotient})")
    return _Term(f"where({differ}, {remainder} + {b.text}, {remainder})")


def identity(op: str, dtype: str) -> set[float]:
    """The init values a reduction of `op` over `dtype` may start from."""
    low, high = _limits(dtype)
    return {"sum": {0.0}, "prod": {1.0}, "max": {-math.inf, low}, "min": {math.inf, high}}[op]


def _limits(dtype: str) -> tuple[float, float]:
    """The lowest and highest finite values of `dtype`."""
    target = dtypes.to_numpy(dtype)
    info = ml_dtypes.finfo(target) if dtypes.is_float(dtype) else np.iinfo(target)
    return float(info.min), float(info.max)


def constant(node: ast.expr) -> int | float | bool | None:
    """The value of a constant: `3`, `-0.5`, `T.int64(8)`, `T.float16(7)`, `T.float32("-inf")`,
    `T.min_value("float16")`; None for anything else."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float | bool):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        value = constant(node.operand)
        return None if value is None or isinstance(value, bool) else -value
    name = call_name(node)
    if not isinstance(node, ast.Call) or len(node.args) != 1:
        return None
    arg = node.args[0]
    if name in ("min_value", "max_value"):
        low, high = _limits(string(arg))
        return low if name == "min_value" else high
    if name not in DTYPES:
        return None
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        try:
            return float(arg.value)  # "inf", "-inf", "nan"
        except ValueError:
            return None
    value = constant(arg)
    if value is None or name == "bool":
        return value
    return float(value) if dtypes.is_float(name) else int(value)


def call_name(node: ast.AST) -> str:
    """`T.axis.remap(...)` -> `remap`; '' for what is not a call."""
    if not isinstance(node, ast.Call):
        return ""
    func = node.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def elements(node: ast.expr) -> list[ast.expr]:
    return list(node.elts) if isinstance(node, ast.Tuple | ast.List) else [node]


def string(node: ast.expr) -> str:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    raise Unsupported(f"`{short(node)}` is not a string")


def short(node: ast.AST) -> str:
    text = ast.unparse(node).splitlines()[0]
    return text if len(text) <= 60 else text[:57] + "..."
