"""The CUDA dialect and the launch metadata: kernels per stage, grids as expressions of the
symbols, workspaces, dynamic shared memory, and the rules of GPU functions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tunehub.compiler.backend import render
from tunehub.compiler.ir import Binary, Cast, Const, Load, Program
from tunehub.compiler.loop import (
    Barrier,
    Buffer,
    Decl,
    For,
    Function,
    Seq,
    Store,
    add,
    const,
    seq,
    var,
)
from tunehub.compiler.lower import lower
from tunehub.compiler.program import load
from tunehub.compiler.space import space_for
from tunehub.runtime.abi import eval_extent
from tunehub.schemas.target import Target

CUDA = Target(kind="cuda", arch="sm_90")
EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def example(name: str) -> Program:
    return load(json.loads((EXAMPLES / f"{name}.json").read_text()))


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("(M + 63) / 64", 2),
        ("M * 4 - 1", 267),
        ("-7 / 2", -3),
        ("-7 % 2", -1),
        ("min(M, 16) + max(3, N)", 24),
        ("((N))", 8),
    ],
)
def test_eval_extent(text: str, value: int) -> None:
    assert eval_extent(text, {"M": 67, "N": 8}) == value


@pytest.mark.parametrize("text", ["M ** 2", "__import__('os')", "M.real", "abs(M)", "1.5", "K", ""])
def test_eval_extent_rejects_what_is_outside_the_grammar(text: str) -> None:
    with pytest.raises(ValueError):
        eval_extent(text, {"M": 3})


def test_unfused_stages_are_kernels_with_workspaces() -> None:
    program = example("softmax")
    config = {**space_for(program, CUDA).naive()}
    kernel = lower(program, CUDA, config)
    assert kernel.language == "cuda"
    entries = [k["entry"] for k in kernel.launch["kernels"]]
    assert entries == [f"{kernel.entry}_{n}" for n in range(3)]
    assert all(
        f'extern "C" __global__ void __launch_bounds__(256) {e}(' in kernel.source for e in entries
    )
    assert kernel.launch["workspace"] == [
        {"name": "row_max", "bytes": "1024"},
        {"name": "row_sum", "bytes": "1024"},
    ]
    assert [k["block"] for k in kernel.launch["kernels"]] == [[256, 1, 1]] * 3


def test_a_fused_row_group_is_one_kernel_with_a_block_per_row() -> None:
    program = example("layernorm")
    kernel = lower(program, CUDA, space_for(program, CUDA).default())
    (launch,) = kernel.launch["kernels"]
    assert launch["grid"] == ["256", "1", "1"]
    assert kernel.source.count("__syncthreads();") >= 2


def test_buffers_threads_hand_each_other_are_not_restrict() -> None:
    """A fused kernel's row statistics are written by one thread and read by the block after a
    barrier: declared `__restrict__`, nvcc hoisted the other threads' reads above the barrier
    (an H100 returned NaN). Inputs and write-only outputs keep it."""
    program = example("softmax")
    space = space_for(program, CUDA)
    config = {**space.default(), **{k: True for k in space.knobs if k.endswith(".fuse")}}
    source = lower(program, CUDA, config).source
    assert "const float* __restrict__ X_, float* __restrict__ Y_, " in source
    assert "float* row_max_, float* row_sum_)" in source


def test_grids_are_expressions_of_the_symbols() -> None:
    program = example("int4_matmul")
    space = space_for(program, CUDA)
    config = {**space.default(), "s0.mode": "tiled"}
    kernel = lower(program, CUDA, config)
    (launch,) = kernel.launch["kernels"]
    assert "M" in "".join(launch["grid"])
    for m in (1, 63, 64, 65, 4096):
        grid = [eval_extent(g, {"M": m}) for g in launch["grid"]]
        assert grid[0] * grid[1] * 64 * 64 >= m * 4096


def test_split_k_adds_a_kernel_and_a_workspace() -> None:
    program = example("matmul_128")
    space = space_for(program, CUDA)
    config = {**space.default(), "s0.mode": "tiled", "s0.split_k": 4, "s0.double": False}
    config.update({"s0.bm": 32, "s0.bn": 32, "s0.tm": 2, "s0.tn": 2, "s0.vec": False})
    assert space.check(config) is None
    kernel = lower(program, CUDA, config)
    assert len(kernel.launch["kernels"]) == 2
    assert kernel.launch["kernels"][0]["grid"][2] == "4"
    (workspace,) = kernel.launch["workspace"]
    assert eval_extent(workspace["bytes"], {}) == 4 * 128 * 128 * 4


def test_large_tiles_take_dynamic_shared_memory() -> None:
    program = example("matmul_1024")
    space = space_for(program, CUDA)
    config = {**space.naive(), "s0.mode": "tiled", "s0.bm": 128, "s0.bn": 128, "s0.bk": 32}
    config.update({"s0.tm": 8, "s0.tn": 8, "s0.double": True})
    assert space.check(config) is None
    kernel = lower(program, CUDA, config)
    (launch,) = kernel.launch["kernels"]
    assert launch["shared_bytes"] > 48 * 1024
    assert "extern __shared__" in kernel.source and "__shared__ float " not in kernel.source


def test_half_buffers_are_cuda_half_types() -> None:
    program = example("int4_matmul")
    kernel = lower(program, CUDA, space_for(program, CUDA).naive())
    assert "const __half* __restrict__ X_" in kernel.source
    assert "#include <cuda_fp16.h>" in kernel.source and "cuda_bf16.h" not in kernel.source
    assert "__float2half_rn" in kernel.source


def _fn(body: Seq | For) -> Function:
    return Function("f", (), (Buffer("y", "float32", (64,)),), (), body)


def test_gpu_functions_follow_their_rules() -> None:
    tx = For("tx", const(64), Store("y", (var("tx"),), const(1)), "threadIdx.x")
    ok = For("b", const(1), seq(tx, Barrier()), "blockIdx.x")
    assert "__syncthreads();" in render(_fn(ok), "cuda")
    with pytest.raises(ValueError, match="kernel"):
        render(_fn(tx), "cuda")  # not headed by a block binding
    narrow = For("tx", const(32), seq(Barrier()), "threadIdx.x")
    with pytest.raises(ValueError, match="barrier"):
        render(_fn(For("b", const(1), seq(tx, narrow), "blockIdx.x")), "cuda")
    with pytest.raises(ValueError, match="binding"):
        render(_fn(ok), "cpu")


def test_small_integers_become_floats_by_their_bits_and_others_by_conversion() -> None:
    """A masked nibble minus 7 converts through the float32 mantissa; an integer read whose
    range is unknown keeps C's conversion. (The emulated int4 checks prove the values.)"""
    nibble = Binary("&", Load("q", (var("i"),), "int32"), Const(15, "int32"), "int32")
    small = Cast("float32", Binary("-", nibble, Const(7, "int32"), "int32"))
    unknown = Cast("float32", Load("q", (var("i"),), "int32"))
    body = For("i", const(4), seq(Store("a", (var("i"),), small), Store("b", (var("i"),), unknown)))
    fn = Function(
        "f",
        (Buffer("q", "int32", (4,)),),
        (Buffer("a", "float32", (4,)), Buffer("b", "float32", (4,))),
        (),
        For("bx", const(1), body, "blockIdx.x"),
    )
    source = render(fn, "cuda")
    assert "__uint_as_float(0x4B000000u | " in source and "- 8388615.0f)" in source
    assert source.count("__uint_as_float") == 1 and "((float)(q_[i]))" in source


