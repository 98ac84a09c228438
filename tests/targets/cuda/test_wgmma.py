"""The Hopper tensor-core contraction mode (`wgmma`): where the space offers it, its checks,
the rendered PTX, nvcc builds for sm_90 (as sm_90a), and emulated runs (the worker's path:
emulated build, sandboxed run, verification against the reference evaluator) for every
factor layout (K-major and M/N-major A and B), float16 and bfloat16, symbolic and
non-dividing sizes, an epilogue and an int4-dequantizing prologue; and for the producer
kernel's forms: reads a slice ahead, tiles in turn, ping-pong warpgroups, and tiles brought
and stored by the copy engine (TMA).

The emulator reads the factors through the descriptors the kernel builds, by the layout the
PTX ISA gives for them, and writes and reads TMA boxes through the same swizzle, so a tile
stored one way and described another fails here. Whether the hardware reads them the same
way is for the `gpu` tests on an sm_90 machine."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.compiler.test_lower import c, signature, t
from tests.targets.cuda.test_wmma import assert_right, int4_matmul, matmul, modes
from tunehub.compiler.ir import Program
from tunehub.compiler.lower import lower
from tunehub.compiler.space import space_for
from tunehub.compiler.space.space import Config, Space
from tunehub.schemas.record import RecordStatus
from tunehub.schemas.target import Target
from tunehub.targets.cuda import device
from tunehub.targets.cuda.build import CudaBuilder, build_arch
from tunehub.targets.gpu.schedule.gemv import GEMV_SEEDS

SM80 = Target(kind="cuda", arch="sm_80")
SM90 = Target(kind="cuda", arch="sm_90")
VARIANTS: list[dict[str, Any]] = [
    {"wgmma_bm": 64, "wgmma_bn": 64, "wgmma_groups": 1, "wgmma_stages": 2},
    {"wgmma_bm": 128, "wgmma_bn": 128, "wgmma_groups": 2, "wgmma_stages": 3, "wgmma_in_flight": 1},
    {"wgmma_bm": 128, "wgmma_bn": 64, "wgmma_groups": 1, "wgmma_stages": 4, "wgmma_in_flight": 1},
    {"wgmma_bm": 256, "wgmma_bn": 128, "wgmma_groups": 2, "wgmma_stages": 3},
    {"wgmma_bm": 64, "wgmma_bn": 256, "wgmma_groups": 1, "wgmma_stages": 2},
    {"wgmma_bm": 128, "wgmma_bn": 64, "wgmma_groups": 2, "wgmma_stages": 3, "wgmma_producer": True},
    {
        "wgmma_bm": 128,
        "wgmma_bn": 128,
        "wgmma_groups": 1,
        "wgmma_stages": 4,
        "wgmma_in_flight": 1,
        "wgmma_producer": True,
    },
]

# Tiles in turn (a producer runs on into a block's next tile), in row order and grouped with a
# slice in flight, and with int4 weights read a slice ahead (`wgmma_prefetch`, where it exists).
TURNS: list[dict[str, Any]] = [
    {**VARIANTS[5], "wgmma_tiles": 8},
    {**VARIANTS[5], "wgmma_tiles": 8, "wgmma_raster": 8, "wgmma_in_flight": 1},
    {**VARIANTS[5], "wgmma_tiles": 2, "wgmma_prefetch": True},
]

# The copy engine bringing the tiles of the sides copied as they are (`wgmma_tma`, where it
# exists): with a slice in flight, and in turns of several tiles per block.
TMA: list[dict[str, Any]] = [
    {**VARIANTS[6], "wgmma_tma": True},
    {**VARIANTS[5], "wgmma_tiles": 2, "wgmma_raster": 8, "wgmma_tma": True},
]

# Ping-pong: each consumer warpgroup computes whole tiles, the two taking turns: one tile each,
# then two each with a slice in flight in grouped order.
PINGPONG: list[dict[str, Any]] = [
    {**VARIANTS[5], "wgmma_pingpong": True, "wgmma_tiles": 2},
    {
        **VARIANTS[5],
        "wgmma_pingpong": True,
        "wgmma_tiles": 4,
        "wgmma_stages": 4,
        "wgmma_in_flight": 1,
        "wgmma_raster": 8,
    },
]

# The tile stored through shared memory by the copy engine (`wgmma_store`, where it exists).
STORE: list[dict[str, Any]] = [
    {**VARIANTS[5], "wgmma_store": True},
    {**PINGPONG[1], "wgmma_store": True, "wgmma_tma": True},
]


def wgmma_config(space: Space, **knobs: Any) -> Config:
    """The naive config with every contraction stage in `wgmma` mode and `knobs` set."""
    config = dict(space.naive())
    for name in config:
        knob = name.split(".", 1)[1]
        if knob == "mode" and "wgmma" in space.knobs[name]:
            config[name] = "wgmma"
        elif knob in knobs:
            config[name] = knobs[knob]
    assert space.check(config) is None, space.check(config)
    return config


def matmul_nt(dtype: str, m: int, n: int, k: int, a_transposed: bool = False) -> Program:
    """`A[m, k] x B[n, k]` (both K-major), or with `A[k, m]` (A M-major)."""
    a = "float32(A[k, m])" if a_transposed else "float32(A[m, k])"
    computes = [c("acc", "mn", [m, n], f"{a} * float32(B[n, k])", op="sum", over={"k": k})]
    inputs = [t("A", [k, m] if a_transposed else [m, k], dtype), t("B", [n, k], dtype)]
    return signature(computes, inputs, ["acc"])


def test_offered_on_sm90_only() -> None:
    assert "wgmma" in modes(matmul("float16", 64, 96, 80), SM90)
    assert "wgmma" in modes(int4_matmul(), SM90)
    assert "wgmma" not in modes(matmul("float16", 64, 96, 80), SM80)
    assert "wgmma" not in modes(matmul("float32", 64, 96, 80), SM90)
    assert not any("wgmma" in name for name in space_for(matmul("float16", 64, 96, 80), SM80).knobs)


def test_check_rejects_what_the_warpgroups_cannot_tile_or_hold() -> None:
    space = space_for(matmul("float16", 64, 96, 80), SM90)
    config = wgmma_config(space)
    odd = {**config, **{k: 64 for k in config if k.endswith("wgmma_bm")}}
    odd.update({k: 2 for k in odd if k.endswith("wgmma_groups")})  # 32 rows per warpgroup
    assert "slab" in (space.check(odd) or "")
    big = {**config, **{k: 256 for k in config if k.endswith(("wgmma_bm", "wgmma_bn"))}}
    big.update({k: 2 for k in big if k.endswith("wgmma_groups")})  # 256 accumulators
    assert "registers" in (space.check(big) or "")
    big.update({k: 128 for k in big if k.endswith("wgmma_bn")})
    big.update({k: 4 for k in big if k.endswith("wgmma_stages")})  # 4 x 48 KiB: fits
    assert space.check(big) is None
    wide = {**big, **{k: 256 for k in big if k.endswith("wgmma_bn")}}
    wide.update({k: 1 for k in wide if k.endswith("wgmma_groups")})
    assert space.check(wide) is not None  # 4 slabs of 256 columns
    eager = {**config, **{k: 1 for k in config if k.endswith("wgmma_in_flight")}}
    assert space.check(eager) is None  # 3 stages: one slice ahead, one in flight
    eager.update({k: 2 for k in eager if k.endswith("wgmma_stages")})
    assert "no slice ahead" in (space.check(eager) or "")
    tiled = {**config, **{k: 32 for k in config if k.endswith(".bm")}}
    assert space.canonical(tiled) == config


def test_renders_warpgroup_ptx_with_an_emulator_fallback() -> None:
    program = matmul("bfloat16", 64, 96, 80, epilogue=True)
    source = lower(program, SM90, wgmma_config(space_for(program, SM90))).source
    for text in (
        # A is K-major (trans-a 0), B[k, n] N-major (trans-b 1)
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16",
        "p, 1, 1, 0, 1;",
        "::cuda_emu::wgmma<__nv_bfloat16>(d, 128, a, b, 0, 1);",
        "wgmma.fence.sync.aligned;",
        "wgmma.commit_group.sync.aligned;",
        "wgmma.wait_group.sync.aligned 0;",
        "wgmma_hold128(acc",  # 2 slabs x 64: accumulators pinned around the fence and the wait
        "fence.proxy.async.shared::cta;",
        "cp.async.cg.shared.global",
        "extern __shared__ __align__(1024)",  # tiles in dynamic shared memory, atoms aligned
        "(1ull << 62)",  # descriptors of the 128-byte swizzle
        "__floats2bfloat162_rn(",  # neighbouring columns rounded and stored as a pair
    ):
        assert text in source, text


def test_a_producer_warpgroup_hands_stages_over_through_mbarriers() -> None:
    program = matmul("float16", 256, 256, 256)
    space = space_for(program, SM90)
    config = wgmma_config(space, **VARIANTS[-1])
    kernel = lower(program, SM90, config)
    assert kernel.launch["kernels"][0]["block"] == [256, 1, 1]  # producer + one warpgroup
    for text in (
        "mbarrier.init.shared::cta.b64",
        "cp.async.mbarrier.arrive.noinc.shared::cta.b64",
        "mbarrier.try_wait.parity.shared::cta.b64",
        "mbarrier.arrive.shared::cta.b64 _,",
    ):
        assert text in kernel.source, text
    assert kernel.source.count("__syncthreads();") == 1  # only after arming the barriers


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_compiles_for_sm90a_without_spills() -> None:
    programs = [matmul("float16", 64, 96, 80, epilogue=True), int4_matmul()]
    found = []
    for program in programs:
        space = space_for(program, SM90)
        found += [lower(program, SM90, wgmma_config(space, **v)) for v in VARIANTS]
    # the int4 GEMM's tuned shape (H200, M = 2048), its producer reading a slice ahead, two
    # tiles per block
    eager = {"wgmma_stages": 4, "wgmma_producer": True, "wgmma_prefetch": True, "wgmma_tiles": 2}
    eager = {**VARIANTS[3], **eager}
    found.append(lower(programs[1], SM90, wgmma_config(space, **eager)))
    found.append(lower(programs[1], SM90, wgmma_config(space, **eager, wgmma_tma=True)))
    found += [lower(programs[1], SM90, wgmma_config(space, **v)) for v in STORE]
    space = space_for(programs[0], SM90)
    found += [lower(programs[0], SM90, wgmma_config(space, **v)) for v in TMA]
    assert build_arch("sm_90", found) == "sm_90a"
    assert build_arch(
        "sm_90", [lower(programs[0], SM90, space_for(programs[0], SM90).naive())]
    ) == ("sm_90")
    results = CudaBuilder().build_many(found, SM90, 600)
    for kernel, result in zip(found, results, strict=True):
        assert result.status == RecordStatus.OK, f"{result.log}\n{kernel.source}"
        assert result.stats["arch"] == "sm_90a"
        for stats in result.stats["kernels"].values():
            assert stats["spill_store_bytes"] == 0 and stats["stack_bytes"] == 0


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_seeds_keep_their_wgmmas_overlapping_at_4096() -> None:
    """ptxas serializes the wgmmas of some shapes (C7514); the seeds are ones it does not."""
    program = matmul("float16", 4096, 4096, 4096)
    space = space_for(program, SM90)
    seeds = [lower(program, SM90, seed) for seed in space.seeds()]
    for kernel, result in zip(seeds, CudaBuilder().build_many(seeds, SM90, 600), strict=True):
        assert result.status == RecordStatus.OK, result.log
        assert "wgmma_serialized" not in next(iter(result.stats["kernels"].values())), kernel.source


emulated = pytest.mark.skipif(shutil.which("g++") is None, reason="the emulator needs g++")


def run(tmp_path: Path, program: Program, symbols: dict[str, int]) -> None:
    """Every variant, and with the copy engine where it is offered."""
    space = space_for(program, SM90)
    variants = VARIANTS + (TMA if "s0.wgmma_tma" in space.knobs else [])
    assert_right(tmp_path, program, [wgmma_config(space, **v) for v in variants], symbols)


@emulated
def test_float16_a_k_major_b_n_major_with_edges_and_epilogue(tmp_path: Path) -> None:
    run(tmp_path, matmul("float16", 64, 96, 80, epilogue=True), {})


@emulated
def test_bfloat16_symbolic_rows(tmp_path: Path) -> None:
    run(tmp_path, matmul("bfloat16", "M", 40, 48), {"M": 37})


@emulated
def test_float16_both_k_major(tmp_path: Path) -> None:
    run(tmp_path, matmul_nt("float16", 70, 72, 128), {})


@emulated
def test_float16_a_m_major(tmp_path: Path) -> None:
    run(tmp_path, matmul_nt("float16", 72, 40, 64, a_transposed=True), {})


@emulated
def test_int4_dequant_matmul_through_registers(tmp_path: Path) -> None:
    run(tmp_path, int4_matmul(), {"M": 5})


@emulated
def test_whole_int4_slices_store_each_dequantized_run_at_once(tmp_path: Path) -> None:
    """Where k is whole slices, a thread's 8 dequantized values of a weight word go into the
    swizzled tile as one 16-byte store (with a producer warpgroup and without; the columns'
    edge still zero-fills); where k is not, one store each."""
    whole = lower(int4_matmul(128), SM90, wgmma_config(space_for(int4_matmul(128), SM90)))
    ragged = lower(int4_matmul(96), SM90, wgmma_config(space_for(int4_matmul(96), SM90)))
    assert "vstore_f16x8(&Bs" in whole.source and "vstore_f16x8(&Bs" not in ragged.source
    run(tmp_path, int4_matmul(128), {"M": 5})


def padded_conv(dtype: str) -> Program:
    """A 3 x 3 convolution with a 1-pixel zero border: its image reads are `where`s."""
    image = "float32(data[n, c, y + ry - 1, x + rx - 1])"
    inside = "y + ry >= 1 and y + ry <= 10 and x + rx >= 1 and x + rx <= 10"
    expr = f"where({inside}, {image}, 0.0) * float32(weight[f, c, ry, rx])"
    over = {"c": 8, "ry": 3, "rx": 3}
    computes = [c("out", "nfyx", [2, 16, 10, 10], expr, op="sum", over=over)]
    inputs = [t("data", [2, 8, 10, 10], dtype), t("weight", [16, 8, 3, 3], dtype)]
    return signature(computes, inputs, ["out"])


@emulated
def test_a_prefetching_producer_reads_the_next_slice_ahead(tmp_path: Path) -> None:
    """With `wgmma_prefetch` the producer reads slice t + 1's int4 words and scales into
    registers before it dequantizes slice t. Reads past k's edge (k = 96: a slice and a
    half) or the columns' (40 of a 64- or 128-wide tile) stay guarded; a padded
    convolution's image reads are made whole, with their condition. The knob exists only
    where a side is evaluated, and only with a producer."""
    assert "s0.wgmma_prefetch" not in space_for(matmul("float16", 64, 96, 80), SM90).knobs
    program = int4_matmul()
    space = space_for(program, SM90)
    eager = [wgmma_config(space, **v, wgmma_prefetch=True) for v in VARIANTS[5:]]
    source = lower(program, SM90, eager[0]).source
    assert "ahead[" in source and source.count("W_[") == 2  # slice 0, then slice t + 1
    assert "producer" in (space.check({**eager[0], "s0.wgmma_producer": False}) or "")
    assert_right(tmp_path, program, eager, {"M": 5})
    conv = padded_conv("float16")
    space = space_for(conv, SM90)
    assert_right(tmp_path, conv, [wgmma_config(space, **VARIANTS[5], wgmma_prefetch=True)], {})


def test_the_copy_engine_brings_raw_tiles_through_tensor_maps() -> None:
    """With `wgmma_tma` one producer thread has the copy engine bring each stage's raw tiles:
    a K-major tile in one box, an N-major one in a box per 64 columns, each through a tensor
    map the launch passes after the symbols. Where it brings both sides the producer is that
    thread alone (the stage completes on its arrival and the bytes); an int4 side is still
    evaluated by the producer's threads. It needs a producer."""
    program = matmul("float16", 64, 256, 80)  # A[m, k] K-major, B[k, n] N-major
    space = space_for(program, SM90)
    config = wgmma_config(space, **{**VARIANTS[5], "wgmma_bn": 128}, wgmma_tma=True)
    kernel = lower(program, SM90, config)
    assert kernel.launch["tensor_maps"] == [
        {"name": "A_map_64x128", "arg": "A", "box": [64, 128], "swizzle": 128},
        {"name": "B_map_64x64", "arg": "B", "box": [64, 64], "swizzle": 128},
    ]
    for text in (
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes",
        "mbarrier.expect_tx.relaxed.cta.shared::cta.b64",
        "fence.mbarrier_init.release.cluster;",
        "acc_, const __grid_constant__ TunehubTensorMap A_map_64x128, "
        "const __grid_constant__ TunehubTensorMap B_map_64x64)",
        "mbarrier_init(full + b, 1u);",
        "mbarrier_expect(full + (t % 3), 32768u);",  # 128 x 64 + 128 x 64 halves
    ):
        assert text in kernel.source, text
    assert kernel.source.count("tensor_copy2d(Bs") == 2  # two boxes of 64 columns
    assert "cp_async" not in kernel.source
    assert "tma" in (space.check({**config, "s0.wgmma_producer": False}) or "")
    int4 = int4_matmul()
    space = space_for(int4, SM90)
    source = lower(int4, SM90, wgmma_config(space, **VARIANTS[5], wgmma_tma=True)).source
    assert "tensor_copy2d(As" in source and "tensor_copy2d(Bs" not in source
    assert "mbarrier_init(full + b, 128u);" in source
    # The padded convolution's image is evaluated, its weights' k is three axes: no copies.
    assert "s0.wgmma_tma" not in space_for(padded_conv("float16"), SM90).knobs


