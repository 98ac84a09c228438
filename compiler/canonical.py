"""The canonical form of a program and its workload key.

Two signatures that differ only in names (of the task, tensors, axes, symbols) are one
workload: the canonical form replaces every name by its position (inputs `in0..`, computes
`c0..`, per-compute axes `a0..` and reduce axes `r0..`, symbols `s0..`) and re-prints each
expression from the IR, fully parenthesized, so formatting and redundant parentheses in the
source do not matter either. A compute whose reduce keeps its terms in another dtype than its
own (signature version 2, `Compute.term_dtype`) says so; every other compute reads as in
version 1, so a signature means one key whichever version it is written in. Any semantic
change (a constant, a shape, a dtype, the order of operands) changes the form and therefore
the key.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from tunehub.compiler.ir import Binary, Call, Cast, Const, Expr, Extent, Load, Program, Unary, Var

_UNARY_TEXT = {"neg": "-", "not": "not ", "invert": "~"}


def to_text(expr: Expr, names: Mapping[str, str] | None = None) -> str:
    """Print `expr` in the signature language, renaming tensors and variables via `names`.

    Every operator application is parenthesized and floats print as `repr(float)`, so the
    text parses back (`compiler.parse.parse`) to an equal expression in the same scope.
    """
    names = names or {}
    if isinstance(expr, Const):
        if isinstance(expr.value, bool):
            return str(expr.value)
        text = repr(float(expr.value)) if isinstance(expr.value, float) else str(expr.value)
        return f"({text})" if text.startswith("-") else text
    if isinstance(expr, Var):
        return names.get(expr.name, expr.name)
    if isinstance(expr, Load):
        indices = ", ".join(to_text(i, names) for i in expr.indices)
        return f"{names.get(expr.tensor, expr.tensor)}[{indices}]"
    if isinstance(expr, Cast):
        return f"{expr.dtype}({to_text(expr.x, names)})"
    if isinstance(expr, Unary):
        return f"({_UNARY_TEXT[expr.op]}{to_text(expr.x, names)})"
    if isinstance(expr, Binary):
        return f"({to_text(expr.a, names)} {expr.op} {to_text(expr.b, names)})"
    assert isinstance(expr, Call)
    return f"{expr.fn}({', '.join(to_text(a, names) for a in expr.args)})"


def canonical_form(program: Program) -> dict[str, Any]:
    """A JSON-able description of `program` with every name replaced by its position."""
    names = {s.name: f"s{n}" for n, s in enumerate(program.symbols)}
    names.update({t.name: f"in{n}" for n, t in enumerate(program.inputs)})
    names.update({c.name: f"c{n}" for n, c in enumerate(program.computes)})

    def shape(extents: tuple[Extent, ...]) -> list[Extent]:
        return [e if isinstance(e, int) else names[e] for e in extents]

    computes = []
    for c in program.computes:
        local = dict(names)
        local.update({a: f"a{n}" for n, a in enumerate(c.axes)})
        local.update({r.name: f"r{n}" for n, r in enumerate(c.reduce_axes)})
        reduce = None
        if c.reduce_op is not None:
            reduce = {"op": c.reduce_op, "extents": shape(tuple(r.extent for r in c.reduce_axes))}
        entry = {
            "shape": shape(c.shape),
            "dtype": c.dtype,
            "reduce": reduce,
            "expr": to_text(c.body, local),
        }
        if c.term_dtype is not None:
            entry["terms"] = c.term_dtype
        computes.append(entry)
    return {
        "version": 1,
        "symbols": [[s.min, s.max] for s in program.symbols],
        "inputs": [{"shape": shape(t.shape), "dtype": t.dtype} for t in program.inputs],
        "computes": computes,
        "outputs": [names[o] for o in program.outputs],
    }


def workload_key(program: Program) -> str:
    """sha256 hex of the canonical form's compact, key-sorted JSON; the task name is not in it."""
    text = json.dumps(canonical_form(program), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()
