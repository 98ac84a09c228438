"""Text dumps of the loop IR, for tests and debugging.

`format_stmt` is a `functools.singledispatch` function, so each statement type registers its
own printer (`@format_stmt.register`): the target-neutral ones here, a target's intrinsics
beside their dataclasses."""

from __future__ import annotations

from functools import singledispatch

from tunehub.compiler.ir import (
    PRECEDENCE,
    UNARY_PRECEDENCE,
    Binary,
    Cast,
    Const,
    Expr,
    Load,
    Unary,
    Var,
)
from tunehub.compiler.loop.builders import const_value
from tunehub.compiler.loop.nodes import (
    Assign,
    Barrier,
    Decl,
    For,
    If,
    Prefetch,
    Seq,
    Stmt,
    Store,
    lanes,
)


def format_expr(expr: Expr) -> str:
    """A compact, fully parenthesized-where-needed text of an expression (for dumps)."""
    if isinstance(expr, Const):
        return repr(expr.value)
    if isinstance(expr, Var):
        return expr.name
    if isinstance(expr, Load):
        lanes_note = f"<{lanes(expr.dtype)}>" if lanes(expr.dtype) > 1 else ""
        return f"{expr.tensor}{lanes_note}[{', '.join(format_expr(i) for i in expr.indices)}]"
    if isinstance(expr, Cast):
        return f"{expr.dtype}({format_expr(expr.x)})"
    if isinstance(expr, Unary):
        symbol = {"neg": "-", "not": "not ", "invert": "~"}[expr.op]
        return f"{symbol}{_operand(expr.x, UNARY_PRECEDENCE)}"
    if isinstance(expr, Binary):
        prec = PRECEDENCE[expr.op]
        return f"{_operand(expr.a, prec)} {expr.op} {_operand(expr.b, prec + 1)}"
    return f"{expr.fn}({', '.join(format_expr(a) for a in expr.args)})"


def _operand(expr: Expr, prec: int) -> str:
    text = format_expr(expr)
    if isinstance(expr, Binary) and PRECEDENCE[expr.op] < prec:
        return f"({text})"
    return text


@singledispatch
def format_stmt(stmt: Stmt, depth: int = 0) -> str:
    """An indented, Python-like dump of a statement tree (a statement type without a printer
    of its own shows its fields)."""
    return f"{_pad(depth)}{stmt!r}"


def _pad(depth: int) -> str:
    return "  " * depth


@format_stmt.register
def _for(stmt: For, depth: int = 0) -> str:
    start = "" if const_value(stmt.start) == 0 else f"{format_expr(stmt.start)} + "
    notes = [stmt.kind] if stmt.kind != "serial" else []
    notes += [f"factor={stmt.factor}"] if stmt.factor else []
    notes += [f"{op}:{name}" for op, name in stmt.reduction]
    note = f"  # {', '.join(notes)}" if notes else ""
    head = f"{_pad(depth)}for {stmt.var} in {start}range({format_expr(stmt.extent)}):{note}"
    return f"{head}\n{format_stmt(stmt.body, depth + 1)}"


@format_stmt.register
def _seq(stmt: Seq, depth: int = 0) -> str:
    return "\n".join(format_stmt(s, depth) for s in stmt.body)


@format_stmt.register
def _if(stmt: If, depth: int = 0) -> str:
    pad = _pad(depth)
    text = f"{pad}if {format_expr(stmt.cond)}:\n{format_stmt(stmt.then, depth + 1)}"
    if stmt.orelse is not None:
        text += f"\n{pad}else:\n{format_stmt(stmt.orelse, depth + 1)}"
    return text


@format_stmt.register
def _store(stmt: Store, depth: int = 0) -> str:
    index = ", ".join(format_expr(i) for i in stmt.indices)
    return f"{_pad(depth)}{stmt.buffer}[{index}] = {format_expr(stmt.value)}"


@format_stmt.register
def _assign(stmt: Assign, depth: int = 0) -> str:
    return f"{_pad(depth)}{stmt.name} = {format_expr(stmt.value)}"


@format_stmt.register
def _decl(stmt: Decl, depth: int = 0) -> str:
    shape = f"[{', '.join(map(str, stmt.shape))}]" if stmt.shape else ""
    init = f" = {format_expr(stmt.init)}" if stmt.init is not None else ""
    scope = "shared " if stmt.shared else ""
    return f"{_pad(depth)}{stmt.name}: {scope}{stmt.dtype}{shape}{init}"


@format_stmt.register
def _prefetch(stmt: Prefetch, depth: int = 0) -> str:
    index = ", ".join(format_expr(i) for i in stmt.indices)
    return f"{_pad(depth)}prefetch {stmt.buffer}[{index}]"


@format_stmt.register
def _barrier(stmt: Barrier, depth: int = 0) -> str:
    return f"{_pad(depth)}barrier" + (" (warp)" if stmt.warp else "")
