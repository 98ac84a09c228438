"""Padding guards as loop ranges (`compiler.schedule.guards`) and adjacent axes merged in a
flat index (`flat_index`): both exact for every value, checked by evaluating as C does."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.compiler.c_ints import c_value
from tunehub.compiler.dtypes import INDEX
from tunehub.compiler.ir import Binary, Call, Const, Expr, Load, Var, walk
from tunehub.compiler.loop import const, flat_index, var
from tunehub.compiler.schedule.guards import linear, split


def _cmp(op: str, a: Expr, b: Expr) -> Expr:
    return Binary(op, a, b, "bool")


def _and(*tests: Expr) -> Expr:
    out = tests[0]
    for t in tests[1:]:
        out = Binary("and", out, t, "bool")
    return out


def _plus(a: Expr, n: int) -> Expr:
    return Binary("+", a, const(n), INDEX)


X, R, Y = var("x"), var("r"), var("y")


def test_linear_reads_coefficients_and_refuses_products_of_the_variable() -> None:
    three_x = Binary("*", Binary("-", X, R, INDEX), const(3), INDEX)
    coefficient, rest = linear(three_x, "x")  # type: ignore[misc]
    assert coefficient == 3 and c_value(rest, {"r": 5}) == -15
    assert linear(Binary("*", X, X, INDEX), "x") is None
    assert linear(Binary("//", X, const(2), INDEX), "x") is None
    assert linear(R, "x") == (0, R)


@st.composite
def _guards(draw: st.DrawFn) -> Expr:
    """A conjunction of comparisons of x (coefficient +-1, 2, or absent) with r and y."""
    tests = []
    for _ in range(draw(st.integers(1, 4))):
        coefficient = draw(st.sampled_from([1, -1, 2, 0]))
        left: Expr = Y if coefficient == 0 else Binary("*", X, const(coefficient), INDEX)
        left = Binary("+", left, R, INDEX) if draw(st.booleans()) else left
        op = draw(st.sampled_from(["<", "<=", ">", ">=", "==", "!="]))
        tests.append(_cmp(op, left, const(draw(st.integers(-6, 30)))))
    return _and(*tests)


@settings(max_examples=200, deadline=None)
@given(_guards(), st.integers(-3, 3), st.integers(-2, 2))
def test_a_split_holds_exactly_where_its_guard_does(guard: Expr, r: int, y: int) -> None:
    value = Call(
        "where", (guard, Load("a", (_plus(X, -1),), "float32"), Const(0.0, "float32")), "float32"
    )
    parts = split(value, "x")
    if parts is None:
        return
    env = {"r": r, "y": y}
    lower, upper = c_value(parts.lower, env), c_value(parts.upper, env)
    for x in range(-10, 40):
        here = {**env, "x": x}
        uniform = parts.uniform is None or bool(c_value(parts.uniform, here))
        inside = lower <= x < upper and uniform
        chosen = parts.inside if inside else parts.outside
        # The chosen form computes what the guarded one does at this x.
        expected_taken = bool(c_value(guard, here))
        if isinstance(chosen, Call):  # the guard reduced to its other tests
            assert inside and bool(c_value(chosen.args[0], here)) == expected_taken
        else:
            assert isinstance(chosen, Load) == expected_taken, (x, chosen)


def test_a_guard_without_linear_tests_is_not_split() -> None:
    guard = _cmp("<", Binary("*", X, X, INDEX), const(9))
    value = Call("where", (guard, Load("a", (X,), "float32"), Const(0.0, "float32")), "float32")
    assert split(value, "x") is None
    assert split(Load("a", (X,), "float32"), "x") is None


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 5), st.integers(1, 5), st.integers(1, 4), st.integers(0, 500))
def test_axes_split_from_one_flat_value_merge_back(m: int, n: int, outer: int, k: int) -> None:
    """`W[f, k // (m n), (k // m) % n, k % m]` is read at `(f * ...) + k`: one flat index, the
    same offset as the row-major one."""
    kv = Var("k")
    indices = (
        Var("f"),
        Binary("//", kv, const(m * n), INDEX),
        Binary("%", Binary("//", kv, const(m), INDEX), const(n), INDEX),
        Binary("%", kv, const(m), INDEX),
    )
    shape = (const(3), const(outer), const(n), const(m))
    flat = flat_index(indices, shape)
    assert not any(isinstance(e, Binary) and e.op in ("//", "%") for e in walk(flat))
    env = {"f": 2, "k": k % (outer * n * m)}
    row_major = ((env["f"] * outer + env["k"] // (m * n)) * n + env["k"] // m % n) * m
    assert c_value(flat, env) == row_major + env["k"] % m


def test_unrelated_axes_stay_apart() -> None:
    indices = (Binary("//", var("k"), const(9), INDEX), Binary("%", var("j"), const(3), INDEX))
    flat = flat_index(indices, (const(4), const(3)))
    assert c_value(flat, {"k": 20, "j": 5}) == (20 // 9) * 3 + 5 % 3
    assert any(isinstance(e, Binary) and e.op == "//" for e in walk(flat))