def test_int4_values_go_to_half_tiles_in_half_arithmetic() -> None:
    """`float32(nibble - 7) * float32(scale)` stored to a float16 tile is computed in float16
    (exact operands, one rounding); a product with a float32 factor keeps the store's
    rounding. (The emulated int4 tensor-core checks prove the values.)"""
    nibble = Binary("&", Load("q", (var("i"),), "int32"), Const(15, "int32"), "int32")
    small = Cast("float32", Binary("-", nibble, Const(7, "int32"), "int32"))
    half = Cast("float32", Load("s", (var("i"),), "float16"))
    single = Load("f", (var("i"),), "float32")
    tile = Decl("tile", "float16", (8,), shared=True)
    stores = seq(
        Store("tile", (var("i"),), Binary("*", small, half, "float32")),
        Store("tile", (add(var("i"), const(4)),), Binary("*", small, single, "float32")),
    )
    fn = Function(
        "f",
        (Buffer("q", "int32", (4,)), Buffer("s", "float16", (4,)), Buffer("f", "float32", (4,))),
        (Buffer("a", "float32", (4,)),),
        (),
        For("bx", const(1), seq(tile, For("i", const(4), stores, "threadIdx.x")), "blockIdx.x"),
    )
    lines = [line for line in render(fn, "cuda").splitlines() if "tile[" in line and "=" in line]
    assert "= __hmul(__hsub(__ushort_as_half(" in lines[0] and "store_f16" not in lines[0]
    assert "__ushort_as_half((unsigned short)25607u)" in lines[0]  # 1024 + 7 in float16
    assert "store_f16(" in lines[1] and "__hmul" not in lines[1]
