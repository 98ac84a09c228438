"""The CUDA emulator: hand-written kernels built by g++ with `cuda_emulate.h` and checked
against numpy (the same source also builds with nvcc for sm_90), the emulator's own
behaviour (dynamic shared memory, reverse order, deadlocks, refused launches), and the
emulated runner: every way a candidate can fail, through the GPU runner's verification.
"""

from __future__ import annotations

import ctypes
import subprocess
from collections.abc import Iterator
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from tests.targets.cuda import cases
from tests.targets.cuda.cases import needs_nvcc
from tunehub.compiler.kernel import Kernel
from tunehub.schemas.record import RecordStatus
from tunehub.schemas.target import Target
from tunehub.targets.cuda.build import CudaBuilder
from tunehub.targets.cuda.emulate.emulator import (
    COMPILER,
    FLAGS,
    HEADER,
    STUBS,
    EmulatedBuilder,
    EmulationError,
    Library,
    build_library,
    emulation_source,
)
from tunehub.targets.cuda.emulated import EmulatedRunner
from tunehub.worker.measure.case import Case, CaseCache
from tunehub.worker.measure.runner import MeasureResult

SM90 = Target(kind="cuda", arch="sm_90")

SOURCE = r"""
#include <stdint.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <mma.h>
#include <cuda_pipeline.h>

#define TILE 16

// Shared-memory tiled matmul, C = A B (n x n), odd sizes guarded.
extern "C" __global__ void matmul(const float* __restrict__ A, const float* __restrict__ B,
                                  float* __restrict__ C, int n) {
  __shared__ float As[TILE][TILE];
  __shared__ float Bs[TILE][TILE];
  int row = blockIdx.y * TILE + threadIdx.y, col = blockIdx.x * TILE + threadIdx.x;
  float acc = 0.0f;
  for (int k = 0; k < n; k += TILE) {
    int ka = k + threadIdx.x, kb = k + threadIdx.y;
    As[threadIdx.y][threadIdx.x] = row < n && ka < n ? A[row * n + ka] : 0.0f;
    Bs[threadIdx.y][threadIdx.x] = col < n && kb < n ? B[kb * n + col] : 0.0f;
    __syncthreads();
#pragma unroll
    for (int i = 0; i < TILE; i++) acc = fmaf(As[threadIdx.y][i], Bs[i][threadIdx.x], acc);
    __syncthreads();
  }
  if (row < n && col < n) C[row * n + col] = acc;
}

// Row sums: strided loads, a warp-shuffle tree, partial sums in dynamic shared memory.
extern "C" __global__ void rowsum(const float* __restrict__ x, float* __restrict__ out, int cols) {
  extern __shared__ __align__(16) float partial[];
  const float* r = x + (int64_t)blockIdx.x * cols;
  float s = 0.0f;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) s += __ldg(r + c);
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  int warp = threadIdx.x / warpSize, lane = threadIdx.x % warpSize;
  if (lane == 0) partial[warp] = s;
  __syncthreads();
  if (warp == 0) {
    s = lane < blockDim.x / warpSize ? partial[lane] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) s += __shfl_down_sync(0xffffffffu, s, o);
    if (lane == 0) out[blockIdx.x] = s;
  }
}

// Inclusive prefix sums of blocks of 256: a barrier before and after every step.
extern "C" __global__ void scan(const int* __restrict__ in, int* __restrict__ out, int n) {
  __shared__ int buf[2][256];
  int i = blockIdx.x * blockDim.x + threadIdx.x, t = threadIdx.x, from = 0;
  buf[0][t] = i < n ? in[i] : 0;
  __syncthreads();
  for (int step = 1; step < blockDim.x; step *= 2) {
    int v = buf[from][t] + (t >= step ? buf[from][t - step] : 0);
    __syncthreads();
    buf[1 - from][t] = v;
    from = 1 - from;
    __syncthreads();
  }
  if (i < n) out[i] = buf[from][t];
}

// Threads past the end leave before the barrier; the rest must not wait for them.
extern "C" __global__ void reverse_tail(const float* in, float* out, int n) {
  __shared__ float s[128];
  int t = threadIdx.x;
  if (t >= n) return;
  s[t] = in[t];
  __syncthreads();
  out[t] = s[n - 1 - t];
}

// Round-trips through __half and __nv_bfloat16, and float4 loads and stores.
__device__ __forceinline__ float H(float x) { return __half2float(__float2half_rn(x)); }
__device__ __forceinline__ float B(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }
extern "C" __global__ void halves(const float4* in, float4* h, float4* b, int n4) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n4) return;
  float4 v = in[i];
  h[i] = make_float4(H(v.x), H(v.y), H(v.z), H(v.w));
  b[i] = make_float4(B(v.x), B(v.y), B(v.z), B(v.w));
}

// Every thread of every block adds into one total.
extern "C" __global__ void total(const float* x, float* sum, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) atomicAdd(sum, x[i]);
}

// Warp votes and broadcasts: lane 0's value to all, the ballot of odd values, prefix by shfl_up.
extern "C" __global__ void votes(const int* x, int* first, unsigned* ballot, int* prefix) {
  int lane = threadIdx.x, v = x[lane];
  first[lane] = __shfl_sync(0xffffffffu, v, 0);
  ballot[lane] = __ballot_sync(0xffffffffu, v & 1);
  int p = v;
  for (int d = 1; d < 32; d *= 2) {
    int up = __shfl_up_sync(0xffffffffu, p, d);
    if (lane >= d) p += up;
  }
  prefix[lane] = p;
}

// One warp per 16x16 tile of C = A B^T, fp16 inputs, fp32 accumulators (n a multiple of 16).
extern "C" __global__ void wmma_gemm(const __half* A, const __half* B, float* C, int n) {
  using namespace nvcuda;
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> b;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> c;
  wmma::fill_fragment(c, 0.0f);
  for (int k = 0; k < n; k += 16) {
    wmma::load_matrix_sync(a, A + blockIdx.y * 16 * n + k, n);
    wmma::load_matrix_sync(b, B + blockIdx.x * 16 * n + k, n);
    wmma::mma_sync(c, a, b, c);
  }
  wmma::store_matrix_sync(C + blockIdx.y * 16 * n + blockIdx.x * 16, c, n, wmma::mem_row_major);
}

// Staging through cp.async (a synchronous copy on the CPU), the tail zero-filled.
extern "C" __global__ void staged(const float* in, float* out) {
  __shared__ __align__(16) float s[128];
  __pipeline_memcpy_async(&s[threadIdx.x * 4], &in[threadIdx.x * 4], 16, threadIdx.x == 31 ? 8 : 0);
  __pipeline_commit();
  __pipeline_wait_prior(0);
  __syncthreads();
  out[threadIdx.x] = s[127 - threadIdx.x];
}
"""
ENTRIES = [
    "matmul",
    "rowsum",
    "scan",
    "reverse_tail",
    "halves",
    "total",
    "votes",
    "wmma_gemm",
    "staged",
]