@emulated
def test_the_copy_engine_zero_fills_only_past_k(tmp_path: Path) -> None:
    """A side whose buffer runs on past k (A holds 96 columns, k sums 80) is copied by the
    producer's threads, as the copy engine's zeros start at the buffer's edge; the other side
    (B's rows are k's) comes through the copy engine beside those copies."""
    computes = [
        c("acc", "mn", [64, 96], "float32(A[m, k]) * float32(B[k, n])", op="sum", over={"k": 80})
    ]
    inputs = [t("A", [64, 96], "float16"), t("B", [80, 96], "float16")]
    program = signature(computes, inputs, ["acc"])
    space = space_for(program, SM90)
    configs = [wgmma_config(space, **v) for v in TMA]
    source = lower(program, SM90, configs[0]).source
    assert "tensor_copy2d(Bs" in source and "tensor_copy2d(As" not in source
    assert "cp_async16(As" in source
    assert_right(tmp_path, program, configs, {})


@emulated
def test_the_copy_engine_stores_the_tile_from_shared_memory(tmp_path: Path) -> None:
    """With `wgmma_store` each consumer warpgroup writes its rows of the tile, epilogue
    applied, into shared memory (swizzled boxes of 128 bytes of a row), and its first thread
    has the copy engine store them, which leaves out what lies past the output's edges (64
    x 96 in tiles of 128 x 64, bias and ReLU read in range only). The warpgroup meets on a
    named barrier of its own before and after writing; the first thread waits for the last
    stores to read the tile first, and for all of them before the kernel ends. Offered where
    the output's last axis is the columns'; float32 output too, in boxes of 32."""
    program = matmul("float16", 64, 96, 80, epilogue=True)
    space = space_for(program, SM90)
    configs = [wgmma_config(space, **v) for v in STORE]
    kernel = lower(program, SM90, configs[0])
    assert kernel.launch["tensor_maps"][-1] == {
        "name": "out_map_64x64",
        "arg": "out",
        "box": [64, 64],
        "swizzle": 128,
    }
    for text in (
        "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%1, {%2, %3}], [%0];",
        "cp.async.bulk.commit_group;",
        "cp.async.bulk.wait_group.read 0;",
        "cp.async.bulk.wait_group 0;",
        "named_barrier((unsigned)((group + 1)), 128u);",
        "tensor_store2d(Cs + (group * 4096), &out_map_64x64, (int)((bx * 64)),",
    ):
        assert text in kernel.source, text
    stages = lower(program, SM90, {**configs[0], "s0.wgmma_store": False})
    cs = 2 * 64 * 64 * 2  # two warpgroups' 64 x 64 halves
    assert (
        kernel.launch["kernels"][0]["shared_bytes"]
        == stages.launch["kernels"][0]["shared_bytes"] + cs
    )
    assert "producer" in (space.check({**configs[0], "s0.wgmma_producer": False}) or "")
    assert_right(tmp_path, program, configs, {})
    wide = matmul("bfloat16", "M", 40, 48)  # float32 sums: boxes of 32 columns
    boxes = lower(wide, SM90, wgmma_config(space_for(wide, SM90), **STORE[0])).launch
    assert boxes["tensor_maps"][-1]["box"] == [32, 64]
    int4 = int4_matmul()
    eager = {**STORE[1], "wgmma_prefetch": True}
    assert_right(tmp_path, int4, [wgmma_config(space_for(int4, SM90), **eager)], {"M": 200})
    odd = matmul("float16", 64, 36, 80, epilogue=True)  # rows of 72 bytes: not 16-aligned
    knobs = space_for(odd, SM90).knobs
    assert "wgmma" in knobs["s0.mode"] and "s0.wgmma_store" not in knobs


