"""Test helper: build a C `Kernel` with gcc into a shared library and call it through ctypes.

The worker has the real build/measure path; this is the smallest thing that lets compiler
tests run generated code. Libraries are cached by source hash for the session, and
`check_configs` runs a program under configs against the reference evaluator.
"""

from __future__ import annotations

import ctypes
import hashlib
import math
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from compiler import dtypes
from compiler.inputs import output_buffers, random_inputs
from compiler.ir import Program
from compiler.kernel import Kernel
from compiler.lower import lower
from compiler.reference import evaluate
from compiler.space.space import Config
from compiler.verify import compare
from schemas.target import Target
from worker.build.cpu import BASE_FLAGS, ISA_FLAGS
from worker.device import cpu_isa

# The worker's own flags for this machine's ISA, not -march=native: on one development VM gcc
# read AVX512-FP16 as present (absent from /proc/cpuinfo), and float16 kernels built with it
# returned wrong values (inf * 0.5 gave 32768).
FLAGS = [*BASE_FLAGS, *ISA_FLAGS[cpu_isa()], "-Wall", "-Werror"]
_DIR = Path(tempfile.mkdtemp(prefix="tunehub-cbuild-"))
_LIBS: dict[str, ctypes.CDLL] = {}


def build(kernel: Kernel) -> ctypes.CDLL:
    key = hashlib.sha256(kernel.source.encode()).hexdigest()[:16]
    if key not in _LIBS:
        src, lib = _DIR / f"{key}.c", _DIR / f"{key}.so"
        src.write_text(kernel.source)
        result = subprocess.run(
            ["gcc", *FLAGS, str(src), "-o", str(lib), "-lm"], capture_output=True, text=True
        )
        if result.returncode != 0:
            raise AssertionError(f"gcc failed:\n{result.stderr}\n{kernel.source}")
        _LIBS[key] = ctypes.CDLL(str(lib))
    return _LIBS[key]


def call(kernel: Kernel, arrays: dict[str, np.ndarray], symbols: dict[str, int]) -> int:
    """Call the kernel on `arrays` (every argument by name); its return code."""
    entry = getattr(build(kernel), kernel.entry)
    entry.restype = ctypes.c_int
    args: list[object] = []
    for arg in kernel.args:
        array = arrays[arg.name]
        assert array.dtype == dtypes.to_numpy(arg.dtype) and array.flags.c_contiguous
        args.append(ctypes.c_void_p(array.ctypes.data))
    args += [ctypes.c_int64(symbols[s]) for s in kernel.symbols]
    return int(entry(*args))


def run(
    kernel: Kernel,
    program: Program,
    inputs: dict[str, np.ndarray],
    symbols: dict[str, int],
) -> dict[str, np.ndarray]:
    """Call the kernel on `inputs` (outputs poisoned first) and return its outputs."""
    outputs = output_buffers(program, symbols)
    assert call(kernel, {**inputs, **outputs}, symbols) == 0
    return outputs


def check_configs(
    program: Program,
    target: Target,
    configs: list[Config],
    symbols: dict[str, int],
    seed: int = 0,
) -> None:
    """Lower, build and run `program` under each config; assert each agrees with the
    reference evaluator."""
    inputs = random_inputs(program, symbols, seed)
    expected = evaluate(program, inputs, symbols)
    # An output may finish a reduction (as an epilogue): allow for the longest one.
    reduce = max(
        math.prod(program.extent(r.extent, symbols) for r in c.reduce_axes)
        for c in program.computes
    )
    for config in configs:
        kernel = lower(program, target, config)
        actual = run(kernel, program, inputs, symbols)
        for name in program.outputs:
            dtype = program.compute(name).dtype
            result = compare(expected[name], actual[name], dtype, reduce_extent=reduce)
            assert result.ok, f"{name} under {config}: {result.message}\n{kernel.source}"