def ptr(array: np.ndarray) -> ctypes.c_void_p:
    return ctypes.c_void_p(array.ctypes.data)


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory) -> Library:
    result = build_library(SOURCE, ENTRIES, timeout_s=300)
    assert result.artifact is not None, result.log
    path = tmp_path_factory.mktemp("emulate") / "kernels.so"
    path.write_bytes(result.artifact)
    return Library(path)


@needs_nvcc
def test_the_same_source_builds_with_nvcc_for_sm90() -> None:
    kernel = Kernel("cuda", SOURCE, "matmul", (), (), {"kernels": [{"entry": e} for e in ENTRIES]})
    result = CudaBuilder().build(kernel, SM90, timeout_s=300)
    assert result.status is RecordStatus.OK, result.log
    assert set(ENTRIES) <= set(result.stats["kernels"])
    assert result.stats["kernels"]["matmul"]["shared_bytes"] == 2 * 16 * 16 * 4


def test_tiled_matmul(library: Library) -> None:
    n = 45
    rng = np.random.default_rng(0)
    a, b = rng.random((n, n), np.float32), rng.random((n, n), np.float32)
    c = np.full((n, n), np.nan, np.float32)
    library.launch("matmul", [3, 3, 1], [16, 16, 1], 0, [ptr(a), ptr(b), ptr(c), ctypes.c_int(n)])
    np.testing.assert_allclose(c, a @ b, rtol=1e-5)


