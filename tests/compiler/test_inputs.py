"""Measurement buffers: seeded, name-independent random inputs and poisoned outputs."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest

from tunehub.compiler.inputs import POISON_BYTE, output_buffers, random_inputs
from tunehub.compiler.ir import Program
from tunehub.compiler.program import load
from tunehub.compiler.verify import compare

FLOATS = ("float64", "float32", "float16", "bfloat16")
OTHERS = ("int64", "int32", "int16", "int8", "uint32", "uint8", "bool")  # <= 8 outputs each


def _program(shape: list[Any], dtypes: tuple[str, ...], prefix: str = "x") -> Program:
    """One input per dtype, each copied to an output of the same dtype."""
    names = [f"{prefix}{n}" for n in range(len(dtypes))]
    axes = ["i", "j"][: len(shape)]
    index = ", ".join(axes)
    return load(
        {
            "version": 1,
            "name": "copy",
            "symbols": {"N": {"min": 1, "max": 64}},
            "inputs": [
                {"name": n, "shape": shape, "dtype": d} for n, d in zip(names, dtypes, strict=True)
            ],
            "computes": [
                {
                    "name": f"out_{n}",
                    "axes": axes,
                    "shape": shape,
                    "dtype": d,
                    "expr": f"{n}[{index}]",
                }
                for n, d in zip(names, dtypes, strict=True)
            ],
            "outputs": [f"out_{n}" for n in names],
        }
    )


@pytest.mark.parametrize("dtypes", [FLOATS, OTHERS])
def test_inputs_have_the_declared_shapes_and_dtypes(dtypes: tuple[str, ...]) -> None:
    program = _program(["N", 5], dtypes)
    arrays = random_inputs(program, {"N": 3}, seed=0)
    for tensor in program.inputs:
        expected = ml_dtypes.bfloat16 if tensor.dtype == "bfloat16" else tensor.dtype
        assert arrays[tensor.name].dtype == np.dtype(expected)
        assert arrays[tensor.name].shape == (3, 5)


@pytest.mark.parametrize("dtypes", [FLOATS, OTHERS])
def test_inputs_are_deterministic_per_seed_and_independent_of_names(
    dtypes: tuple[str, ...],
) -> None:
    program = _program([40, 40], dtypes)
    renamed = _program([40, 40], dtypes, prefix="y")
    first = random_inputs(program, {}, seed=7)
    again = random_inputs(program, {}, seed=7)
    other_names = random_inputs(renamed, {}, seed=7)
    other_seed = random_inputs(program, {}, seed=8)
    for n, tensor in enumerate(program.inputs):
        np.testing.assert_array_equal(first[tensor.name], again[tensor.name])
        np.testing.assert_array_equal(first[tensor.name], other_names[f"y{n}"])
        assert not np.array_equal(first[tensor.name], other_seed[tensor.name])


def test_value_ranges_suit_packed_and_small_integer_data() -> None:
    by_dtype: dict[str, np.ndarray] = {}
    for dtypes in (FLOATS, OTHERS):
        arrays = random_inputs(_program([64, 64], dtypes), {}, seed=0)
        by_dtype.update(zip(dtypes, arrays.values(), strict=True))
    for dtype in ("float64", "float32", "float16", "bfloat16"):
        values = by_dtype[dtype].astype(np.float64)
        assert values.min() >= -1.0 and values.max() <= 1.0 and values.std() > 0.4
    for dtype in ("int64", "int32", "int16", "int8"):
        assert set(np.unique(by_dtype[dtype]).tolist()) == set(range(-8, 8))
    assert set(np.unique(by_dtype["uint8"]).tolist()) == set(range(16))
    words = by_dtype["uint32"]
    for nibble in range(8):  # every nibble of a packed int4 word takes all 16 values
        assert len(np.unique((words >> (4 * nibble)) & 15)) == 16
    assert set(np.unique(by_dtype["bool"]).tolist()) == {False, True}


def test_inputs_are_never_all_zeros() -> None:
    program = _program([1], dtypes=("int8", "uint8", "bool", "float16"))
    for seed in range(200):
        for array in random_inputs(program, {}, seed).values():
            assert array.any()


@pytest.mark.parametrize("dtypes", [FLOATS, OTHERS])
def test_outputs_are_poisoned(dtypes: tuple[str, ...]) -> None:
    program = _program(["N"], dtypes)
    buffers = output_buffers(program, {"N": 4})
    for name in program.outputs:
        buffer = buffers[name]
        assert buffer.shape == (4,)
        if program.compute(name).dtype in FLOATS:
            assert np.isnan(buffer.astype(np.float64)).all()
        else:
            assert (buffer.view(np.uint8) == POISON_BYTE).all()
    zeros = output_buffers(program, {"N": 4}, poison=False)
    assert all(not b.view(np.uint8).any() for b in zeros.values())


@pytest.mark.parametrize("dtypes", [FLOATS, OTHERS])
def test_an_unwritten_output_is_a_mismatch(dtypes: tuple[str, ...]) -> None:
    program = _program([3], dtypes)
    poisoned = output_buffers(program, {})
    for name in program.outputs:
        dtype = program.compute(name).dtype
        for expected in (np.zeros(3), np.ones(3)):
            want = expected.astype(poisoned[name].dtype)
            assert not compare(want, poisoned[name], dtype).ok, dtype


def test_different_workloads_get_different_data() -> None:
    def program(expr: str) -> Program:
        return load(
            {
                "version": 1,
                "name": "w",
                "inputs": [{"name": "x", "shape": [16], "dtype": "float32"}],
                "computes": [
                    {"name": "y", "axes": ["i"], "shape": [16], "dtype": "float32", "expr": expr}
                ],
                "outputs": ["y"],
            }
        )

    first = random_inputs(program("x[i] * 2.0"), {}, seed=0)["x"]
    second = random_inputs(program("x[i] * 3.0"), {}, seed=0)["x"]
    assert not np.array_equal(first, second)
