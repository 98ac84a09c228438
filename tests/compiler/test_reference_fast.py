"""The reference's fast path for float contractions agrees with its elementwise definition.

`reference.evaluate(..., fast_contractions=False)` evaluates every compute elementwise, the
plain meaning of a signature; the fast path regroups a float sum of products as a batched
matrix product, so the two may differ by summation order only (within `compiler.verify`'s
tolerance). The fast path must also leave alone what it cannot regroup exactly: integer sums
(wrapping), float16 computes (every term rounded) and casts that round inside a product.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.strategies import signatures, symbol_values
from tunehub.compiler import reference
from tunehub.compiler.errors import SignatureError
from tunehub.compiler.inputs import random_inputs
from tunehub.compiler.ir import Binary, Compute, Const, Load, Program, ReduceAxis, Tensor, Var
from tunehub.compiler.program import load
from tunehub.compiler.verify import compare

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _example(name: str) -> dict[str, Any]:
    document: dict[str, Any] = json.loads((EXAMPLES / f"{name}.json").read_text())
    return document


def _contraction(
    inputs: dict[str, tuple[list[int | str], str]],
    axes: dict[str, int | str],
    reduce: dict[str, int],
    expr: str,
    dtype: str = "float32",
    symbols: dict[str, dict[str, int]] | None = None,
) -> dict[str, Any]:
    """A one-compute signature `out[axes] = sum over reduce of expr`."""
    return {
        "version": 1,
        "name": "t",
        "symbols": symbols or {},
        "inputs": [
            {"name": name, "shape": shape, "dtype": dt} for name, (shape, dt) in inputs.items()
        ],
        "computes": [
            {"name": "out", "axes": list(axes), "shape": list(axes.values()), "dtype": dtype,
             "reduce": {"op": "sum", "axes": reduce}, "expr": expr},
        ],
        "outputs": ["out"],
    }  # fmt: skip


# int4_matmul.json at a size the elementwise path evaluates in milliseconds (K = 64: eight
# packed words and two scale groups per row).
INT4 = _example("int4_matmul")
INT4["inputs"] = [
    {"name": "X", "shape": ["M", 64], "dtype": "float16"},
    {"name": "W", "shape": [48, 8], "dtype": "uint32"},
    {"name": "scales", "shape": [48, 2], "dtype": "float16"},
    {"name": "bias", "shape": [48], "dtype": "float16"},
    {"name": "residual", "shape": ["M", 48], "dtype": "float16"},
]
INT4["computes"][0]["shape"] = ["M", 48]
INT4["computes"][0]["reduce"]["axes"] = {"k": 64}
INT4["computes"][1]["shape"] = ["M", 48]

CASES: dict[str, tuple[dict[str, Any], dict[str, int]]] = {
    "matmul": (_example("matmul_odd"), {}),
    "batched_nt": (_example("batched_matmul_nt"), {}),
    "conv2d_where_guarded": (_example("conv2d_3x3"), {}),
    "int4_dequant": (INT4, {"M": 5}),
    "matmul_bias_relu": (_example("matmul_bias_relu"), {}),
    "float64_symbolic": (
        _contraction(
            {"A": (["M", 33], "float64"), "B": ([33, 17], "float64")},
            {"i": "M", "j": 17}, {"k": 33}, "A[i, k] * B[k, j]", "float64",
            symbols={"M": {"min": 1, "max": 64}},
        ),
        {"M": 9},
    ),
    "constant_and_reduce_only_factor": (
        _contraction(
            {"A": ([20, 30], "float32"), "B": ([30, 12], "float32"), "w": ([30], "float32")},
            {"i": 20, "j": 12}, {"k": 30}, "2.0 * A[i, k] * B[k, j] * w[k]",
        ),
        {},
    ),
    "axis_no_factor_reads": (
        _contraction(
            {"A": ([6, 10], "float32"), "B": ([10, 7], "float32")},
            {"i": 6, "t": 3, "j": 7}, {"k": 10}, "A[i, k] * B[k, j]",
        ),
        {},
    ),
    "reduce_axis_one_side_reads": (
        _contraction(
            {"A": ([6, 10, 4], "float32"), "B": ([10, 7], "float32")},
            {"i": 6, "j": 7}, {"k": 10, "r": 4}, "A[i, k, r] * B[k, j]",
        ),
        {},
    ),
    "row_dot": (
        _contraction(
            {"A": ([9, 40], "float32"), "B": ([9, 40], "float32")},
            {"i": 9}, {"k": 40}, "A[i, k] * B[i, k]",
        ),
        {},
    ),
}  # fmt: skip


@pytest.fixture
def elementwise(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The names of the computes the elementwise path evaluates from here on."""
    seen: list[str] = []
    original = reference._evaluate_compute

    def spy(program: Program, compute: Compute, *args: Any) -> np.ndarray:
        seen.append(compute.name)
        return original(program, compute, *args)

    monkeypatch.setattr(reference, "_evaluate_compute", spy)
    yield seen


