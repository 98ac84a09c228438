"""The expression parser: precedence, typing of weak literals, errors, and its limits."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tunehub.compiler import dtypes
from tunehub.compiler.errors import SignatureError
from tunehub.compiler.ir import Binary, Call, Cast, Const, Load, Unary, Var
from tunehub.compiler.parse import MAX_DEPTH, Scope, parse

SCOPE = Scope(
    context="compute 'out'",
    variables=frozenset({"i", "j", "k", "M"}),
    tensors={
        "A": ("float16", 2),
        "X": ("float32", 1),
        "D": ("float64", 1),
        "H": ("bfloat16", 1),
        "N": ("int32", 1),
        "U": ("uint32", 1),
        "Q": ("uint8", 1),
        "L": ("bool", 1),
    },
    hints={"later": "compute 'later' is read before it is defined"},
)

i, j, k = Var("i"), Var("j"), Var("k")


def p(text: str):
    return parse(text, SCOPE)


def x(index=i):
    return Load("X", (index,), "float32")


def error(text: str) -> str:
    with pytest.raises(SignatureError) as info:
        p(text)
    return str(info.value)


# -- precedence ------------------------------------------------------------------------------


def test_multiplication_binds_tighter_than_addition():
    assert p("i + j * k") == Binary("+", i, Binary("*", j, k, "int64"), "int64")
    assert p("(i + j) * k") == Binary("*", Binary("+", i, j, "int64"), k, "int64")


def test_left_associative_subtraction_and_division():
    assert p("i - j - k") == Binary("-", Binary("-", i, j, "int64"), k, "int64")
    assert p("i // j % k") == Binary("%", Binary("//", i, j, "int64"), k, "int64")


def test_power_is_right_associative_and_binds_tighter_than_unary_minus():
    two = Const(2, "int64")
    assert p("-2 ** 2") == Unary("neg", Call("pow", (two, two), "float32"), "float32")
    inner = Call("pow", (j, k), "float32")
    assert p("i ** j ** k") == Call("pow", (i, inner), "float32")
    assert p("X[i] ** -1") == Call("pow", (x(), Const(-1.0, "float32")), "float32")


def test_bitwise_and_shift_precedence_follows_python():
    # | < ^ < & < shifts < +
    expr = p("i | j ^ k & i << j + 1")
    shift = Binary("<<", i, Binary("+", j, Const(1, "int64"), "int64"), "int64")
    band = Binary("&", k, shift, "int64")
    assert expr == Binary("|", i, Binary("^", j, band, "int64"), "int64")


def test_not_is_below_comparison_and_above_and():
    lt = Binary("<", i, j, "bool")
    assert p("not i < j and True") == Binary(
        "and", Unary("not", lt, "bool"), Const(True, "bool"), "bool"
    )
    assert p("i < j or not not (j < k)").op == "or"


def test_comparison_binds_looser_than_bitwise_or():
    assert p("i | j == k") == Binary("==", Binary("|", i, j, "int64"), k, "bool")


def test_literal_forms():
    assert p("1e-5 + X[i]").a == Const(1e-5, "float32")
    assert p(".5 + X[i]").a == Const(0.5, "float32")
    assert p("2. + X[i]").a == Const(2.0, "float32")
    assert p("3E2") == Const(300.0, "float32")
    assert p("True") == Const(True, "bool")


# -- typing --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "literal", "dtype"),
    [
        ("A[i, j] * 2", Const(2.0, "float16"), "float16"),
        ("A[i, j] * 0.5", Const(0.5, "float16"), "float16"),
        ("A[i, j] * -0.5", Const(-0.5, "float16"), "float16"),
        ("Q[i] + 1", Const(1, "uint8"), "uint8"),
        ("U[i] >> 4", Const(4, "uint32"), "uint32"),
        ("L[i] + 1", Const(1, "int64"), "int64"),
        ("i * 0.5", Const(0.5, "float32"), "float32"),
        ("D[i] - 1e-300", Const(1e-300, "float64"), "float64"),
        ("N[i] * 3", Const(3, "int32"), "int32"),
    ],
)
def test_weak_literals_take_the_other_operands_dtype(text, literal, dtype):
    expr = p(text)
    assert expr.b == literal
    assert expr.dtype == dtype


def test_two_literals_default_to_int64_or_float32():
    assert p("1 + 2").dtype == "int64"
    assert p("1 + 2.0") == Binary("+", Const(1, "int64"), Const(2.0, "float32"), "float32")
    assert p("-3") == Const(-3, "int64")


def test_typed_operands_promote_without_cast_nodes():
    expr = p("A[i, j] + X[i]")
    assert expr.dtype == "float32"
    assert expr.a == Load("A", (i, j), "float16")
    assert p("A[i, j] + H[i]").dtype == "float32"
    assert p("N[i] + U[i]").dtype == "int64"
    assert p("Q[i] + N[i]").dtype == "int32"
    assert p("L[i] + Q[i]").dtype == "uint8"


def test_comparisons_and_logic_are_bool():
    assert p("X[i] < 0.5") == Binary("<", x(), Const(0.5, "float32"), "bool")
    assert p("L[i] and i != 0").dtype == "bool"
    assert p("L[i] & L[j]").dtype == "bool"
    assert p("~L[i]") == Unary("invert", Load("L", (i,), "bool"), "bool")


def test_shift_takes_the_left_dtype():
    assert p("Q[i] << N[i]").dtype == "uint8"
    assert p("1 << U[i]").dtype == "uint32"


def test_division_operators():
    assert p("i / 2.0").dtype == "float32"
    assert p("X[i] / 2") == Binary("/", x(), Const(2.0, "float32"), "float32")
    assert p("X[i] // 2.0").dtype == "float32"
    assert p("N[i] % 3").dtype == "int32"


def test_math_functions_on_integers_yield_float32():
    assert p("exp(i)") == Call("exp", (i,), "float32")
    assert p("sqrt(A[i, j])").dtype == "float16"
    assert p("pow(N[i], 2)").dtype == "float32"
    assert p("pow(D[i], 2)").dtype == "float64"
    assert p("abs(N[i])").dtype == "int32"
    assert p("floor(i)") == Call("floor", (i,), "int64")
    assert p("max(N[i], 0)") == Call("max", (Load("N", (i,), "int32"), Const(0, "int32")), "int32")
    assert p("min(A[i, j], 0.0)").dtype == "float16"


def test_where_combines_branches_like_binary_operands():
    expr = p("where(i < j, A[i, j], 0)")
    assert expr == Call(
        "where",
        (Binary("<", i, j, "bool"), Load("A", (i, j), "float16"), Const(0.0, "float16")),
        "float16",
    )
    assert p("where(L[i], 1, 2)").dtype == "int64"
    assert p("where(L[i], A[i, j], X[i])").dtype == "float32"


def test_casts_are_explicit_nodes():
    assert p("float16(X[i])") == Cast("float16", x())
    assert p("uint32(4 * (k % 8))") == Cast(
        "uint32",
        Binary("*", Const(4, "int64"), Binary("%", k, Const(8, "int64"), "int64"), "int64"),
    )
    assert p("bfloat16(1)") == Cast("bfloat16", Const(1, "int64"))


def test_int4_dequant_expression():
    expr = p("float32((U[k // 8] >> uint32(4 * (k % 8))) & 15) - 7.0")
    assert expr.dtype == "float32"
    assert expr.b == Const(7.0, "float32")
    assert expr.a.x.op == "&"
    assert expr.a.x.b == Const(15, "uint32")


def test_read_indices_default_to_int64_and_symbols_are_variables():
    assert p("X[M - 1 - i]").indices[0].dtype == "int64"
    assert p("X[3]").indices == (Const(3, "int64"),)
    assert p("X[N[i]]").indices[0].dtype == "int32"


# -- errors ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("foo(i)", "compute 'out': unknown function 'foo' at column 1"),
        ("i + zz", "compute 'out': unknown name 'zz' at column 5"),
        ("Z[i]", "compute 'out': unknown tensor 'Z' at column 1"),
        ("later[i]", "compute 'out': compute 'later' is read before it is defined at column 1"),
        ("i < j < k", "compute 'out': comparison chains are not allowed at column 7"),
        ("i == j != k", "comparison chains are not allowed at column 8"),
        ("i / 2", "'/' on int64 and int64; use // for integer division at column 3"),
        ("i and L[i]", "'and' needs bool operands, got int64 at column 3"),
        ("L[i] or 1", "'or' needs bool operands, got int64 at column 6"),
        ("not i", "'not' needs a bool operand, got int64 at column 1"),
        ("X[i] & 1", "'&' needs integer or bool operands, got float32 at column 6"),
        ("~X[i]", "'~' needs an integer or bool operand, got float32 at column 1"),
        ("X[i] << 1", "'<<' needs integer operands, got float32 at column 6"),
        ("L[i] >> 1", "'>>' needs integer operands, got bool at column 6"),
        ("L[i] + L[j]", "'+' needs numeric operands, got bool at column 6"),
        ("-L[i]", "unary '-' needs a numeric operand, got bool at column 1"),
        ("exp(L[i])", "'exp' needs numeric arguments, got bool at column 1"),
        ("Q[i] - 300", "integer literal 300 does not fit uint8 at column 8"),
        ("U[i] + -1", "integer literal -1 does not fit uint32 at column 8"),
        ("A[i, j] * 70000", "literal 70000 overflows float16 at column 11"),
        ("1e999", "float literal 1e999 is out of range at column 1"),
        ("99999999999999999999", "integer literal 99999999999999999999 does not fit int64"),
        ("A[i]", "'A' has rank 2 but is read with 1 index at column 1"),
        ("X[i, j]", "'X' has rank 1 but is read with 2 indices at column 1"),
        ("X[0.5]", "index 0 of 'X' must be an integer, got float32 at column 3"),
        ("A[i, L[j]]", "index 1 of 'A' must be an integer, got bool at column 6"),
        ("exp(i, j)", "function 'exp' takes 1 argument, got 2 at column 1"),
        ("max(i)", "function 'max' takes 2 arguments, got 1 at column 1"),
        ("float16(i, j)", "cast 'float16' takes 1 argument, got 2 at column 1"),
        ("where(i, j, k)", "'where' condition must be bool, got int64 at column 7"),
        ("X", "'X' is a tensor; read it as X[...] at column 1"),
        ("X(i)", "'X' is a tensor; read it as X[...] at column 1"),
        ("i[0]", "'i' is not a tensor at column 1"),
        ("i +", "unexpected end of expression at column 4"),
        ("(i + j", "expected ')', found end of expression at column 7"),
        ("i j", "unexpected 'j' at column 3"),
        ("X[i][0]", "unexpected '[' at column 5"),
        ("i $ j", "unexpected character '$' at column 3"),
        ("i + \u0663", "unexpected character '\u0663' at column 5"),
        ("i < not L[i]", "'not' must be parenthesized here at column 5"),
        ("and", "unexpected 'and' at column 1"),
        ("", "unexpected end of expression at column 1"),
    ],
)
def test_errors_name_the_compute_the_problem_and_the_column(text, message):
    assert message in error(text)
    assert error(text).startswith("compute 'out': ")


def test_hundred_thousand_open_parens_fail_fast():
    start = time.perf_counter()
    assert "longer than 4096 characters" in error("(" * 100_000 + "i" + ")" * 100_000)
    assert time.perf_counter() - start < 1.0


@pytest.mark.parametrize(
    "text",
    [
        "(" * 2000 + "i" + ")" * 2000,
        "-" * 4000 + "i",
        "not " * 1000 + "L[i]",
        "X[" * 1000 + "0" + "]" * 1000,
        "exp(" * 800 + "i" + ")" * 800,
        "2 ** " * 800 + "2",
        " + ".join(["i"] * (MAX_DEPTH + 2)),
    ],
)
def test_deep_nesting_is_a_signature_error_not_a_recursion_error(text):
    assert f"expression nesting deeper than {MAX_DEPTH} levels" in error(text)


def test_nesting_up_to_the_limit_parses():
    assert p("(" * (MAX_DEPTH - 1) + "i" + ")" * (MAX_DEPTH - 1)) == i
    assert p(" + ".join(["i"] * (MAX_DEPTH + 1))).dtype == "int64"


TOKENS = ["i", "j", "X", "A", "L", "[", "]", "(", ")", ",", "1", "2.5", "-", "+", "*", "**", "/",
          "//", "<", "==", "and", "not", "~", "&", "<<", "where", "exp", "max", "float16", "True",
          " ", "$", ".", "1e"]  # fmt: skip


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from(TOKENS), max_size=40))
def test_any_token_soup_parses_or_raises_signature_error(tokens):
    try:
        expr = p(" ".join(tokens))
    except SignatureError as exc:
        assert str(exc).startswith("compute 'out': ")
        assert "\n" not in str(exc)
    else:
        assert expr.dtype in dtypes.ALL
