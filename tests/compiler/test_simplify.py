"""Index simplification: C's value of every index is kept, and tiled int4 reads fold."""

from __future__ import annotations

import json
import re
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from compiler.dtypes import INDEX
from compiler.ir import Binary, Call, Const, Expr, Var
from compiler.loop import Assign, Buffer, Decl, For, Function, Seq, Store, const, stmts, var
from compiler.lower import lower
from compiler.program import load
from compiler.simplify import simplify
from compiler.space import space_for
from schemas.signature import TaskSignature
from schemas.target import Target

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
NAMES = ("i", "j", "n", "reused")  # loop variables, a symbol, a reassigned local


def c_value(expr: Expr, env: dict[str, int]) -> int:
    """The value C computes (division and remainder truncate toward zero)."""
    if isinstance(expr, Const):
        return int(expr.value)
    if isinstance(expr, Var):
        return env[expr.name]
    if isinstance(expr, Call):
        values = [c_value(a, env) for a in expr.args]
        return min(values) if expr.fn == "min" else max(values)
    assert isinstance(expr, Binary)
    a, b = c_value(expr.a, env), c_value(expr.b, env)
    if expr.op in ("//", "%"):
        quotient = abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)
        return quotient if expr.op == "//" else a - quotient * b
    return {"+": a + b, "-": a - b, "*": a * b}[expr.op]


def expressions() -> st.SearchStrategy[Expr]:
    leaves = st.one_of(
        st.sampled_from([Var(n, INDEX) for n in NAMES]),
        st.integers(-9, 40).map(lambda v: Const(v, INDEX)),
    )

    def grow(children: st.SearchStrategy[Expr]) -> st.SearchStrategy[Expr]:
        divisor = st.sampled_from([1, 2, 4, 8, 3, 32]).map(lambda v: Const(v, INDEX))
        factor = st.sampled_from([4, 8, 16, 32, 6]).map(lambda v: Const(v, INDEX))
        return st.one_of(
            st.builds(  # what tiling makes: `outer * factor + inner`
                lambda a, f, b: Binary("+", Binary("*", a, f, INDEX), b, INDEX),
                children,
                factor,
                children,
            ),
            st.builds(Binary, st.sampled_from(["+", "-", "*"]), children, children, st.just(INDEX)),
            st.builds(Binary, st.sampled_from(["//", "%"]), children, divisor, st.just(INDEX)),
            st.builds(lambda a, b: Call("min", (a, b), INDEX), children, children),
        )

    return st.recursive(leaves, grow, max_leaves=12)


def function_of(expr: Expr) -> Function:
    """`out[0] = expr` under loops binding i and j, symbol n, and a local that is reassigned
    (so cannot be assumed non-negative)."""
    body = Seq(
        (
            Decl("reused", INDEX, init=const(3)),
            Assign("reused", Binary("-", var("reused"), const(5), INDEX)),
            For("i", const(4), For("j", const(4), Store("out", (const(0),), expr))),
        )
    )
    return Function("f", (), (Buffer("out", INDEX, (1,)),), ("n",), body)


def stored(fn: Function) -> Expr:
    (store,) = (s for s in stmts(fn.body) if isinstance(s, Store))
    return store.value


@settings(max_examples=400, deadline=None)
@given(
    expressions(),
    st.integers(0, 70),
    st.integers(0, 70),
    st.integers(0, 70),
    st.integers(-12, 12),
)
def test_c_value_is_kept_for_non_negative_variables(
    expr: Expr, i: int, j: int, n: int, reused: int
) -> None:
    env = {"i": i, "j": j, "n": n, "reused": reused}
    try:
        before = c_value(expr, env)
    except ZeroDivisionError:
        return
    assert c_value(stored(simplify(function_of(expr))), env) == before


def test_division_splits_over_a_sum_of_multiples() -> None:
    i, j = var("i"), var("j")
    tiled = Binary("+", Binary("*", Binary("+", i, j, INDEX), const(32), INDEX), const(3), INDEX)
    assert stored(simplify(function_of(Binary("//", tiled, const(8), INDEX)))) == Binary(
        "*", Binary("+", i, j, INDEX), const(4), INDEX
    )
    assert stored(simplify(function_of(Binary("%", tiled, const(8), INDEX)))) == const(3)


def test_a_term_that_may_be_negative_blocks_the_split() -> None:
    maybe_negative = Binary("+", Binary("*", var("i"), const(8), INDEX), var("reused"), INDEX)
    expr = Binary("//", maybe_negative, const(8), INDEX)
    assert stored(simplify(function_of(expr))) == expr


def test_int4_gemv_reads_each_weight_word_and_scale_once_and_shifts_by_constants() -> None:
    """The GEMV seed of the int4 example: a lane's run of 32 k covers 4 weight words and one
    scale per row, and every nibble's shift is a literal."""
    text = (EXAMPLES / "int4_matmul.json").read_text()
    program = load(TaskSignature.model_validate(json.loads(text)))
    target = Target(kind="cuda", arch="sm_90")
    gemv = next(c for c in space_for(program, target).seeds() if c["s0.mode"] == "gemv")
    rows, run = int(gemv["s0.gemv_cols"]), int(gemv["s0.gemv_vec"])
    source = lower(program, target, gemv).source
    words = set(re.findall(r"W_\[[^\]]*\]", source))
    scales = set(re.findall(r"scales_\[[^\]]*\]", source))
    assert len(words) == rows * run // 8
    assert len(scales) == rows * run // 32
    shifts = re.findall(r">> \(\(uint32_t\)\(([^()]*)\)\)", source)
    assert shifts and all(s.isdigit() for s in shifts)
