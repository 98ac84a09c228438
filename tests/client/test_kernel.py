"""`load_kernel` on kernels built by the real compiler and gcc, checked against the reference
evaluator: 16-bit floats, several outputs, symbols inferred from shapes, clear errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from tunehub.client import load_kernel, save_kernel
from tunehub.compiler.inputs import random_inputs
from tunehub.compiler.lower import lower
from tunehub.compiler.program import load
from tunehub.compiler.reference import evaluate
from tunehub.compiler.space import space_for
from tunehub.schemas.record import RecordStatus
from tunehub.schemas.target import Target
from tunehub.targets.cpu.build import CpuBuilder
from tunehub.targets.cpu.runtime import CompiledKernel
from tunehub.worker import device

TARGET = Target(kind="cpu", isa=device.cpu_isa())


def export(signature: dict[str, Any], directory: Path) -> CompiledKernel:
    """Lower the naive config of `signature`, build it, save and load it as `tunehub kernel`
    would."""
    program = load(signature)
    kernel = lower(program, TARGET, space_for(program, TARGET).naive())
    built = CpuBuilder().build(kernel, TARGET, timeout_s=60)
    assert built.status is RecordStatus.OK, built.log
    assert built.artifact is not None
    save_kernel(directory, built.artifact, kernel.source, kernel.metadata())
    return load_kernel(directory)


def half_signature(dtype: str) -> dict[str, Any]:
    """Row scaling in a 16-bit dtype with a symbolic row count, and two outputs."""
    return {
        "version": 1,
        "name": f"scale_{dtype}",
        "symbols": {"N": {"min": 1, "max": 64}},
        "inputs": [
            {"name": "X", "shape": ["N", 8], "dtype": dtype},
            {"name": "s", "shape": [8], "dtype": "float32"},
        ],
        "computes": [
            {
                "name": "Y",
                "axes": ["i", "j"],
                "shape": ["N", 8],
                "dtype": dtype,
                "expr": f"{dtype}(float32(X[i, j]) * s[j])",
            },
            {
                "name": "R",
                "axes": ["i"],
                "shape": ["N"],
                "dtype": "float32",
                "reduce": {"op": "sum", "axes": {"j": 8}},
                "expr": "float32(X[i, j])",
            },
        ],
        "outputs": ["Y", "R"],
    }


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_16_bit_floats_and_two_outputs_match_the_reference(dtype: str, tmp_path: Path) -> None:
    signature = half_signature(dtype)
    k = export(signature, tmp_path)
    program = load(signature)
    inputs = random_inputs(program, {"N": 5}, seed=1)
    y, r = k(inputs["X"], inputs["s"])  # N is inferred from X's shape
    expected = evaluate(program, inputs, {"N": 5})
    assert y.dtype == (np.float16 if dtype == "float16" else ml_dtypes.bfloat16)
    assert y.shape == (5, 8) and r.shape == (5,)
    np.testing.assert_array_equal(y.astype(np.float32), expected["Y"].astype(np.float32))
    np.testing.assert_allclose(r, expected["R"], rtol=1e-5, atol=1e-5)


def test_inputs_are_checked_with_clear_messages(tmp_path: Path) -> None:
    k = export(half_signature("float16"), tmp_path)
    x, s = np.zeros((4, 8), np.float16), np.ones(8, np.float32)
    with pytest.raises(ValueError, match=r"expected 2 inputs \(X, s\), got 1"):
        k(x)
    with pytest.raises(ValueError, match="input 'X' must have dtype float16, got float32"):
        k(x.astype(np.float32), s)
    with pytest.raises(ValueError, match=r"input 's' must have shape \[8\], got \[9\]"):
        k(x, np.ones(9, np.float32))
    with pytest.raises(ValueError, match="input 'X' must have rank 2"):
        k(np.zeros(8, np.float16), s)
    with pytest.raises(ValueError, match="N=4, but N=3 elsewhere"):
        k(x, s, N=3)
    with pytest.raises(ValueError, match="unknown symbols: K"):
        k(x, s, K=3)
    # A non-contiguous view is copied, not misread.
    wide = np.arange(64, dtype=np.float16).reshape(4, 16)
    y, _ = k(wide[:, ::2], s)
    np.testing.assert_array_equal(y, wide[:, ::2])


def test_a_missing_directory_or_library_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"metadata\.json not found"):
        load_kernel(tmp_path)
    export(half_signature("float16"), tmp_path)
    (tmp_path / "kernel.so").unlink()
    with pytest.raises(FileNotFoundError, match=r"kernel\.so not found"):
        load_kernel(tmp_path)
