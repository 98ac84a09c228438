"""Every shipped example loads, and the reference evaluator agrees with numpy written by hand.

Each example's numpy formulation here is independent of the IR (np.matmul, an explicit
padded convolution, the softmax formula, ...), so a bug in the evaluator or in an example's
expression shows up as a disagreement. Large examples are checked on a downsized copy.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tunehub.compiler import reference
from tunehub.compiler.dtypes import to_numpy
from tunehub.compiler.inputs import random_inputs
from tunehub.compiler.program import load
from tunehub.compiler.verify import compare

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

Arrays = dict[str, np.ndarray]


def _signature(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((EXAMPLES / f"{name}.json").read_text())
    return data


def _resized_matmul(name: str, m: int, n: int, k: int) -> dict[str, Any]:
    """A matmul example with other sizes (its expression does not mention them)."""
    sig = _signature(name)
    sig["inputs"][0]["shape"] = [m, k]
    sig["inputs"][1]["shape"] = [k, n]
    sig["computes"][0]["shape"] = [m, n]
    sig["computes"][0]["reduce"]["axes"] = {"k": k}
    return sig


def _f64(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float64)


def _matmul(x: Arrays) -> np.ndarray:
    return _f64(x["A"]) @ _f64(x["B"])


def _batched_nt(x: Arrays) -> np.ndarray:
    return np.matmul(_f64(x["A"]), _f64(x["B"]).transpose(0, 2, 1))


def _matmul_bias_relu(x: Arrays) -> np.ndarray:
    return np.maximum(_matmul(x) + _f64(x["bias"]), 0.0)


def _conv2d(x: Arrays) -> np.ndarray:
    data = np.pad(_f64(x["data"]), ((0, 0), (0, 0), (1, 1), (1, 1)))
    weight = _f64(x["weight"])
    n, _, h, w = x["data"].shape
    out = np.zeros((n, weight.shape[0], h, w))
    for kh in range(3):
        for kw in range(3):
            window = data[:, :, kh : kh + h, kw : kw + w]
            out += np.einsum("nchw,fc->nfhw", window, weight[:, :, kh, kw])
    return out


def _softmax(x: Arrays) -> np.ndarray:
    e = np.exp(_f64(x["X"]) - _f64(x["X"]).max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _layernorm(x: Arrays) -> np.ndarray:
    v = _f64(x["X"])
    mean = v.mean(axis=1, keepdims=True)
    var = v.var(axis=1, keepdims=True)
    return (v - mean) / np.sqrt(var + 1e-5) * _f64(x["gamma"]) + _f64(x["beta"])


def _rmsnorm(x: Arrays) -> np.ndarray:
    v = _f64(x["X"])
    return v / np.sqrt((v * v).mean(axis=1, keepdims=True) + 1e-6) * _f64(x["weight"])


def _gelu(x: Arrays) -> np.ndarray:
    v = _f64(x["X"])
    return 0.5 * v * (1.0 + np.vectorize(math.erf)(v / np.sqrt(2.0)))


def _column_sum(x: Arrays) -> np.ndarray:
    return _f64(x["X"]).sum(axis=0)


def _int4_matmul(x: Arrays) -> np.ndarray:
    words = x["W"]  # [N, K / 8], nibble j of a word holds k = 8 * word + j
    shifts = np.arange(8, dtype=np.uint32) * 4
    nibbles = (words[:, :, None] >> shifts) & 15
    weights = nibbles.reshape(words.shape[0], -1).astype(np.float64) - 7.0
    weights *= np.repeat(_f64(x["scales"]), 32, axis=1)
    return _f64(x["residual"]) + _f64(x["bias"]) + _f64(x["X"]) @ weights.T


# name -> (signature, symbols, numpy formulation, reduce extent for the tolerance)
CASES: dict[str, tuple[dict[str, Any], dict[str, int], Callable[[Arrays], np.ndarray], int]] = {
    "matmul_128": (_signature("matmul_128"), {}, _matmul, 128),
    "matmul_odd": (_signature("matmul_odd"), {}, _matmul, 61),
    "matmul_512": (_resized_matmul("matmul_512", 96, 80, 512), {}, _matmul, 512),
    "matmul_1024": (_resized_matmul("matmul_1024", 64, 48, 1024), {}, _matmul, 1024),
    "batched_matmul_nt": (_signature("batched_matmul_nt"), {}, _batched_nt, 64),
    "matmul_bias_relu": (_signature("matmul_bias_relu"), {}, _matmul_bias_relu, 256),
    "conv2d_3x3": (_signature("conv2d_3x3"), {}, _conv2d, 288),
    "softmax": (_signature("softmax"), {}, _softmax, 1024),
    "layernorm": (_signature("layernorm"), {}, _layernorm, 1024),
    "rmsnorm": (_signature("rmsnorm"), {}, _rmsnorm, 1024),
    "gelu": (_signature("gelu"), {}, _gelu, 1),
    "column_sum": (_signature("column_sum"), {}, _column_sum, 1024),
    "int4_matmul": (_signature("int4_matmul"), {"M": 3}, _int4_matmul, 4096),
}


def test_every_example_has_a_case() -> None:
    assert sorted(CASES) == sorted(p.stem for p in EXAMPLES.glob("*.json"))


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.json")), ids=lambda p: p.stem)
def test_example_loads(path: Path) -> None:
    program = load(path.read_text())
    assert program.name == path.stem
    assert program.outputs


@pytest.mark.parametrize("name", sorted(CASES))
def test_reference_matches_numpy(name: str) -> None:
    signature, symbols, formulation, reduce_extent = CASES[name]
    program = load(signature)
    inputs = random_inputs(program, symbols, seed=0)
    (output,) = program.outputs
    got = reference.evaluate(program, inputs, symbols)[output]
    expected = formulation(inputs)
    dtype = program.compute(output).dtype
    assert got.shape == expected.shape
    # The evaluator rounds to the output dtype; so does the comparison's expectation.
    result = compare(expected.astype(to_numpy(dtype)), got, dtype, reduce_extent=reduce_extent)
    assert result.ok, result.message