def _reduce_extent(program: Program, symbols: dict[str, int]) -> int:
    """The longest reduction of the program: it bounds the terms behind any output, which
    sets the tolerance."""
    return max(
        math.prod(program.extent(r.extent, symbols) for r in c.reduce_axes)
        for c in program.computes
    )


def _assert_close(
    program: Program,
    fast: dict[str, np.ndarray],
    slow: dict[str, np.ndarray],
    symbols: dict[str, int],
) -> None:
    for name in program.outputs:
        dtype = program.compute(name).dtype
        extent = _reduce_extent(program, symbols)
        result = compare(slow[name], fast[name], dtype, reduce_extent=extent)
        assert result.ok, f"{name}: {result.message}"


@pytest.mark.parametrize("case", list(CASES))
def test_fast_path_matches_the_elementwise_path(case: str, elementwise: list[str]) -> None:
    signature, symbols = CASES[case]
    program = load(signature)
    x = random_inputs(program, symbols, seed=3)
    fast = reference.evaluate(program, x, symbols)
    # The fast path took every sum (the epilogues of int4 and bias+relu stay elementwise).
    sums = {c.name for c in program.computes if c.reduce_op == "sum"}
    assert sums and not sums & set(elementwise), elementwise
    slow = reference.evaluate(program, x, symbols, fast_contractions=False)
    _assert_close(program, fast, slow, symbols)


# Small enough that a budget of a few elements (thousands of blocks) still runs in a blink.
SMALL: dict[str, tuple[dict[str, Any], dict[str, int]]] = {
    "matmul": (
        _contraction(
            {"A": ([9, 11], "float32"), "B": ([11, 13], "float32")},
            {"i": 9, "j": 13}, {"k": 11}, "A[i, k] * B[k, j]",
        ),
        {},
    ),
    "batched_nt": (
        _contraction(
            {"A": ([2, 5, 7], "float32"), "B": ([2, 6, 7], "float32")},
            {"b": 2, "i": 5, "j": 6}, {"k": 7}, "A[b, i, k] * B[b, j, k]",
        ),
        {},
    ),
    "conv2d_where_guarded": (
        _contraction(
            {"data": ([1, 3, 6, 6], "float32"), "weight": ([4, 3, 3, 3], "float32")},
            {"n": 1, "f": 4, "y": 6, "x": 6}, {"c": 3, "ry": 3, "rx": 3},
            "where(y + ry >= 1 and y + ry <= 6 and x + rx >= 1 and x + rx <= 6, "
            "data[n, c, y + ry - 1, x + rx - 1], 0.0) * weight[f, c, ry, rx]",
        ),
        {},
    ),
    "int4_dequant": (INT4, {"M": 2}),
}  # fmt: skip


@pytest.mark.parametrize("case", list(SMALL))
@pytest.mark.parametrize("max_elements", [1, 7, 100])
def test_blocked_fast_path_matches(case: str, max_elements: int) -> None:
    """Small budgets split reduce axes first, then batch, rows and cols, down to one element."""
    signature, symbols = SMALL[case]
    program = load(signature)
    x = random_inputs(program, symbols, seed=4)
    fast = reference.evaluate(program, x, symbols, max_elements=max_elements)
    slow = reference.evaluate(program, x, symbols, fast_contractions=False)
    _assert_close(program, fast, slow, symbols)