def test_warp_shuffle_reduction_with_dynamic_shared_memory(library: Library) -> None:
    x = np.random.default_rng(1).random((7, 1000), np.float32)
    out = np.full(7, np.nan, np.float32)
    library.launch("rowsum", [7, 1, 1], [256, 1, 1], 8 * 4, [ptr(x), ptr(out), ctypes.c_int(1000)])
    np.testing.assert_allclose(out, x.sum(axis=1), rtol=1e-5)


def test_barrier_heavy_scan(library: Library) -> None:
    n = 1000
    x = np.random.default_rng(2).integers(-100, 100, n).astype(np.int32)
    out = np.zeros(n, np.int32)
    library.launch("scan", [4, 1, 1], [256, 1, 1], 0, [ptr(x), ptr(out), ctypes.c_int(n)])
    blocks = [np.cumsum(x[s : s + 256]) for s in range(0, n, 256)]
    np.testing.assert_array_equal(out, np.concatenate(blocks))


def test_exited_threads_leave_the_barrier(library: Library) -> None:
    x = np.arange(128, dtype=np.float32)
    out = np.full(128, -1.0, np.float32)
    library.launch("reverse_tail", [1, 1, 1], [128, 1, 1], 0, [ptr(x), ptr(out), ctypes.c_int(50)])
    np.testing.assert_array_equal(out[:50], x[:50][::-1])
    assert (out[50:] == -1.0).all()


def test_half_and_bfloat16_conversions_round_to_nearest_even(library: Library) -> None:
    special = [0.0, -0.0, 1e-8, 6e-8, 65504.0, 65520.0, 1e6, np.inf, -np.inf, 1 / 3, 2**-24, 2**-25]
    rng = np.random.default_rng(3)
    x = np.concatenate([special, rng.standard_normal(500) * 1000, rng.random(500) * 1e-5])
    x = np.resize(x.astype(np.float32), 1024)
    h, b = np.empty_like(x), np.empty_like(x)
    library.launch("halves", [1, 1, 1], [256, 1, 1], 0, [ptr(x), ptr(h), ptr(b), ctypes.c_int(256)])
    with np.errstate(over="ignore"):  # 65520 and 1e6 overflow to infinity, as they should
        np.testing.assert_array_equal(h, x.astype(np.float16).astype(np.float32))
    np.testing.assert_array_equal(b, x.astype(ml_dtypes.bfloat16).astype(np.float32))


def test_atomic_add_across_blocks(library: Library) -> None:
    x = np.ones(5000, np.float32)
    total = np.zeros(1, np.float32)
    library.launch("total", [40, 1, 1], [128, 1, 1], 0, [ptr(x), ptr(total), ctypes.c_int(5000)])
    assert total[0] == 5000.0


def test_warp_broadcast_ballot_and_scan(library: Library) -> None:
    x = np.random.default_rng(4).integers(0, 50, 32).astype(np.int32)
    first, prefix = np.zeros(32, np.int32), np.zeros(32, np.int32)
    ballot = np.zeros(32, np.uint32)
    library.launch(
        "votes", [1, 1, 1], [32, 1, 1], 0, [ptr(x), ptr(first), ptr(ballot), ptr(prefix)]
    )
    assert (first == x[0]).all()
    assert (ballot == sum(1 << i for i in range(32) if x[i] & 1)).all()
    np.testing.assert_array_equal(prefix, np.cumsum(x))


def test_wmma_fragments(library: Library) -> None:
    n = 48
    rng = np.random.default_rng(5)
    a, b = rng.random((n, n)).astype(np.float16), rng.random((n, n)).astype(np.float16)
    c = np.full((n, n), np.nan, np.float32)
    library.launch("wmma_gemm", [3, 3, 1], [32, 1, 1], 0, [ptr(a), ptr(b), ptr(c), ctypes.c_int(n)])
    np.testing.assert_allclose(c, a.astype(np.float32) @ b.astype(np.float32).T, rtol=1e-5)


