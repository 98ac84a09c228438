"""Index simplification: C's value of every index is kept, and tiled int4 reads fold."""

from __future__ import annotations

import json
import re
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from tunehub.compiler.dtypes import INDEX
from tunehub.compiler.ir import Binary, Call, Const, Expr, Var
from tunehub.compiler.loop import Assign, Buffer, Decl, For, Function, Seq, Store, const, stmts, var
from tunehub.compiler.lower import lower
from tunehub.compiler.program import load
from tunehub.compiler.simplify import simplify
from tunehub.compiler.space import space_for
from tunehub.compiler.space.space import Config
from tunehub.schemas.signature import TaskSignature
from tunehub.schemas.target import Target

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


def tiled() -> st.SearchStrategy[Expr]:
    """Index shapes that tiling makes: `(sum of (v % c or v // c) * f, plus a constant) op d`,
    nested once more at times, with powers of two where the rules apply."""
    power = st.sampled_from([1, 2, 4, 8, 16, 32, 64])
    atom = st.one_of(
        st.sampled_from([Var(n, INDEX) for n in NAMES]),
        st.builds(
            lambda v, op, c: Binary(op, v, Const(c, INDEX), INDEX),
            st.sampled_from([Var(n, INDEX) for n in NAMES]),
            st.sampled_from(["%", "//"]),
            power,
        ),
    )
    term = st.builds(
        lambda a, f: a if f == 1 else Binary("*", a, Const(f, INDEX), INDEX), atom, power
    )

    def total(terms: list[Expr], constant: int) -> Expr:
        out = terms[0]
        for t in [*terms[1:], *([Const(constant, INDEX)] if constant else [])]:
            out = Binary("+", out, t, INDEX)
        return out

    constant = st.sampled_from([0, 0, 0, 1, 3, 7, 8, 12, 16, 31, 32, 40])
    summed = st.builds(total, st.lists(term, min_size=1, max_size=3), constant)
    divided = st.builds(
        lambda x, op, d: Binary(op, x, Const(d, INDEX), INDEX),
        summed,
        st.sampled_from(["//", "%"]),
        power,
    )
    return st.one_of(
        divided,
        st.builds(
            lambda x, op, d: Binary(op, x, Const(d, INDEX), INDEX),
            divided,
            st.sampled_from(["//", "%"]),
            power,
        ),
    )


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


@settings(max_examples=1000, deadline=None)
@given(
    st.one_of(expressions(), tiled()),
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


def test_every_small_tiled_form_keeps_its_value() -> None:
    """Exhaustively: `(x op1 c) * f + r`, and `i * f + j * g + r`, each under `// d` and
    `% d` and once more under `// 2` and `% 4`, for powers of two (and 6 and 12) and values
    up to 80."""
    powers = (1, 2, 4, 8, 16, 32, 64, 6, 12)
    i, j = var("i"), var("j")
    forms: list[Expr] = []
    for f in powers:
        for r in (0, 3, 7, 8, 16, 40):
            for c in powers:
                for op in ("%", "//"):
                    atom = Binary(op, i, const(c), INDEX)
                    forms.append(Binary("+", Binary("*", atom, const(f), INDEX), const(r), INDEX))
            for g in (1, 8, 32):
                pair = Binary(
                    "+", Binary("*", i, const(f), INDEX), Binary("*", j, const(g), INDEX), INDEX
                )
                forms.append(Binary("+", pair, const(r), INDEX))
    for form in forms:
        for d in powers:
            for op in ("//", "%"):
                once = Binary(op, form, const(d), INDEX)
                for expr in (
                    once,
                    Binary("//", once, const(2), INDEX),
                    Binary("%", once, const(4), INDEX),
                ):
                    done = stored(simplify(function_of(expr)))
                    for x in range(0, 80, 5):
                        env = {"i": x, "j": 79 - x, "n": 0, "reused": 0}
                        assert c_value(done, env) == c_value(expr, env), (expr, done, env)


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


def int4_seed(mode: str) -> tuple[Config, str]:
    """The first seed of `mode` for the int4 example on sm_90, and its CUDA source."""
    text = (EXAMPLES / "int4_matmul.json").read_text()
    program = load(TaskSignature.model_validate(json.loads(text)))
    target = Target(kind="cuda", arch="sm_90")
    config = next(c for c in space_for(program, target).seeds() if c["s0.mode"] == mode)
    return config, lower(program, target, config).source


def test_int4_gemv_reads_each_run_in_vector_loads_and_shifts_by_constants() -> None:
    """The GEMV seed of the int4 example: a lane's run of `vec` k reads its `vec / 8` weight
    words of a column in one vector load, its X in 16-byte loads of 8, and per column the
    scales of the 32-k groups it meets once; every nibble's shift is a literal."""
    gemv, source = int4_seed("gemv")
    cols, run = int(gemv["s0.gemv_cols"]), int(gemv["s0.gemv_vec"])
    words = set(re.findall(r"vload_u32x(\d+)\(&W_\[[^\]]*\]", source))
    assert len(re.findall(r"vload_u32x\d+\(&W_", source)) == cols
    assert words == {str(run // 8)}
    assert len(re.findall(r"vload_f16x8\(&X_", source)) == run // 8
    assert "W_[" not in source.replace("&W_[", "")
    scales = set(re.findall(r"scales_\[[^\]]*\]", source))
    assert len(scales) == cols * -(-run // 32)
    shifts = re.findall(r">> \(\(uint32_t\)\(([^()]*)\)\)", source)
    assert shifts and all(s.isdigit() for s in shifts)


def test_int4_tile_loads_dequantize_a_word_and_a_scale_per_pass() -> None:
    """The wgmma seed stages the int4 side in runs of 8 k: each pass of a tile-loading loop
    reads one weight word and one scale, and stores its 8 values in one 16-byte store."""
    _, source = int4_seed("wgmma")
    lines = source.splitlines()
    passes = 0
    for n, line in enumerate(lines):
        if not re.match(r"\s*for \(int64_t n\d* = 0", line):
            continue
        indent = line[: len(line) - len(line.lstrip())]
        body = "\n".join(lines[n + 1 : lines.index(indent + "}", n)])
        if "W_[" in body:
            passes += 1
            assert len(set(re.findall(r"W_\[[^\]]*\]", body))) == 1
            assert len(set(re.findall(r"scales_\[[^\]]*\]", body))) == 1
            assert body.count("Bs[") == 1 and "vstore_f16x8(&Bs[" in body
    assert passes
