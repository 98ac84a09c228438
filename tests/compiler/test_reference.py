"""The reference evaluator: C semantics where numpy differs, the float16 rule, guarded reads,
chunking, and random programs from `tests.strategies`."""

from __future__ import annotations

import math
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.strategies import signatures, symbol_values
from tunehub.compiler import reference
from tunehub.compiler.errors import SignatureError
from tunehub.compiler.inputs import random_inputs
from tunehub.compiler.ir import Compute, Const, Load, Program, Tensor
from tunehub.compiler.program import load
from tunehub.compiler.verify import compare


def _signature(
    expr: str,
    dtype: str,
    arrays: dict[str, np.ndarray],
    *,
    reduce: dict[str, Any] | None = None,
    extent: int | None = None,
) -> dict[str, Any]:
    """One compute `out[i]` (or a scalar-per-row reduce) over 1-D inputs."""
    n = extent if extent is not None else len(next(iter(arrays.values())))
    compute: dict[str, Any] = {"name": "out", "axes": ["i"], "shape": [n], "dtype": dtype}
    if reduce is not None:
        compute["reduce"] = reduce
    compute["expr"] = expr
    return {
        "version": 1,
        "name": "t",
        "inputs": [
            {"name": name, "shape": list(a.shape), "dtype": str(a.dtype)}
            for name, a in arrays.items()
        ],
        "computes": [compute],
        "outputs": ["out"],
    }


def _eval(expr: str, dtype: str, **arrays: np.ndarray) -> np.ndarray:
    program = load(_signature(expr, dtype, arrays))
    out = reference.evaluate(program, arrays, {})["out"]
    assert out.dtype == np.dtype(ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype)
    return out


def test_integer_division_truncates_toward_zero() -> None:
    a = np.array([-7, 7, -7, 7, 0], np.int32)
    np.testing.assert_array_equal(_eval("a[i] // 2", "int32", a=a), [-3, 3, -3, 3, 0])
    np.testing.assert_array_equal(_eval("a[i] % 2", "int32", a=a), [-1, 1, -1, 1, 0])
    np.testing.assert_array_equal(_eval("a[i] // -2", "int32", a=a), [3, -3, 3, -3, 0])
    np.testing.assert_array_equal(_eval("a[i] % -2", "int32", a=a), [-1, 1, -1, 1, 0])


def test_float_floor_division_truncates_and_modulo_is_fmod() -> None:
    x = np.array([-7.5, 7.5, -1.0], np.float32)
    np.testing.assert_array_equal(_eval("x[i] // 2.0", "float32", x=x), [-3.0, 3.0, -0.0])
    np.testing.assert_array_equal(_eval("x[i] % 2.0", "float32", x=x), [-1.5, 1.5, -1.0])


def test_integers_wrap_on_overflow() -> None:
    a = np.array([100, -100], np.int8)
    np.testing.assert_array_equal(_eval("a[i] + 100", "int8", a=a), [-56, 0])
    u = np.array([0, 255], np.uint8)
    np.testing.assert_array_equal(_eval("u[i] - 1", "uint8", u=u), [255, 254])
    np.testing.assert_array_equal(_eval("u[i] + 1", "uint8", u=u), [1, 0])


def test_shifts_extract_nibbles_and_shift_signed_values_arithmetically() -> None:
    w = np.array([0xF1234567, 0x89ABCDEF], np.uint32)
    np.testing.assert_array_equal(_eval("(w[i] >> 28) & 15", "uint32", w=w), [0xF, 0x8])
    np.testing.assert_array_equal(_eval("(w[i] >> (4 * i)) & 15", "uint32", w=w), [7, 0xE])
    a = np.array([-16, 16], np.int32)
    np.testing.assert_array_equal(_eval("a[i] >> 2", "int32", a=a), [-4, 4])
    np.testing.assert_array_equal(_eval("a[i] << 3", "int32", a=a), [-128, 128])


def test_casts_follow_c() -> None:
    x = np.array([-2.7, 2.7, 0.0, 0.5], np.float32)
    np.testing.assert_array_equal(_eval("int32(x[i])", "int32", x=x), [-2, 2, 0, 0])
    np.testing.assert_array_equal(_eval("bool(x[i])", "bool", x=x), [True, True, False, True])
    n = np.array([-1, 0, 3], np.int32)
    np.testing.assert_array_equal(_eval("uint8(n[i])", "uint8", n=n), [255, 0, 3])


def test_half_casts_round_to_nearest_even() -> None:
    # Halfway cases: 1 + 2^-11 lies between 1 and 1 + 2^-10 (ties to the even 1.0),
    # 1 + 3 * 2^-11 between 1 + 2^-10 and 1 + 2^-9 (ties to the even 1 + 2^-9).
    x = np.array([1 + 2**-11, 1 + 3 * 2**-11], np.float32)
    np.testing.assert_array_equal(
        _eval("float16(x[i])", "float16", x=x).astype(np.float32), [1.0, 1 + 2**-9]
    )
    y = np.array([1 + 2**-8, 1 + 3 * 2**-8], np.float32)
    np.testing.assert_array_equal(
        _eval("bfloat16(y[i])", "bfloat16", y=y).astype(np.float32), [1.0, 1 + 2**-6]
    )