@emulated
def test_a_batch_comes_in_boxes_of_three_dimensions(tmp_path: Path) -> None:
    """A batched NT matmul: each box is 64 k by the tile's lanes by one batch, at the block's
    batch index (grid z), with the copy engine and in ping-pong."""
    expr = "float32(A[b, m, k]) * float32(B[b, n, k])"
    computes = [c("acc", "bmn", [3, 70, 72], expr, op="sum", over={"k": 136})]
    inputs = [t("A", [3, 70, 136], "float16"), t("B", [3, 72, 136], "float16")]
    program = signature(computes, inputs, ["acc"])
    space = space_for(program, SM90)
    configs = [wgmma_config(space, **v) for v in TMA + PINGPONG]
    maps = lower(program, SM90, configs[0]).launch["tensor_maps"]
    assert [m["box"] for m in maps] == [[64, 128, 1], [64, 128, 1]]
    assert_right(tmp_path, program, configs, {})


@emulated
def test_grouped_block_order_covers_every_tile(tmp_path: Path) -> None:
    """10 x 4 tiles in groups of 8 row tiles, the last group partial; and 5 x 4 of them with
    a producer warpgroup, whose copies and consumers' stores each compute the position."""
    program = matmul("float16", 600, 200, 64)
    space = space_for(program, SM90)
    configs = [wgmma_config(space, **variant, wgmma_raster=8) for variant in VARIANTS[::5]]
    assert_right(tmp_path, program, configs, {})