def test_cp_async_fallback_copies_and_zero_fills(library: Library) -> None:
    x = np.arange(1, 129, dtype=np.float32)
    out = np.zeros(32, np.float32)
    library.launch("staged", [1, 1, 1], [32, 1, 1], 0, [ptr(x), ptr(out)])
    staged = x.copy()
    staged[126:] = 0.0  # lane 31 copied 8 of its 16 bytes and zero-filled the rest
    np.testing.assert_array_equal(out, staged[127:95:-1])


def test_refused_launches_raise(tmp_path: Path) -> None:
    lib = _library('extern "C" __global__ void k(int* x) { x[threadIdx.x] = 1; }', "k", tmp_path)
    x = np.zeros(4096, np.int32)
    with pytest.raises(EmulationError, match="invalid block dimensions"):
        lib.launch("k", [1, 1, 1], [2048, 1, 1], 0, [ptr(x)])
    with pytest.raises(EmulationError, match="invalid grid"):
        lib.launch("k", [0, 1, 1], [32, 1, 1], 0, [ptr(x)])


def test_a_barrier_not_all_threads_reach_is_a_deadlock(tmp_path: Path) -> None:
    source = """extern "C" __global__ void k(int* x) {
      if (threadIdx.x < 16) __syncwarp(); else __syncthreads();
      x[threadIdx.x] = 1;
    }"""
    lib = _library(source, "k", tmp_path)
    x = np.zeros(32, np.int32)
    with pytest.raises(EmulationError, match="deadlock"):
        lib.launch("k", [1, 1, 1], [32, 1, 1], 0, [ptr(x)])
    lib.launch("k", [1, 1, 1], [16, 1, 1], 0, [ptr(x)])  # the next launch runs normally
    assert (x[:16] == 1).all()


def test_odd_launches_reverse_the_order_so_missing_barriers_show(tmp_path: Path) -> None:
    # Thread t reads what thread t - 1 wrote, with no barrier between: right when the threads
    # run in order (launch 0), wrong in reverse order (launch 3: shared memory holds zeros
    # from launches 1 and 2, so no stale right answer hides the race).
    source = """extern "C" __global__ void k(const int* in, int* out) {
      __shared__ int s[64];
      s[threadIdx.x] = in[threadIdx.x];
      out[threadIdx.x] = threadIdx.x > 0 ? s[threadIdx.x - 1] : 0;
    }"""
    lib = _library(source, "k", tmp_path)
    x, zeros = np.arange(1, 65, dtype=np.int32), np.zeros(64, np.int32)
    expected = np.concatenate([[0], x[:-1]])
    outs = [np.zeros(64, np.int32) for _ in range(4)]
    for n, out in enumerate(outs):
        lib.launch("k", [1, 1, 1], [64, 1, 1], 0, [ptr(x if n in (0, 3) else zeros), ptr(out)])
    np.testing.assert_array_equal(outs[0], expected)
    assert not (outs[3] == expected).all()


def test_the_portable_context_switch_builds_and_runs(tmp_path: Path) -> None:
    # swapcontext instead of the x86-64 switch: what non-x86 machines use.
    (tmp_path / "kernel.cu").write_text(emulation_source(SOURCE, ["scan"]))
    command = [COMPILER, *FLAGS, "-DCUDA_EMU_UCONTEXT", "-I", str(STUBS), "-include", str(HEADER)]
    command += ["-x", "c++", "-o", "kernel.so", "kernel.cu"]
    subprocess.run(command, cwd=tmp_path, check=True, capture_output=True, timeout=300)
    x = np.arange(300, dtype=np.int32)
    out = np.zeros(300, np.int32)
    Library(tmp_path / "kernel.so").launch(
        "scan", [2, 1, 1], [256, 1, 1], 0, [ptr(x), ptr(out), ctypes.c_int(300)]
    )
    np.testing.assert_array_equal(out, np.concatenate([np.cumsum(x[:256]), np.cumsum(x[256:])]))


def test_a_compile_error_is_reported_with_its_log() -> None:
    result = build_library('extern "C" __global__ void k(int* x) { x[0] = ; }', ["k"], timeout_s=60)
    assert result.status is RecordStatus.COMPILE_ERROR
    assert "kernel.cu:" in result.log and "error" in result.log


