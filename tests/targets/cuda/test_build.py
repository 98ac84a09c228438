"""The nvcc builder: cubins with their ptxas statistics, compile errors and timeouts, and
batches (one front end for several candidates, cut apart again, with a fallback to building
one by one when the batch fails)."""

from __future__ import annotations

import hashlib
import struct

import pytest

from tests.targets.cuda.cases import needs_nvcc
from tunehub.compiler.kernel import Kernel
from tunehub.schemas.record import RecordStatus
from tunehub.schemas.target import Target
from tunehub.targets.cuda.build import CudaBuilder, batch_source, parse_ptxas, split_log, split_ptx

SM80 = Target(kind="cuda", arch="sm_80")
SM90 = Target(kind="cuda", arch="sm_90")

TILED = """#include <stdint.h>
#define TILE 16
extern "C" __global__ void __launch_bounds__(256) ENTRY(const float* a, float* out, int64_t n) {
  __shared__ float tile[TILE][TILE];
  tile[threadIdx.y][threadIdx.x] = a[(blockIdx.x * TILE + threadIdx.y) * TILE + threadIdx.x];
  __syncthreads();
  int64_t i = (blockIdx.x * TILE + threadIdx.x) * TILE + threadIdx.y;
  out[i] = SCALE * tile[threadIdx.y][threadIdx.x];
}
"""
# A register array indexed at run time lives in local memory: a stack frame.
STACK = """extern "C" __global__ void ENTRY(const int* idx, float* out) {
  float local[64];
  for (int i = 0; i < 64; i++) local[i] = out[i];
  for (int i = 0; i < 64; i++) local[idx[i] & 63] += 1.0f;
  out[threadIdx.x] = local[idx[threadIdx.x] & 63];
}
"""


def cuda(source: str, entry: str = "tiled", scale: str = "2.0f") -> Kernel:
    text = source.replace("ENTRY", entry).replace("SCALE", scale)
    return Kernel("cuda", text, entry, (), (), {"kernels": [{"entry": entry}]})


@needs_nvcc
@pytest.mark.parametrize("target", [SM80, SM90], ids=["sm_80", "sm_90"])
def test_builds_a_cubin_with_its_resource_usage(target: Target) -> None:
    result = CudaBuilder().build(cuda(TILED), target, timeout_s=300)
    assert result.status is RecordStatus.OK, result.log
    assert result.artifact is not None and result.artifact.startswith(b"\x7fELF")
    assert result.sha256 == hashlib.sha256(result.artifact).hexdigest()
    assert result.stats["arch"] == target.arch
    assert result.stats["compiler"].startswith("nvcc 13")
    usage = result.stats["kernels"]["tiled"]
    assert usage["registers"] > 0
    assert usage["shared_bytes"] == 16 * 16 * 4
    assert usage["barriers"] == 1
    assert usage["spill_store_bytes"] == usage["spill_load_bytes"] == 0


@needs_nvcc
def test_a_stack_frame_is_reported() -> None:
    result = CudaBuilder().build(cuda(STACK, "stacky"), SM90, timeout_s=300)
    assert result.status is RecordStatus.OK, result.log
    assert result.stats["kernels"]["stacky"]["stack_bytes"] >= 64 * 4


@needs_nvcc
def test_ptx_is_kept_when_asked() -> None:
    result = CudaBuilder(emit_ptx=True).build(cuda(TILED), SM90, timeout_s=300)
    assert ".visible .entry tiled(" in result.stats["ptx"]
    assert "ptx" not in CudaBuilder().build(cuda(TILED), SM90, timeout_s=300).stats


@needs_nvcc
def test_a_compile_error_keeps_the_log() -> None:
    result = CudaBuilder().build(cuda(TILED, scale="undefined_name"), SM90, timeout_s=300)
    assert result.status is RecordStatus.COMPILE_ERROR
    assert result.artifact is None
    assert "kernel.cu(" in result.log and "undefined_name" in result.log


@needs_nvcc
def test_a_slow_build_times_out() -> None:
    result = CudaBuilder().build(cuda(TILED), SM90, timeout_s=0.05)
    assert result.status is RecordStatus.COMPILE_TIMEOUT
    assert "timed out" in result.log


@needs_nvcc
def test_a_batch_builds_each_candidate_as_if_alone() -> None:
    # Same entry and macro names in every candidate: the batch keeps them apart.
    scales = (3, 5, 7)
    kernels = [cuda(TILED, scale=f"{n}.0f") for n in scales] + [cuda(STACK, "stacky")]
    results = CudaBuilder(emit_ptx=True).build_many(kernels, SM90, timeout_s=300)
    assert [r.status for r in results] == [RecordStatus.OK] * 4, results[0].log
    assert [set(r.stats["kernels"]) for r in results] == [{"tiled"}] * 3 + [{"stacky"}]
    for scale, result in zip(scales, results, strict=False):
        ptx = result.stats["ptx"]
        assert ptx.count(".entry") == 1 and ".visible .entry tiled(" in ptx
        assert "batch" not in ptx
        assert f"0f{struct.pack('>f', scale).hex().upper()}" in ptx  # its own SCALE
    alone = CudaBuilder().build(kernels[0], SM90, timeout_s=300)
    assert results[0].stats["kernels"] == alone.stats["kernels"]