@emulated
def test_tiles_in_turn_cover_every_tile_once(tmp_path: Path) -> None:
    """A block computing several tiles in turn (`wgmma_tiles`): 5 x 4 tiles of 128 x 64
    over 3 blocks of 8 (the last block's last tiles do not exist), in row order and in
    groups of 8 row tiles; 7 k slices through 3 stages, so the stages' phases run on across
    a block's tiles, with a slice left in flight; and the int4 GEMM reading a slice ahead.
    Tiles per block need a producer."""
    program = matmul("float16", 600, 200, 400)
    space = space_for(program, SM90)
    configs = [wgmma_config(space, **turns) for turns in TURNS[:2]]
    assert configs[0]["s0.wgmma_tiles"] == 8
    kernel = lower(program, SM90, configs[0])
    assert kernel.launch["kernels"][0]["grid"] == ["3", "1", "1"]
    assert "producer" in (space.check({**configs[0], "s0.wgmma_producer": False}) or "")
    assert_right(tmp_path, program, configs, {})
    int4 = int4_matmul()
    assert_right(tmp_path, int4, [wgmma_config(space_for(int4, SM90), **TURNS[2])], {"M": 200})


@emulated
def test_pingpong_warpgroups_take_whole_tiles_in_turn(tmp_path: Path) -> None:
    """With `wgmma_pingpong` each consumer warpgroup computes a whole 128 x 64 tile (two
    slabs, its own accumulators) and the two take the block's tiles in turn, their
    mainloops ordered by a barrier each; with a slice in flight each releases its tile's
    last stage itself. 5 x 4 tiles over blocks of 2 and of 4 tiles, 7 k slices; the int4
    GEMM reading a slice ahead with its activations brought by the copy engine. It needs two
    consumer warpgroups and a tile per block for each."""
    program = matmul("float16", 600, 200, 400)
    space = space_for(program, SM90)
    configs = [wgmma_config(space, **v) for v in PINGPONG]
    source = lower(program, SM90, configs[1]).source
    assert "float acc1[64];" in source  # 2 slabs x 64 columns / 2, per warpgroup
    assert "mbarrier_init(empty + b, 128u);" in source  # one warpgroup consumes a slice
    assert "mbarrier_wait(handoff + (tile % 2), (unsigned)((((tile - 1) / 2) % 2)));" in source
    assert "mbarrier_arrive(handoff + ((tile + 1) % 2));" in source
    lone = {**configs[0], "s0.wgmma_tiles": 1}
    assert "pingpong" in (space.check(lone) or "")
    assert "pingpong" in (space.check({**configs[0], "s0.wgmma_groups": 1}) or "")
    assert_right(tmp_path, program, configs, {})
    int4 = int4_matmul()
    eager = {**PINGPONG[1], "wgmma_prefetch": True, "wgmma_tma": True}
    assert_right(tmp_path, int4, [wgmma_config(space_for(int4, SM90), **eager)], {"M": 200})