def test_half_arithmetic_is_float32_rounded_only_at_casts_and_stores() -> None:
    x = np.array([2048.0], np.float16)  # float16 spacing at 2048 is 2
    assert _eval("x[i] + 1.0 - x[i]", "float16", x=x)[0] == 1.0
    assert _eval("float16(x[i] + 1.0) - x[i]", "float16", x=x)[0] == 0.0


def test_half_reduce_accumulates_in_float32() -> None:
    x = np.array([2048.0, 1.0, 1.0, 1.0, 1.0], np.float16)
    sig = _signature("x[k]", "float16", {"x": x}, reduce={"op": "sum", "axes": {"k": 5}}, extent=1)
    out = reference.evaluate(load(sig), {"x": x}, {})["out"]
    assert out.dtype == np.float16
    assert out[0] == 2052.0  # float16 accumulation would stay at 2048


@pytest.mark.parametrize("version", [1, 2])
def test_a_half_sum_of_products_rounds_its_terms_in_version_1_only(version: int) -> None:
    """(1 + 2^-10)^2 = 1 + 2^-9 + 2^-20, and float16 keeps 1 + 2^-9 of it; the second term
    cancels that. Version 1 rounds each product (0 is left), version 2 adds them exact."""
    x = np.array([1 + 2**-10, 1 + 2**-9], np.float16)
    y = np.array([1 + 2**-10, -1], np.float16)
    sig = _signature(
        "x[k] * y[k]", "float16", {"x": x, "y": y}, reduce={"op": "sum", "axes": {"k": 2}}, extent=1
    )
    program = load({**sig, "version": version})
    assert program.computes[0].term == ("float16" if version == 1 else "float32")
    expected = 0.0 if version == 1 else 2**-20
    for fast in (True, False):
        out = reference.evaluate(program, {"x": x, "y": y}, {}, fast_contractions=fast)["out"]
        assert out.dtype == np.float16 and out[0] == expected