@needs_nvcc
def test_a_batch_gives_each_candidate_its_own_warnings() -> None:
    warns = cuda(TILED.replace("__syncthreads();", "__syncthreads();\n  int unused = 1;"))
    results = CudaBuilder().build_many([cuda(TILED), warns, cuda(TILED)], SM90, timeout_s=300)
    alone = CudaBuilder().build(warns, SM90, timeout_s=300)
    assert all(r.status is RecordStatus.OK for r in results)
    assert "warning" not in results[0].log + results[2].log
    assert results[1].log.splitlines()[0] == alone.log.splitlines()[0]
    assert results[1].log.startswith('kernel.cu(7): warning #177-D: variable "unused"')


@needs_nvcc
def test_a_broken_candidate_fails_alone() -> None:
    kernels = [cuda(TILED), cuda(TILED, scale="undefined_name"), cuda(STACK, "stacky")]
    results = CudaBuilder().build_many(kernels, SM80, timeout_s=300)
    assert [r.status for r in results] == [
        RecordStatus.OK,
        RecordStatus.COMPILE_ERROR,
        RecordStatus.OK,
    ]
    assert "undefined_name" in results[1].log
    assert "undefined_name" not in results[0].log + results[2].log


def test_batch_source_hoists_includes_and_scopes_macros() -> None:
    source = batch_source([(cuda(TILED).source, ["tiled"]), (cuda(TILED).source, ["tiled"])])
    assert source.count("#include <stdint.h>") == 1
    assert source.index("#include") < source.index("namespace tunehub_batch_0")
    assert "#define tiled tiled__tunehub_batch0" in source
    assert "#define tiled tiled__tunehub_batch1" in source
    assert source.count("#undef TILE") == 2


def test_split_ptx_keeps_one_units_entries_under_their_names() -> None:
    ptx = "\n".join(
        [
            ".version 9.0",
            ".target sm_90",
            "\t// .globl\tk__tunehub_batch0",
            ".visible .entry k__tunehub_batch0(",
            "\t.param .u64 k__tunehub_batch0_param_0",
            ")",
            "{",
            "\t.shared .align 4 .b8 _ZZ17k__tunehub_batch0E1s[64];",
            "\tret;",
            "}",
            "\t// .globl\tk__tunehub_batch1",
            ".visible .entry k__tunehub_batch1(",
            ")",
            "{",
            "\tret;",
            "}",
        ]
    )
    first = split_ptx(ptx, 0)
    assert ".visible .entry k(" in first and "k_param_0" in first
    assert "_ZZ1kE1s[64]" in first  # the mangled length follows the name
    assert "batch" not in first
    second = split_ptx(ptx, 1)
    assert second.count(".entry") == 1 and ".visible .entry k(" in second
    assert "_param_0" not in second


def test_split_ptx_skips_inline_asm_blocks_of_other_units() -> None:
    """An inline asm block's closing brace on a line of its own ends nothing but the block."""
    ptx = "\n".join(
        [
            ".visible .entry k__tunehub_batch0(",
            ")",
            "{",
            "\t// begin inline asm",
            "\t{",
            ".reg .pred p;",
            "}",
            "\t// end inline asm",
            "\tadd.s32 %r1, %r2, 1;",
            "}",
            ".visible .entry k__tunehub_batch1(",
            ")",
            "{",
            "\tret;",
            "}",
        ]
    )
    second = split_ptx(ptx, 1)
    assert "add.s32" not in second and ".reg .pred" not in second
    assert second.count(".entry") == 1 and second.count("}") == 1


def test_split_log_sends_each_diagnostic_to_its_candidate() -> None:
    log = "\n".join(
        [
            "nvcc warning : a general remark",
            'candidate_1.cu(3): warning #177-D: variable "x" was declared but never referenced',
            "    int x = 1;",
            "        ^",
            "",
            'Remark: The warnings can be suppressed with "-diag-suppress <warning-number>"',
            "candidate_0.cu(9): warning #550-D: variable y was set but never used",
        ]
    )
    first, second, third = split_log(log, 3)
    assert first.splitlines() == [
        "nvcc warning : a general remark",
        "kernel.cu(9): warning #550-D: variable y was set but never used",
    ]
    assert second.splitlines()[1].startswith("kernel.cu(3): warning #177-D")
    assert "Remark" not in second and "candidate" not in second
    assert third == "nvcc warning : a general remark"


def test_parse_ptxas_reads_every_figure() -> None:
    log = """ptxas info    : (C7514) Potential Performance Loss: wgmma.mma_async instructions are \
serialized due to non wgmma instructions reading accumulator registers of  a wgmma between start \
and end of the pipeline stage in the function 'gemm'
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'gemm' for 'sm_90'
ptxas info    : Function properties for gemm
    24 bytes stack frame, 16 bytes spill stores, 8 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers, 33024 bytes smem, 392 bytes cmem[0]
ptxas info    : Compiling entry function 'tail' for 'sm_90'
ptxas info    : Function properties for tail
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 12 registers, 360 bytes cmem[0]
"""
    assert parse_ptxas(log) == {
        "gemm": {
            "stack_bytes": 24,
            "spill_store_bytes": 16,
            "spill_load_bytes": 8,
            "registers": 255,
            "barriers": 1,
            "shared_bytes": 33024,
            "constant_bytes": 392,
            "wgmma_serialized": 1,
        },
        "tail": {
            "stack_bytes": 0,
            "spill_store_bytes": 0,
            "spill_load_bytes": 0,
            "registers": 12,
            "barriers": 0,
            "shared_bytes": 0,
            "constant_bytes": 360,
        },
    }


def test_only_cuda_targets_are_built() -> None:
    with pytest.raises(ValueError, match="CudaBuilder"):
        CudaBuilder().build(cuda(TILED), Target(kind="cuda"), timeout_s=1)
