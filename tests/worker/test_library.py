"""The library baselines a tuning reports are what a user would write: each one's reported
time stays within 1.5x of the same computation written by hand and timed here, and the code
shown computes the program's outputs."""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from tunehub.compiler.inputs import random_inputs
from tunehub.compiler.program import load
from tunehub.compiler.reference import evaluate
from tunehub.worker.measure.expression import NUMPY, render
from tunehub.worker.measure.library import compiled, library_baselines, median_call_s

EXAMPLES = Path(__file__).parents[2] / "examples"
F32 = np.float32

# The int4 linear of examples/int4_matmul.json, smaller: K = N = 1024, groups of 32.
INT4 = {
    "version": 1,
    "name": "int4_linear",
    "inputs": [
        {"name": "X", "shape": [8, 1024], "dtype": "float16"},
        {"name": "W", "shape": [1024, 128], "dtype": "uint32"},
        {"name": "scales", "shape": [1024, 32], "dtype": "float16"},
        {"name": "bias", "shape": [1024], "dtype": "float16"},
    ],
    "computes": [
        {
            "name": "acc",
            "axes": ["m", "n"],
            "shape": [8, 1024],
            "dtype": "float32",
            "reduce": {"op": "sum", "axes": {"k": 1024}},
            "expr": "float32(X[m, k]) * (float32(int32((W[n, k // 8] >> (4 * (k % 8))) & 15)"
            " - 7) * float32(scales[n, k // 32]))",
        },
        {
            "name": "out",
            "axes": ["m", "n"],
            "shape": [8, 1024],
            "dtype": "float16",
            "expr": "float16(float32(bias[n]) + acc[m, n])",
        },
    ],
    "outputs": ["out"],
}


def _int4(x: dict[str, np.ndarray]) -> np.ndarray:
    shifts = 4 * np.arange(8, dtype=np.uint32)
    q = ((x["W"][:, :, None] >> shifts) & 15).reshape(1024, 1024).astype(np.int32) - 7
    w = q.astype(F32) * np.repeat(x["scales"].astype(F32), 32, axis=1)
    return (x["bias"].astype(F32) + x["X"].astype(F32) @ w.T).astype(np.float16)


def _softmax(x: dict[str, np.ndarray]) -> np.ndarray:
    e = np.exp(x["X"] - x["X"].max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _layernorm(x: dict[str, np.ndarray]) -> np.ndarray:
    mean = x["X"].mean(axis=1, keepdims=True)
    var = x["X"].var(axis=1, keepdims=True)
    return (x["X"] - mean) / np.sqrt(var + F32(1e-5)) * x["gamma"] + x["beta"]


CASES: dict[str, tuple[str, Callable[[dict[str, np.ndarray]], np.ndarray]]] = {
    "matmul_bias_relu": (
        (EXAMPLES / "matmul_bias_relu.json").read_text(),
        lambda x: np.maximum(x["A"] @ x["B"] + x["bias"], F32(0)),
    ),
    "softmax": ((EXAMPLES / "softmax.json").read_text(), _softmax),
    "layernorm": ((EXAMPLES / "layernorm.json").read_text(), _layernorm),
    "int4_linear": (json.dumps(INT4), _int4),
}


@pytest.mark.parametrize("name", CASES)
def test_the_reported_numpy_time_is_the_hand_written_expressions(name: str) -> None:
    document, by_hand = CASES[name]
    program = load(document)
    inputs = random_inputs(program, {}, seed=0)
    ratios = []
    for _ in range(2):  # once more where the machine's load moved between the timings
        reported, direct = [], []
        for _ in range(3):  # alternated
            baselines = library_baselines(program, {}, 1)
            reported.append(next(b.latency_s for b in baselines if b.library == "numpy"))
            direct.append(median_call_s(lambda: by_hand(inputs), 1))
        ratios.append(statistics.median(reported) / statistics.median(direct))
        if 1 / 1.5 <= ratios[-1] <= 1.5:
            break
    assert 1 / 1.5 <= ratios[-1] <= 1.5, f"reported / by hand: {ratios}"


@pytest.mark.parametrize("name", CASES)
def test_the_code_shown_computes_the_programs_outputs(name: str) -> None:
    document, by_hand = CASES[name]
    program = load(document)
    inputs = random_inputs(program, {}, seed=0)
    (shown,) = (compiled(render(program, {}, NUMPY), inputs)(),)
    expected = evaluate(program, inputs, {})[program.outputs[0]]
    for got in (shown, by_hand(inputs)):
        np.testing.assert_allclose(
            np.asarray(got, np.float64), expected.astype(np.float64), rtol=2e-2, atol=2e-2
        )


def test_torch_is_timed_beside_numpy_where_installed() -> None:
    pytest.importorskip("torch")
    program = load(CASES["matmul_bias_relu"][0])
    baselines = library_baselines(program, {}, 1)
    assert sorted(b.library for b in baselines) == ["numpy", "torch"]
    torch_code = next(b.code for b in baselines if b.library == "torch")
    assert torch_code == "acc = A @ B\nout = torch.clamp(acc + bias, min=0.0)"


# Attention's scores with q and k both read out of one packed projection (GPT-2's qkv): both
# sides of the product gather through index arrays of their own.
PACKED_SCORES = {
    "version": 1,
    "name": "packed_scores",
    "inputs": [{"name": "qkv", "shape": [6, 16], "dtype": "float32"}],
    "computes": [
        {
            "name": "scores",
            "axes": ["h", "i", "j"],
            "shape": [2, 6, 6],
            "dtype": "float32",
            "reduce": {"op": "sum", "axes": {"k": 4}},
            "expr": "qkv[i, h * 4 + k] * qkv[j, 8 + h * 4 + k]",
        }
    ],
    "outputs": ["scores"],
}


@pytest.mark.parametrize(
    "name", ["batched_matmul_nt", "column_sum", "conv2d_3x3", "matmul_odd", "rmsnorm", "packed"]
)
def test_transposed_batched_padded_and_einsum_code_computes_the_outputs(name: str) -> None:
    if name == "packed":
        program = load(json.dumps(PACKED_SCORES))
    else:
        program = load((EXAMPLES / f"{name}.json").read_text())
    symbols = {s.name: min(s.max, 16) for s in program.symbols}
    inputs = random_inputs(program, symbols, seed=0)
    shown = compiled(render(program, symbols, NUMPY), inputs)()
    expected = evaluate(program, inputs, symbols)[program.outputs[0]]
    np.testing.assert_allclose(np.asarray(shown), expected, rtol=1e-3, atol=1e-3)