def test_int4_fast_path_matches_numpy_dequantization() -> None:
    """An independent check of the int4 case: unpack nibbles, scale, matmul in float64."""
    signature, symbols = CASES["int4_dequant"]
    program = load(signature)
    x = random_inputs(program, symbols, seed=5)
    k = np.arange(64)
    nibbles = (x["W"][:, k // 8] >> (4 * (k % 8)).astype(np.uint32)) & 15
    weight = (nibbles.astype(np.float64) - 7) * x["scales"][:, k // 32].astype(np.float64)
    acc = (x["X"].astype(np.float64) @ weight.T).astype(np.float32)
    expected = acc + x["residual"].astype(np.float32) + x["bias"].astype(np.float32)
    got = reference.evaluate(program, x, symbols)["out"]
    result = compare(expected.astype(np.float16), got, "float16", reduce_extent=64)
    assert result.ok, result.message


def test_rounding_cast_inside_a_product_is_kept() -> None:
    """float16(A * 3) rounds: it is one factor, not A times 3."""
    signature = _contraction(
        {"A": ([8, 16], "float32"), "B": ([16, 5], "float32")},
        {"i": 8, "j": 5}, {"k": 16}, "float32(float16(A[i, k] * 3.0)) * B[k, j]",
    )  # fmt: skip
    program = load(signature)
    x = random_inputs(program, {}, seed=6)
    got = reference.evaluate(program, x, {})["out"]
    rounded = (x["A"] * np.float32(3.0)).astype(np.float16).astype(np.float64)
    np.testing.assert_allclose(got, rounded @ x["B"].astype(np.float64), rtol=1e-5, atol=1e-6)
    unrounded = (x["A"].astype(np.float64) * 3.0) @ x["B"].astype(np.float64)
    assert np.abs(got - unrounded).max() > 1e-4  # so the check above can tell them apart


@pytest.mark.parametrize(
    ("dtype", "expr"),
    [
        ("int8", "A[i, k] * B[k, j]"),  # wraps: 64 products of up to 64 overflow int8
        ("int32", "A[i, k] * B[k, j]"),
        ("float16", "A[i, k] * B[k, j]"),  # every term is rounded to float16
        ("float32", "float32(A[i, k] * B[k, j])"),  # an int8 product, wrapped, then cast
    ],
)
def test_exact_sums_stay_elementwise(dtype: str, expr: str, elementwise: list[str]) -> None:
    in_dtype = "float16" if dtype == "float16" else "int8"
    signature = _contraction(
        {"A": ([6, 64], in_dtype), "B": ([64, 5], in_dtype)},
        {"i": 6, "j": 5}, {"k": 64}, expr, dtype,
    )  # fmt: skip
    program = load(signature)
    x = random_inputs(program, {}, seed=7)
    got = reference.evaluate(program, x, {})["out"]
    assert elementwise == ["out"]
    want = reference.evaluate(program, x, {}, fast_contractions=False)["out"]
    np.testing.assert_array_equal(got, want)


def test_unguarded_out_of_bounds_read_is_still_an_error() -> None:
    # compiler.program rejects such a read; a hand-built program must still not be read
    # out of bounds silently, on the fast path too.
    a = Load("A", (Var("i"), Binary("+", Var("k"), Const(1, "int64"), "int64")), "float32")
    b = Load("B", (Var("k"), Var("j")), "float32")
    compute = Compute(
        "C", ("i", "j"), (2, 2), "float32", Binary("*", a, b, "float32"), "sum",
        (ReduceAxis("k", 3),),
    )  # fmt: skip
    program = Program(
        "oob", (), (Tensor("A", (2, 3), "float32"), Tensor("B", (3, 2), "float32")),
        (compute,), ("C",),
    )  # fmt: skip
    x = {"A": np.ones((2, 3), np.float32), "B": np.ones((3, 2), np.float32)}
    with pytest.raises(SignatureError, match="outside its bounds"):
        reference.evaluate(program, x, {})


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_programs_agree_on_both_paths(data: st.DataObject) -> None:
    signature = data.draw(signatures())
    symbols = data.draw(symbol_values(signature))
    program = load(signature)
    x = random_inputs(program, symbols, seed=0)
    fast = reference.evaluate(program, x, symbols)
    slow = reference.evaluate(program, x, symbols, fast_contractions=False)
    _assert_close(program, fast, slow, symbols)
