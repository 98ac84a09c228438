"""Hand-written CUDA candidates for the runner tests, emulated (`test_emulator.py`) and on a GPU
(`test_measure_gpu.py`): one program, `out[i] = 2 * a[i] + b[i]` over a symbolic length
N, and kernels that get it right or fail in each way a candidate can.

Each kernel follows the launch ABI of `compiler.kernel`: `(a, b, out, workspaces..., N)`.
"""

from __future__ import annotations

import shutil
from typing import Any

import pytest

from tests.signatures import AXPY, AXPY_ARGS
from tunehub.compiler.canonical import workload_key
from tunehub.compiler.kernel import Kernel
from tunehub.compiler.program import load
from tunehub.worker.measure.case import Case, CaseCache

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")

PROGRAM = load(AXPY)
N = 1000
HEAD = 'extern "C" __global__ void axpy_0(const float* a, const float* b, float* out, int64_t n'
GRID = ["(N + 127) / 128", "1", "1"]


def kernel(
    body: str,
    *,
    prelude: str = "",
    grid: list[str] | None = None,
    block: int = 128,
    shared_bytes: int = 0,
    extra: list[dict[str, Any]] | None = None,
    workspace: list[dict[str, str]] | None = None,
    params: str = "",
) -> Kernel:
    """A one-kernel candidate (`axpy_0` with `body`), or more with `extra` launches whose
    functions `prelude` defines; `params` declares workspace pointers before `n`."""
    head = HEAD.replace(", int64_t n", f"{params}, int64_t n")
    source = f"#include <stdint.h>\n{prelude}\n{head}) {{\n{body}\n}}\n"
    first = {
        "entry": "axpy_0",
        "grid": grid or GRID,
        "block": [block, 1, 1],
        "shared_bytes": shared_bytes,
    }
    launch = {"kernels": [first, *(extra or [])], "workspace": workspace or []}
    return Kernel("cuda", source, "axpy", AXPY_ARGS, ("N",), launch)


def case(cache: CaseCache, n: int = N) -> Case:
    return cache.get(PROGRAM, workload_key(PROGRAM), {"N": n}, seed=0)


INDEX = "const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;"
CORRECT = kernel(f"{INDEX}\nif (i < n) out[i] = 2.0f * a[i] + b[i];")
# Through dynamic shared memory past the 48 KiB default (the GPU needs the opt-in).
BIG_SHARED = kernel(
    f"""extern __shared__ float4 tunehub_shared[];
float* stage = (float*)tunehub_shared;
{INDEX}
stage[threadIdx.x * 100] = i < n ? a[i] : 0.0f;
__syncthreads();
if (i < n) out[i] = 2.0f * stage[threadIdx.x * 100] + b[i];""",
    shared_bytes=128 * 100 * 4,
)
# Two kernels and a workspace: the first scales `a` into it, the second adds `b`.
TWO_KERNELS = kernel(
    f"{INDEX}\nif (i < n) ws[i] = 2.0f * a[i];",
    params=", float* ws",
    prelude=(
        'extern "C" __global__ void axpy_1(const float* a, const float* b, float* out, '
        "float* ws, int64_t n) {\n"
        "  const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;\n"
        "  if (i < n) out[i] = ws[i] + b[i];\n}\n"
    ),
    extra=[{"entry": "axpy_1", "grid": GRID, "block": [128, 1, 1], "shared_bytes": 0}],
    workspace=[{"name": "ws", "bytes": "N * 4"}],
)
WRONG = kernel(f"{INDEX}\nif (i < n) out[i] = 2.0f * a[i] - b[i];")
MISSES_LAST = kernel(f"{INDEX}\nif (i < n - 1) out[i] = 2.0f * a[i] + b[i];")
# The last thread writes one element past the end (whatever the grid's rounding of N).
PAST_THE_END = kernel(f"{INDEX}\nif (i < n) out[i == n - 1 ? n : i] = 2.0f * a[i] + b[i];")
INTO_INPUT = kernel(
    f"{INDEX}\nif (i < n) {{ out[i] = 2.0f * a[i] + b[i]; ((float*)a)[i] = 0.0f; }}"
)
FAULTS = kernel(f"{INDEX}\nif (i < n) out[i + ((int64_t)1 << 40)] = 1.0f;")
# The asm keeps nvcc from deleting the loop (an empty infinite loop is undefined in C++).
HANGS = kernel(f'{INDEX}\nfor (;;) {{ asm volatile(""); }}\nif (i < n) out[i] = 0.0f;')
TOO_MANY_THREADS = kernel(f"{INDEX}\nif (i < n) out[i] = 2.0f * a[i] + b[i];", block=2048)
# The candidates every runner must pass, for `pytest.mark.parametrize("kernel", CORRECT_ONES)`.
CORRECT_ONES = [
    pytest.param(CORRECT, id="one"),
    pytest.param(BIG_SHARED, id="dynamic-shared"),
    pytest.param(TWO_KERNELS, id="two-kernels+workspace"),
]