@emulated
def test_more_k_slices_than_stages(tmp_path: Path) -> None:
    """Every buffer is refilled several times: a refill while a wgmma in flight still reads
    the buffer (the emulator runs it at its wait) gives a wrong answer."""
    run(tmp_path, matmul("bfloat16", 64, 64, 400), {})


def test_seeds_are_the_tensor_core_shapes_and_valid() -> None:
    space = space_for(matmul("float16", 4096, 4096, 4096), SM90)
    seeds = space.seeds()
    modes_of = [next(v for k, v in seed.items() if k.endswith(".mode")) for seed in seeds]
    assert modes_of == ["wgmma"] * 10 + ["wmma"]
    assert all(space.check(seed) is None for seed in seeds)
    first = {k: seeds[0][f"s0.wgmma_{k}"] for k in ("bm", "bn", "groups", "stages", "raster")}
    assert first == {"bm": 128, "bn": 256, "groups": 2, "stages": 4, "raster": 1}
    producers = [seed["s0.wgmma_producer"] for seed in seeds[:10]]
    assert producers == [False, *[True] * 8, False]
    # 16 x 32 tiles of 256 x 128 in turns of 4: 128 blocks, every one resident on 132 SMs;
    # 32 x 32 tiles of 128 x 128 in ping-pong, in turns of 8; each producer shape also with
    # the copy engine
    assert [seed["s0.wgmma_tiles"] for seed in seeds[:10]] == [1, 1, 4, 1, 4, 1, 1, 8, 8, 1]
    tma = [seed["s0.wgmma_tma"] for seed in seeds[:10]]
    assert tma == [False, False, False, True, True, False, True, False, True, False]
    assert [seed["s0.wgmma_pingpong"] for seed in seeds[:10]] == [False] * 7 + [True] * 2 + [False]
    # On sm_80 the WMMA seed only; a float32 GPU matmul has none.
    assert len(space_for(matmul("float16", 4096, 4096, 4096), SM80).seeds()) == 1
    assert space_for(matmul("float32", 256, 256, 256), SM90).seeds() == []
    # Symbolic rows: the long-run GEMV kernel too; 4 rows: only that. Int4 weights are
    # evaluated: each producer shape also reading a slice ahead, both forms also with the
    # activations brought by the copy engine.
    int4_seeds = space_for(int4_matmul(), SM90).seeds()
    assert [s["s0.mode"] for s in int4_seeds] == ["gemv", *["wgmma"] * 14, "wmma"]
    knobs = ("producer", "prefetch", "tma")
    assert [tuple(s[f"s0.wgmma_{k}"] for k in knobs) for s in int4_seeds[1:15]] == [
        (False, False, False),
        *[(True, False, False), (True, True, False), (True, False, True), (True, True, True)] * 3,
        (False, False, False),
    ]
    # M unknown: tiles uncounted, ping-pong's 2 the fewest it takes
    assert [s["s0.wgmma_tiles"] for s in int4_seeds[1:15]] == [1] * 9 + [2] * 4 + [1]
    few = space_for(matmul("float16", 3, 4096, 4096), SM90).seeds()
    assert {(s["s0.mode"], s["s0.gemv_rows"]) for s in few} == {("gemv", 4)}
    assert len(few) == len(GEMV_SEEDS) + 1  # 4 runs of 32 per lane: the first also ahead
    assert [s["s0.gemv_ahead"] for s in few[:3]] == [False, True, False]
    # A tuning measured at M = 1 gets the GEMV shapes only; at M = 2048 no GEMV.
    space = space_for(int4_matmul(), SM90)
    one, many = space.seeds({"M": 1}), space.seeds({"M": 2048})
    assert [(s["s0.mode"], s["s0.gemv_rows"]) for s in one] == [("gemv", 1)] * len(GEMV_SEEDS)
    assert all(space.check(seed) is None for seed in one + many)
    assert [s["s0.mode"] for s in many] == ["wgmma"] * 14 + ["wmma"]
    # 8 x 1 tiles: all resident at once; ping-pong in turns of 2, the fewest it takes
    assert [s["s0.wgmma_tiles"] for s in many[:14]] == [1] * 9 + [2] * 4 + [1]
    # TMA twins store their tiles through the copy engine too where the tile fits beside the
    # stages: not beside 4 stages of 256 x 128
    stored = [i for i, s in enumerate(many) if s.get("s0.wgmma_store")]
    assert stored == [7, 8, 11, 12] and all(many[i]["s0.wgmma_tma"] for i in stored)


