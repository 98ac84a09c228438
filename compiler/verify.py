"""Is a kernel's output right? A dtype-aware comparison against the reference.

Its shape and dtype must be the reference's first: values that match in another shape (a
`[1, 64]` vector where `[1, 1, 64, 1]` is wanted) broadcast the wrong way downstream.
Floats are compared with a relative tolerance per dtype (float32 arithmetic summed in another
order differs by a few ulps per term, float16/bfloat16 outputs by a rounding step) plus an
absolute tolerance scaled by the typical (mean absolute) magnitude of the expected values, so
that elements that cancel to near zero are not held to a relative bound they cannot meet.
Long float32/float64 reductions loosen the tolerance gently (with the square root of their
length, as the rounding error of a sum grows). NaN must appear exactly where the reference
has NaN, and infinities must match. Integers and bools must be equal; bools are compared
byte for byte so that an unwritten (poisoned) bool output cannot pass as True.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from tunehub.compiler import dtypes
from tunehub.compiler.ir import Program, loads
from tunehub.runtime.arguments import numpy_dtype

RTOL = {"float64": 1e-9, "float32": 1e-4, "float16": 1e-2, "bfloat16": 3e-2}
# Reductions up to this length get the base tolerance; longer ones scale with sqrt(length).
_GENTLE_EXTENT = 256


@dataclass(frozen=True)
class Comparison:
    ok: bool
    max_abs_err: float
    max_rel_err: float
    mismatches: int
    message: str


def rtol(dtype: str, reduce_extent: int = 1) -> float:
    """The relative tolerance for `dtype` outputs of a reduction over `reduce_extent` terms.

    Only float32 and float64 outputs scale with the length: a float16/bfloat16 output was
    accumulated in float32, and its final rounding dwarfs the accumulation error.
    """
    if dtypes.is_half(dtype):
        return RTOL[dtype]
    return RTOL[dtype] * max(1.0, math.sqrt(reduce_extent / _GENTLE_EXTENT))


def compare(
    expected: np.ndarray, actual: np.ndarray, dtype: str, *, reduce_extent: int = 1
) -> Comparison:
    """Compare a kernel's output `actual` with the reference `expected` of `dtype`: its
    shape and dtype must be the expected ones, and then its values within tolerance.

    `reduce_extent` is the number of terms each output element sums (1 without a reduce).
    """
    expected, actual = np.asarray(expected), np.asarray(actual)
    if expected.shape != actual.shape:
        return Comparison(
            ok=False,
            max_abs_err=math.inf,
            max_rel_err=math.inf,
            mismatches=expected.size,
            message=f"shape {list(actual.shape)} where {list(expected.shape)} was expected",
        )
    if actual.dtype != numpy_dtype(dtype):
        return Comparison(
            ok=False,
            max_abs_err=math.inf,
            max_rel_err=math.inf,
            mismatches=expected.size,
            message=f"dtype {actual.dtype} where {dtype} was expected",
        )
    if dtypes.is_float(dtype):
        return _compare_floats(expected, actual, rtol(dtype, reduce_extent))
    if dtype == "bool":
        expected, actual = _bytes(expected), _bytes(actual)
    return _compare_exact(expected.astype(np.int64), actual.astype(np.int64))


def _bytes(array: np.ndarray) -> np.ndarray:
    """A bool array's raw bytes (numpy would read a poisoned byte 0xA5 as True)."""
    if array.dtype.itemsize == 1:
        return np.ascontiguousarray(array).view(np.uint8)
    return array.astype(np.uint8)


def _compare_floats(expected: np.ndarray, actual: np.ndarray, rel: float) -> Comparison:
    e, a = expected.astype(np.float64), actual.astype(np.float64)
    finite = np.isfinite(e) & np.isfinite(a)
    with np.errstate(all="ignore"):
        err = np.where(finite, np.abs(a - e), 0.0)
    magnitudes = np.abs(e[np.isfinite(e)])
    typical = float(magnitudes.mean()) if magnitudes.size else 0.0
    scale = max(typical, float(np.finfo(np.float32).tiny))
    same = (e == a) | (np.isnan(e) & np.isnan(a))
    bad = ~(same | (finite & (err <= rel * (scale + np.abs(e)))))
    max_abs = float(err.max()) if err.size else 0.0
    max_rel = float((err / np.maximum(np.abs(e), scale)).max()) if err.size else 0.0
    if (bad & ~finite).any():
        max_abs = max_rel = math.inf
    tolerance = f"rtol {rel:.1e}, atol {rel * scale:.1e}"
    return _result(expected, actual, bad, max_abs, max_rel, tolerance)


def _compare_exact(expected: np.ndarray, actual: np.ndarray) -> Comparison:
    err = np.abs(actual - expected)
    bad = err != 0
    max_abs = float(err.max()) if err.size else 0.0
    max_rel = float((err / np.maximum(np.abs(expected), 1)).max()) if err.size else 0.0
    return _result(expected, actual, bad, max_abs, max_rel, "exact")


def _result(
    expected: np.ndarray,
    actual: np.ndarray,
    bad: np.ndarray,
    max_abs: float,
    max_rel: float,
    tolerance: str,
) -> Comparison:
    count = int(bad.sum())
    errors = f"max abs err {max_abs:.3g}, max rel err {max_rel:.3g}"
    if count == 0:
        message = f"all {expected.size} elements match ({tolerance}; {errors})"
    else:
        first = tuple(int(i) for i in np.argwhere(bad)[0])
        want, got = expected[first].item(), actual[first].item()
        message = (
            f"{count} of {expected.size} elements differ ({tolerance}); first at "
            f"{list(first)}: expected {want!r}, got {got!r}; {errors}"
        )
    return Comparison(count == 0, max_abs, max_rel, count, message)


def reduce_extent(program: Program, name: str, symbols: Mapping[str, int]) -> int:
    """Terms summed into each element of `name`: the longest reduction on its path from the
    inputs (a bias+relu epilogue keeps its matmul's K), which sets the error tolerance."""
    compute = program.compute(name)
    own = math.prod(program.extent(r.extent, dict(symbols)) for r in compute.reduce_axes)
    inputs = {t.name for t in program.inputs}
    producers = {ld.tensor for ld in loads(compute.body)} - inputs
    return max([own, *(reduce_extent(program, p, symbols) for p in producers)])