def _library(source: str, entry: str, directory: Path) -> Library:
    result = build_library(source, [entry], timeout_s=300)
    assert result.artifact is not None, result.log
    path = directory / f"{entry}.so"
    path.write_bytes(result.artifact)
    return Library(path)


# ---- the emulated runner: one candidate at a time, as a tuning would measure it


@pytest.fixture(scope="module")
def case(tmp_path_factory: pytest.TempPathFactory) -> Case:
    return cases.case(CaseCache(tmp_path_factory.mktemp("cache")))


@pytest.fixture(scope="module")
def runner() -> Iterator[EmulatedRunner]:
    runner = EmulatedRunner()
    yield runner
    runner.close()


_BUILT: dict[str, bytes] = {}


def measure(
    runner: EmulatedRunner, case: Case, kernel: Kernel, timeout_s: float = 60
) -> MeasureResult:
    if kernel.source not in _BUILT:
        built = EmulatedBuilder().build(kernel, SM90, timeout_s=300)
        assert built.artifact is not None, built.log
        _BUILT[kernel.source] = built.artifact
    artifact = _BUILT[kernel.source]
    return runner.run(
        artifact, kernel.metadata(), case, timeout_s=timeout_s, repeats=3, min_repeat_s=0.0
    )


@pytest.mark.parametrize("kernel", cases.CORRECT_ONES)
def test_correct_candidates_pass_without_latencies(
    runner: EmulatedRunner, case: Case, kernel: Kernel
) -> None:
    result = measure(runner, case, kernel)
    assert result.status is RecordStatus.OK, result.log
    assert result.latencies_s == [] and result.latency_s is None
    assert result.max_error is not None and result.max_error < 1e-6


@pytest.mark.parametrize(
    ("kernel", "status", "log"),
    [
        (cases.WRONG, RecordStatus.WRONG_ANSWER, "elements differ"),
        (cases.MISSES_LAST, RecordStatus.WRONG_ANSWER, "1 of 1000 elements differ"),
        (cases.PAST_THE_END, RecordStatus.RUNTIME_ERROR, "guard bytes"),
        (cases.INTO_INPUT, RecordStatus.RUNTIME_ERROR, "into its input 'a'"),
        (cases.FAULTS, RecordStatus.RUNTIME_ERROR, "SIGSEGV"),
        (cases.TOO_MANY_THREADS, RecordStatus.RUNTIME_ERROR, "invalid block dimensions"),
    ],
    ids=["wrong", "misses-last", "past-the-end", "into-input", "faults", "too-many-threads"],
)
def test_failures_are_recorded_and_the_runner_carries_on(
    runner: EmulatedRunner, case: Case, kernel: Kernel, status: RecordStatus, log: str
) -> None:
    result = measure(runner, case, kernel)
    assert result.status is status
    assert log in result.log
    assert measure(runner, case, cases.CORRECT).status is RecordStatus.OK


def test_a_hanging_kernel_is_killed_at_the_deadline(runner: EmulatedRunner, case: Case) -> None:
    result = measure(runner, case, cases.HANGS, timeout_s=2)
    assert result.status is RecordStatus.RUN_TIMEOUT
    assert "timed out after 2 s during the first (checked) run" in result.log
    assert measure(runner, case, cases.CORRECT).status is RecordStatus.OK


def test_a_grid_with_a_zero_extent_is_not_launched(tmp_path: Path) -> None:
    # N = 1: the second kernel's grid, (N - 1) / 128, is empty; the first computes everything.
    extra = [
        {
            "entry": "axpy_1",
            "grid": ["(N - 1) / 128", "1", "1"],
            "block": [128, 1, 1],
            "shared_bytes": 0,
        }
    ]
    prelude = (
        'extern "C" __global__ void axpy_1(const float*, const float*, float* out, int64_t) '
        "{ out[0] = 0.0f; }"
    )
    kernel = cases.kernel(
        f"{cases.INDEX}\nif (i < n) out[i] = 2.0f * a[i] + b[i];", prelude=prelude, extra=extra
    )
    runner = EmulatedRunner()
    try:
        result = measure(runner, cases.case(CaseCache(tmp_path), n=1), kernel)
    finally:
        runner.close()
    assert result.status is RecordStatus.OK, result.log