@pytest.mark.gpu
def test_every_variant_and_seed_is_right_on_an_sm90_gpu(tmp_path: Path) -> None:
    """The hardware reads the tiles as the emulator does: every variant above (tiles in
    turn, ping-pong and the copy engine's loads and stores among them), and the seeds,
    verified on the GPU against the reference."""
    gpus = device.gpus()
    if not gpus or gpus[0]["gpu_arch"] != "sm_90":
        pytest.skip("needs an sm_90 GPU")
    for program, symbols in (
        (matmul("float16", 64, 96, 80, epilogue=True), {}),
        (matmul("bfloat16", "M", 40, 48), {"M": 37}),
        (matmul_nt("float16", 70, 72, 128), {}),
        (matmul_nt("float16", 72, 40, 64, a_transposed=True), {}),
        (matmul("bfloat16", 300, 520, 1000), {}),
        (int4_matmul(), {"M": 5}),
    ):
        space = space_for(program, SM90)
        tma = TMA if "s0.wgmma_tma" in space.knobs else []
        store = STORE if "s0.wgmma_store" in space.knobs else []
        variants = VARIANTS + TURNS + PINGPONG + tma + store
        configs = [wgmma_config(space, **v) for v in variants] + space.seeds()
        assert_right(tmp_path, program, configs, symbols, emulate=False)
