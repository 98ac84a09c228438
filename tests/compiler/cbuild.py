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

from tests.isa_log import note_isa
from tunehub.compiler import dtypes
from tunehub.compiler.inputs import output_buffers, random_inputs
from tunehub.compiler.ir import Program
from tunehub.compiler.kernel import Kernel
from tunehub.compiler.lower import lower
from tunehub.compiler.reference import evaluate
from tunehub.compiler.space.space import Config
from tunehub.compiler.verify import compare
from tunehub.schemas.target import Target
from tunehub.targets.cpu.build import BASE_FLAGS, isa_flags
from tunehub.targets.cpu.isa import VECTOR_BYTES
from tunehub.targets.cpu.runtime import allow_tiles
from tunehub.worker.device import can_run, cpu_isa

# Kernels that tests run are lowered for this machine's ISA (or a lower one, with
# TUNEHUB_CPU_ISA); kernels for other ISAs are only compiled, each with its own flags.
HOST = Target(kind="cpu", isa=cpu_isa())
HOST_FLOAT_LANES = VECTOR_BYTES[HOST.base] // 4
_DIR = Path(tempfile.mkdtemp(prefix="tunehub-cbuild-"))
_LIBS: dict[str, ctypes.CDLL] = {}


def flags(isa: str) -> list[str]:
    """The worker's own flags for `isa`, warnings as errors. Not -march=native: on one
    development VM gcc read AVX512-FP16 as present (absent from /proc/cpuinfo), and float16
    kernels built with it returned wrong values (inf * 0.5 gave 32768)."""
    return [*BASE_FLAGS, *isa_flags(Target(kind="cpu", isa=isa)), "-Wall", "-Werror"]


def compile_for(kernel: Kernel, isa: str) -> Path:
    """Build `kernel` with `isa`'s flags; the library's path (AssertionError on any
    diagnostic)."""
    key = hashlib.sha256(f"{isa}\0{kernel.source}".encode()).hexdigest()[:16]
    src, lib = _DIR / f"{key}.c", _DIR / f"{key}.so"
    if not lib.exists():
        src.write_text(kernel.source)
        result = subprocess.run(
            ["gcc", *flags(isa), str(src), "-o", str(lib), "-lm"], capture_output=True, text=True
        )
        if result.returncode != 0:
            raise AssertionError(f"gcc failed for {isa}:\n{result.stderr}\n{kernel.source}")
    note_isa("compiled", isa)
    return lib


def build(kernel: Kernel, isa: str | None = None) -> ctypes.CDLL:
    """The loaded library of `kernel` built for `isa` (this host's by default)."""
    isa = isa or HOST.isa
    assert can_run(isa), f"this {HOST.isa} host cannot run {isa} code"
    lib = compile_for(kernel, isa)
    allow_tiles()  # as `load_kernel` does: an AMX kernel's first tile instruction needs it
    if str(lib) not in _LIBS:
        _LIBS[str(lib)] = ctypes.CDLL(str(lib))
    note_isa("ran", isa)
    return _LIBS[str(lib)]


def call(
    kernel: Kernel, arrays: dict[str, np.ndarray], symbols: dict[str, int], isa: str | None = None
) -> int:
    """Call the kernel on `arrays` (every argument by name); its return code."""
    entry = getattr(build(kernel, isa), kernel.entry)
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
    isa: str | None = None,
) -> dict[str, np.ndarray]:
    """Call the kernel on `inputs` (outputs poisoned first) and return its outputs."""
    outputs = output_buffers(program, symbols)
    assert call(kernel, {**inputs, **outputs}, symbols, isa) == 0
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
        actual = run(kernel, program, inputs, symbols, target.isa)
        for name in program.outputs:
            dtype = program.compute(name).dtype
            result = compare(expected[name], actual[name], dtype, reduce_extent=reduce)
            assert result.ok, f"{name} under {config}: {result.message}\n{kernel.source}"
