"""Measurement buffers: seeded random inputs, and poisoned outputs.

Inputs are random but reproducible, and never all zeros (a kernel that ignores an input must
not pass by luck). Integer ranges are chosen for packed data: every bit of a uint32 word is
random, so each int4 nibble takes all 16 values, and small integer types stay in [-8, 8) or
[0, 16) so that sums of products neither saturate nor hide sign bugs.

Each input draws from its own stream, keyed by the seed, the workload key and the input's
position, so the data are the same for signatures that differ only in names (one workload)
and differ between workloads.
"""

from __future__ import annotations

import numpy as np

from tunehub.compiler import dtypes
from tunehub.compiler.canonical import workload_key
from tunehub.compiler.ir import Program

# A byte pattern no kernel writes by accident: 0xA5A5A5A5 as uint32, -91 as int8, and not a
# valid bool (0 or 1), so an unwritten bool output is caught too.
POISON_BYTE = 0xA5

_INT_RANGES = {
    "int64": (-8, 8),
    "int32": (-8, 8),
    "int16": (-8, 8),
    "int8": (-8, 8),
    "uint8": (0, 16),
    "uint32": (0, 2**32),
}


def random_inputs(program: Program, symbols: dict[str, int], seed: int) -> dict[str, np.ndarray]:
    """One array per input of `program` at these symbol values, deterministic in
    (workload, `seed`).

    Floats are uniform in [-1, 1) (rounded to the input's dtype), bools are fair coins, and
    integers follow `_INT_RANGES`.
    """
    workload = int(workload_key(program)[:16], 16)
    arrays = {}
    for position, tensor in enumerate(program.inputs):
        rng = np.random.default_rng([seed, workload, position])
        shape = program.shape_of(tensor.name, symbols)
        arrays[tensor.name] = _random_array(rng, shape, tensor.dtype)
    return arrays


def _random_array(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    target = dtypes.to_numpy(dtype)
    if dtypes.is_float(dtype):
        array = rng.uniform(-1.0, 1.0, size=shape).astype(target)
    elif dtype == "bool":
        array = rng.integers(0, 2, size=shape).astype(bool)
    else:
        low, high = _INT_RANGES[dtype]
        array = rng.integers(low, high, size=shape, dtype=np.int64).astype(target)
    if array.size and not array.any():
        array.flat[0] = 1
    return array


def output_buffers(
    program: Program, symbols: dict[str, int], poison: bool = True
) -> dict[str, np.ndarray]:
    """One array per output, pre-filled so that an element the kernel never writes shows up
    as a mismatch: NaN for floats, `POISON_BYTE` in every byte of integers and bools. With
    `poison=False`, zeros."""
    buffers = {}
    for name in program.outputs:
        compute = program.compute(name)
        shape = program.shape_of(name, symbols)
        array = np.zeros(shape, dtypes.to_numpy(compute.dtype))
        if poison and dtypes.is_float(compute.dtype):
            array.fill(np.nan)
        elif poison:
            array.reshape(-1).view(np.uint8).fill(POISON_BYTE)
        buffers[name] = array
    return buffers
