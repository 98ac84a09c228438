"""Checks of downloaded kernels: run through `load_kernel` and compared with the reference."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from tunehub.client import load_kernel
from tunehub.compiler.inputs import random_inputs
from tunehub.compiler.program import load
from tunehub.compiler.reference import evaluate
from tunehub.compiler.verify import compare, reduce_extent

# Not the tuner's seed: the kernel must be right on inputs it was never verified with.
SEED = 7


def run_and_check(kernel_dir: Path, signature: dict[str, Any], symbols: dict[str, int]) -> None:
    """Run the kernel in `kernel_dir` on fresh inputs; every output must match the numpy
    reference evaluator within the measurement protocol's tolerance."""
    program = load(signature)
    kernel = load_kernel(kernel_dir)
    inputs = random_inputs(program, symbols, seed=SEED)
    outputs = kernel(*(inputs[t.name] for t in program.inputs))
    outputs = outputs if isinstance(outputs, tuple) else (outputs,)
    expected = evaluate(program, inputs, symbols)
    for name, actual in zip(program.outputs, outputs, strict=True):
        assert isinstance(actual, np.ndarray)
        terms = reduce_extent(program, name, symbols)
        result = compare(expected[name], actual, program.buffer(name).dtype, reduce_extent=terms)
        assert result.ok, f"{program.name}.{name}: {result.message}"