def test_a_version_2_half_sum_of_two_factors_takes_the_exact_fast_path() -> None:
    """Its terms are float32 products, as in a float32 sum: the matrix-product path is exact
    for it, and agrees with the elementwise definition."""
    half = {"dtype": "float16"}
    sig = {
        **MATMUL,
        "version": 2,
        "inputs": [{**t, **half} for t in MATMUL["inputs"]],
        "computes": [{**MATMUL["computes"][0], **half}],
    }
    program = load(sig)
    assert reference.plan_contraction(program.computes[0], {"i": 37, "j": 29, "k": 100})
    x = random_inputs(program, {}, seed=1)
    fast = reference.evaluate(program, x, {})["C"].astype(np.float32)
    plain = reference.evaluate(program, x, {}, fast_contractions=False)["C"].astype(np.float32)
    expected = (x["A"].astype(np.float32) @ x["B"].astype(np.float32)).astype(np.float16)
    np.testing.assert_allclose(fast, expected.astype(np.float32), rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(plain, fast, rtol=1e-3, atol=1e-3)


def test_float32_math_stays_in_float32() -> None:
    x = np.array([1.0], np.float32)
    assert _eval("x[i] + 0.00000001 - x[i]", "float32", x=x)[0] == 0.0
    d = x.astype(np.float64)
    assert _eval("d[i] + 0.00000001 - d[i]", "float64", d=d)[0] == pytest.approx(1e-8)


def test_math_functions_match_libm() -> None:
    x = np.linspace(-3.0, 3.0, 101)
    erf = np.array([math.erf(v) for v in x])
    np.testing.assert_allclose(_eval("erf(x[i])", "float64", x=x), erf, rtol=1e-15, atol=0)
    np.testing.assert_allclose(
        _eval("erf(x[i])", "float32", x=x.astype(np.float32)), erf, rtol=1e-6, atol=1e-7
    )
    sigmoid = 1 / (1 + np.exp(-x))
    np.testing.assert_allclose(_eval("sigmoid(x[i])", "float64", x=x), sigmoid, rtol=1e-15)
    p = np.abs(x) + 1.0
    np.testing.assert_allclose(_eval("rsqrt(p[i])", "float64", p=p), p**-0.5, rtol=1e-15)
    np.testing.assert_allclose(_eval("p[i] ** 1.5", "float64", p=p), p**1.5, rtol=1e-15)


def test_comparisons_and_logic_make_bools() -> None:
    x = np.array([-1.0, 0.0, 2.0], np.float32)
    got = _eval("x[i] > 0.0 or not (x[i] < 0.0 and i == 0)", "bool", x=x)
    np.testing.assert_array_equal(got, [False, True, True])


def test_where_clips_reads_of_the_branch_it_discards() -> None:
    a = np.array([1.0, 2.0, 3.0], np.float32)
    got = _eval("where(i >= 1, a[i - 1], 0.0) + where(i + 1 < 3, a[i + 1], 10.0)", "float32", a=a)
    np.testing.assert_array_equal(got, [2.0, 4.0, 12.0])


def test_unguarded_out_of_bounds_read_is_an_error() -> None:
    # compiler.program rejects such a read; a hand-built program must still not be read
    # out of bounds silently.
    body = Load("a", (Const(3, "int64"),), "float32")
    program = Program(
        "oob",
        (),
        (Tensor("a", (3,), "float32"),),
        (Compute("out", ("i",), (2,), "float32", body),),
        ("out",),
    )
    with pytest.raises(SignatureError, match="outside its bounds"):
        reference.evaluate(program, {"a": np.zeros(3, np.float32)}, {})


@pytest.mark.parametrize(
    ("op", "values", "expected"),
    [
        ("max", [-5, -3, -9], -3),
        ("min", [5, 3, 9], 3),
        ("prod", [2, -3, 4], -24),
        ("sum", [100, 100, 0], -56),  # int8 accumulation wraps
    ],
)
def test_integer_reductions(op: str, values: list[int], expected: int) -> None:
    x = np.array(values, np.int8)
    sig = _signature("x[k]", "int8", {"x": x}, reduce={"op": op, "axes": {"k": 3}}, extent=1)
    assert reference.evaluate(load(sig), {"x": x}, {})["out"][0] == expected


def test_intermediates_feed_later_computes_and_only_outputs_are_returned() -> None:
    sig = {
        "version": 1,
        "name": "chain",
        "symbols": {"N": {"min": 1, "max": 8}},
        "inputs": [{"name": "x", "shape": ["N", 3], "dtype": "float32"}],
        "computes": [
            {"name": "s", "axes": ["i"], "shape": ["N"], "dtype": "float32",
             "reduce": {"op": "sum", "axes": {"k": 3}}, "expr": "x[i, k]"},
            {"name": "y", "axes": ["i", "j"], "shape": ["N", 3], "dtype": "bfloat16",
             "expr": "x[i, j] - s[i] / 3.0"},
        ],
        "outputs": ["y"],
    }  # fmt: skip
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    out = reference.evaluate(load(sig), {"x": x}, {"N": 4})
    assert list(out) == ["y"]
    assert out["y"].dtype == np.dtype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(out["y"].astype(np.float32), np.tile([-1.0, 0.0, 1.0], (4, 1)))


def test_bad_symbols_and_inputs_are_rejected() -> None:
    a = np.zeros(3, np.float32)
    sig = _signature("a[i]", "float32", {"a": a})
    sig["symbols"] = {"N": {"min": 2, "max": 4}}
    program = load(sig)
    with pytest.raises(ValueError, match="no value for symbol"):
        reference.evaluate(program, {"a": a}, {})
    with pytest.raises(ValueError, match="outside"):
        reference.evaluate(program, {"a": a}, {"N": 5})
    with pytest.raises(ValueError, match="must be float32"):
        reference.evaluate(program, {"a": a.astype(np.float64)}, {"N": 2})
    with pytest.raises(ValueError, match="no array"):
        reference.evaluate(program, {}, {"N": 2})


MATMUL: dict[str, Any] = {
    "version": 1,
    "name": "mm",
    "inputs": [
        {"name": "A", "shape": [37, 100], "dtype": "float32"},
        {"name": "B", "shape": [100, 29], "dtype": "float32"},
    ],
    "computes": [
        {"name": "C", "axes": ["i", "j"], "shape": [37, 29], "dtype": "float32",
         "reduce": {"op": "sum", "axes": {"k": 100}}, "expr": "A[i, k] * B[k, j]"},
    ],
    "outputs": ["C"],
}  # fmt: skip


@pytest.mark.parametrize("max_elements", [16, 1000, 5000, reference.MAX_ELEMENTS])
def test_chunked_evaluation_matches_matmul(max_elements: int) -> None:
    """Blocks split the spatial axes, and below one row's reduction also the reduce axis."""
    program = load(MATMUL)
    x = random_inputs(program, {}, seed=1)
    got = reference.evaluate(program, x, {}, max_elements=max_elements)["C"]
    expected = x["A"].astype(np.float64) @ x["B"]
    result = compare(expected.astype(np.float32), got, "float32", reduce_extent=100)
    assert result.ok, result.message


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_programs_evaluate_independently_of_chunking(data: st.DataObject) -> None:
    signature = data.draw(signatures())
    symbols = data.draw(symbol_values(signature))
    program = load(signature)
    inputs = random_inputs(program, symbols, seed=0)
    whole = reference.evaluate(program, inputs, symbols)
    pieces = reference.evaluate(program, inputs, symbols, max_elements=7)
    for name in program.outputs:
        compute = program.compute(name)
        assert whole[name].shape == program.shape_of(name, symbols)
        if compute.dtype != "int32":
            assert np.isfinite(whole[name].astype(np.float64)).all(), signature
        extent = math.prod(program.extent(r.extent, symbols) for r in compute.reduce_axes)
        result = compare(whole[name], pieces[name], compute.dtype, reduce_extent=extent)
        assert result.ok, result.message
