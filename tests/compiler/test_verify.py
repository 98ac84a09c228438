"""Output comparison: shapes and dtypes first, dtype-aware tolerances, NaN and infinity
handling, exact integers."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

from tunehub.compiler.verify import compare, rtol
from tunehub.runtime.arguments import numpy_dtype


def _values(n: int = 1000, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1.0, 1.0, n)


def test_identical_outputs_match() -> None:
    x = _values().astype(np.float32)
    result = compare(x, x.copy(), "float32")
    assert result.ok and result.mismatches == 0
    assert result.max_abs_err == 0.0 and result.max_rel_err == 0.0
    assert "all 1000 elements match" in result.message


def test_float32_accepts_reordering_noise_but_not_real_errors() -> None:
    x = _values().astype(np.float32)
    noisy = (x * (1 + 1e-6)).astype(np.float32)
    assert compare(x, noisy, "float32").ok
    wrong = x.copy()
    wrong[[3, 7]] += 0.01
    result = compare(x, wrong, "float32")
    assert not result.ok and result.mismatches == 2
    assert result.max_abs_err == pytest.approx(0.01, rel=1e-3)
    assert "first at [3]" in result.message
    assert repr(float(x[3])) in result.message


def test_near_zero_values_get_an_absolute_tolerance_from_the_typical_magnitude() -> None:
    expected = np.array([100.0, -100.0, 0.0, 1e-7], np.float32)
    actual = np.array([100.0, -100.0, 1e-4, -1e-4], np.float32)  # cancellation noise
    assert compare(expected, actual, "float32").ok
    assert not compare(expected, actual + np.float32(0.1), "float32").ok


def test_long_reductions_loosen_float32_gently_but_not_halves() -> None:
    assert rtol("float32", 256) == rtol("float32", 1) == 1e-4
    assert rtol("float32", 4096) == pytest.approx(4e-4)
    assert rtol("float16", 4096) == rtol("float16") == 1e-2
    x = np.full(10, 1.0, np.float32)
    off = x * np.float32(1 + 2e-4)
    assert not compare(x, off, "float32").ok
    assert compare(x, off, "float32", reduce_extent=4096).ok


@pytest.mark.parametrize(
    ("dtype", "numpy_dtype", "ulp"),
    [("float16", np.float16, 2**-10), ("bfloat16", ml_dtypes.bfloat16, 2**-7)],
)
def test_half_outputs_tolerate_rounding_steps(dtype: str, numpy_dtype: type, ulp: float) -> None:
    x: np.ndarray = (1.0 + np.arange(8) / 8).astype(numpy_dtype)
    one_step: np.ndarray = (x.astype(np.float64) * (1 + 2 * ulp)).astype(numpy_dtype)
    assert compare(x, one_step, dtype).ok
    assert not compare(x, (x.astype(np.float64) * 1.1).astype(numpy_dtype), dtype).ok


def test_nan_must_appear_exactly_where_expected() -> None:
    expected = np.array([1.0, np.nan, 3.0], np.float32)
    assert compare(expected, expected.copy(), "float32").ok
    unwritten = np.array([1.0, np.nan, np.nan], np.float32)
    result = compare(expected, unwritten, "float32")
    assert not result.ok and result.mismatches == 1
    assert math.isinf(result.max_abs_err)
    assert "expected 3.0, got nan" in result.message
    assert not compare(expected, np.array([1.0, 2.0, 3.0], np.float32), "float32").ok


def test_infinities_must_match() -> None:
    expected = np.array([np.inf, -np.inf, 1.0])
    assert compare(expected, expected.copy(), "float64").ok
    assert not compare(expected, np.array([np.inf, np.inf, 1.0]), "float64").ok
    assert not compare(expected, np.array([1e300, -np.inf, 1.0]), "float64").ok


def test_float64_is_tight() -> None:
    x = _values()
    assert compare(x, x * (1 + 1e-12), "float64").ok
    assert not compare(x, x * (1 + 1e-6), "float64").ok


@pytest.mark.parametrize("dtype", ["int8", "int32", "int64", "uint8", "uint32"])
def test_integers_are_exact(dtype: str) -> None:
    info = np.iinfo(dtype)
    expected = np.array([info.min, 0, info.max], dtype)
    assert compare(expected, expected.copy(), dtype).ok
    actual = expected.copy()
    actual[2] -= 1
    result = compare(expected, actual, dtype)
    assert not result.ok and result.mismatches == 1 and result.max_abs_err == 1.0
    assert "first at [2]" in result.message


def test_bools_are_compared_byte_for_byte() -> None:
    expected = np.array([True, False, True])
    assert compare(expected, expected.copy(), "bool").ok
    assert not compare(expected, ~expected, "bool").ok
    poisoned = expected.copy()
    poisoned.view(np.uint8)[0] = 0xA5  # numpy would read this byte as True
    result = compare(expected, poisoned, "bool")
    assert not result.ok and result.mismatches == 1


def test_shape_mismatch_fails() -> None:
    result = compare(np.zeros((2, 3)), np.zeros((3, 2)), "float32")
    assert not result.ok and result.mismatches == 6
    assert "shape [3, 2]" in result.message


def test_equal_values_in_a_shape_that_differs_in_unit_axes_fail() -> None:
    """`[1, 64]` where `[1, 1, 64, 1]` is wanted broadcasts the other way downstream."""
    values = np.arange(64, dtype=np.float32)
    result = compare(values.reshape(1, 1, 64, 1), values.reshape(1, 64), "float32")
    assert not result.ok and "shape [1, 64] where [1, 1, 64, 1] was expected" in result.message


@pytest.mark.parametrize(
    ("dtype", "actual"), [("float32", np.float64), ("float16", np.float32), ("int32", np.int64)]
)
def test_an_output_of_another_dtype_fails(dtype: str, actual: type) -> None:
    expected = np.ones(4, dtype=numpy_dtype(dtype))
    result = compare(expected, expected.astype(actual), dtype)
    assert not result.ok and f"dtype {np.dtype(actual)} where {dtype}" in result.message


def test_scalars_and_empty_arrays() -> None:
    assert compare(np.array(1.5, np.float32), np.array(1.5, np.float32), "float32").ok
    assert not compare(np.array(1, np.int32), np.array(2, np.int32), "int32").ok
    assert compare(np.zeros((0, 4), np.float32), np.zeros((0, 4), np.float32), "float32").ok
