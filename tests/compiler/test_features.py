"""Cost-model features: a fixed key set, deterministic, finite, and sensitive to the config;
on CUDA, the launch, shared memory, pipeline, tensor-core, register and occupancy features of
lowered configs (0 on CPUs)."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest

from tunehub.compiler.errors import InvalidConfig
from tunehub.compiler.features import FEATURE_VERSION, extract, feature_names, with_build_stats
from tunehub.compiler.ir import Program
from tunehub.compiler.program import load
from tunehub.compiler.space import space_for
from tunehub.compiler.space.space import Config
from tunehub.schemas.target import Target
from tunehub.targets.gpu.limits import residency

CPU = Target(kind="cpu", isa="x86_64-avx512")
SM80 = Target(kind="cuda", arch="sm_80")
GPU_COLUMNS = [n for n in feature_names() if n.startswith(("gpu_", "ptxas_"))]
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
NAMES = ["softmax", "matmul_128", "int4_matmul", "column_sum", "gelu", "conv2d_3x3"]


@pytest.mark.parametrize("name", NAMES)
def test_fixed_keys_finite_and_deterministic(name: str) -> None:
    program = load(json.loads((EXAMPLES / f"{name}.json").read_text()))
    space = space_for(program, CPU)
    config = space.sample(random.Random(1))
    features = extract(program, CPU, config)
    assert list(features) == feature_names()
    assert all(math.isfinite(v) for v in features.values())
    assert features == extract(program, CPU, dict(config))


def test_features_see_the_schedule() -> None:
    program = load(json.loads((EXAMPLES / "column_sum.json").read_text()))
    space = space_for(program, CPU)
    naive, tuned = extract(program, CPU, space.naive()), extract(program, CPU, space.default())
    assert naive["log_flops"] == tuned["log_flops"] and naive["log_bytes"] == tuned["log_bytes"]
    assert naive["hot_inner_serial"] == 1.0 and tuned["hot_inner_vectorize"] == 1.0
    assert naive["parallel_log_extent"] == 0.0 < tuned["parallel_log_extent"]
    assert naive["stages_reduction"] == 1.0 and naive["in_float32"] == 1.0
    assert naive["log_local_bytes"] == 0.0 < tuned["log_local_bytes"]


def test_features_see_the_register_tile() -> None:
    """Version 2: the GEMM microkernel's FMAs, loads and broadcasts per k step."""
    program = load(json.loads((EXAMPLES / "matmul_128.json").read_text()))
    space = space_for(program, CPU)
    tile = {
        **space.default(),
        "s0.mr": 6,
        "s0.nv": 4,
        "s0.unroll": 1,
        "s0.prefetch": 4,
        "s0.pack_cols": True,
    }
    features = extract(program, CPU, tile)
    assert features["kernel_vector_fmas"] == 24.0
    assert features["kernel_vector_loads"] == 4.0 and features["kernel_broadcasts"] == 6.0
    assert features["kernel_prefetches"] > 0 and features["kernel_fmas_per_load"] == 2.4
    assert extract(program, CPU, space.naive())["kernel_vector_fmas"] == 0.0


def test_flops_of_a_matmul() -> None:
    program = load(json.loads((EXAMPLES / "matmul_128.json").read_text()))
    features = extract(program, CPU, space_for(program, CPU).naive())
    assert features["log_flops"] == pytest.approx(math.log2(1 + 2 * 128**3))
    assert features["stages_contraction"] == 1.0


def test_symbol_values_change_workload_features() -> None:
    program = load(json.loads((EXAMPLES / "int4_matmul.json").read_text()))
    config = space_for(program, CPU).default()
    small = extract(program, CPU, config, {"M": 1})
    large = extract(program, CPU, config, {"M": 4096})
    assert small["log_flops"] < large["log_flops"] and FEATURE_VERSION == 3


def test_invalid_config_raises() -> None:
    program = load(json.loads((EXAMPLES / "gelu.json").read_text()))
    with pytest.raises(InvalidConfig):
        extract(program, CPU, {})


@pytest.mark.parametrize("name", NAMES)
def test_cpu_configs_have_the_gpu_columns_at_zero(name: str) -> None:
    program = load(json.loads((EXAMPLES / f"{name}.json").read_text()))
    space = space_for(program, CPU)
    for config in (space.naive(), space.default(), space.sample(random.Random(2))):
        features = extract(program, CPU, config)
        assert GPU_COLUMNS and all(features[n] == 0.0 for n in GPU_COLUMNS)


def half_matmul(size: int = 512) -> Program:
    """A float16 matmul with float32 accumulation: the space offers tensor cores (WMMA)."""
    compute = {
        "name": "C",
        "axes": ["m", "n"],
        "shape": [size, size],
        "dtype": "float32",
        "expr": "float32(A[m, k]) * float32(B[k, n])",
        "reduce": {"op": "sum", "axes": {"k": size}},
    }
    inputs = [
        {"name": "A", "shape": [size, size], "dtype": "float16"},
        {"name": "B", "shape": [size, size], "dtype": "float16"},
    ]
    return load({"name": "hgemm", "inputs": inputs, "computes": [compute], "outputs": ["C"]})


def gpu_config(program: Program, **knobs: object) -> Config:
    """The naive config with the contraction's knobs set (valid on sm_80)."""
    space = space_for(program, SM80)
    config = {**space.naive(), **{f"s0.{k}": v for k, v in knobs.items()}}
    assert space.check(config) is None, space.check(config)
    return config


def test_gpu_features_of_a_simt_and_a_tensor_core_matmul() -> None:
    program = half_matmul()
    simt = extract(program, SM80, space_for(program, SM80).default())  # tiled 64 x 64, 4 x 4
    wmma = extract(program, SM80, gpu_config(program, mode="wmma"))  # 64 x 64, 4 warps
    assert simt["gpu_threads"] == 256.0 and wmma["gpu_threads"] == 128.0
    assert simt["gpu_kernels"] == wmma["gpu_kernels"] == 1.0
    assert simt["gpu_log_blocks"] == wmma["gpu_log_blocks"] == math.log2(1 + 8 * 8)
    assert simt["gpu_tensor_cores"] == 0.0 and wmma["gpu_tensor_cores"] == 1.0
    # Two float32 buffers of a 16 x (64 + 1) and a 16 x 64 slice; one float16 buffer of a
    # 64 x (32 + 8) and a 32 x (64 + 8) slice plus four warps' 16 x 16 float32 scratch.
    assert simt["gpu_shared_bytes"] == 2 * 4 * 16 * (65 + 64)
    assert wmma["gpu_shared_bytes"] == 2 * (64 * 40 + 32 * 72) + 4 * 16 * 16 * 4
    # The SIMT thread holds a 4 x 4 tile, 4 + 4 operands and 8 prefetched values (double);
    # the warp 2 x 2 accumulator fragments and 2 + 2 operand fragments; 24 for the rest.
    assert simt["gpu_registers"] == 16 + 8 + 8 + 24
    assert wmma["gpu_registers"] == 4 * 8 + 4 * 4 + 24
    assert simt["gpu_occupancy"] == residency(SM80, 256, 16512, 56) * 8 / 64
    assert wmma["gpu_waves"] == 64 / (108 * residency(SM80, 128, 13824, 72))
    for features in (simt, wmma):  # before a build: the estimates
        assert features["ptxas_registers"] == features["gpu_registers"]
        assert features["ptxas_shared_bytes"] == features["gpu_shared_bytes"]
        assert features["ptxas_spill_bytes"] == features["ptxas_stack_bytes"] == 0.0


def test_pipeline_stages_cost_shared_memory_and_occupancy() -> None:
    program = half_matmul()
    one, two, three = (
        extract(program, SM80, gpu_config(program, mode="wmma", wmma_stages=n)) for n in (1, 2, 3)
    )
    assert [f["gpu_async_stages"] for f in (one, two, three)] == [0.0, 2.0, 3.0]
    tiles = 2 * (64 * 40 + 32 * 72)
    assert two["gpu_shared_bytes"] - one["gpu_shared_bytes"] == tiles
    assert three["gpu_shared_bytes"] - one["gpu_shared_bytes"] == 2 * tiles
    assert one["gpu_registers"] == three["gpu_registers"]
    assert one["gpu_occupancy"] >= two["gpu_occupancy"] > three["gpu_occupancy"]
    assert three["gpu_waves"] > one["gpu_waves"]  # fewer blocks resident per SM
    simt = extract(program, SM80, space_for(program, SM80).default())
    assert simt["gpu_async_stages"] == 0.0


def test_dynamic_shared_memory_is_not_in_the_static_estimate() -> None:
    """Past 48 KiB a kernel's shared memory is dynamic, which ptxas does not report."""
    program = half_matmul()
    config = gpu_config(program, mode="wmma", wmma_bm=128, wmma_bn=128, wmma_warps=8, wmma_stages=3)
    features = extract(program, SM80, config)
    assert features["gpu_shared_bytes"] == 3 * 2 * (128 * 40 + 32 * 136) + 8 * 16 * 16 * 4
    assert features["gpu_shared_bytes"] > 48 * 1024 and features["ptxas_shared_bytes"] == 0.0


def test_a_split_k_matmul_describes_its_main_kernel() -> None:
    program = half_matmul(256)
    config = space_for(program, SM80).default()
    split = extract(program, SM80, {**config, "s0.split_k": 4})
    whole = extract(program, SM80, config)
    assert whole["gpu_kernels"] == 1.0 and split["gpu_kernels"] == 2.0  # and the sum kernel
    assert split["gpu_threads"] == whole["gpu_threads"]
    # 32 x 32 block tiles (the default for small matmuls): 8 x 8 of them, per slice of k.
    assert whole["gpu_log_blocks"] == math.log2(1 + 8 * 8)
    assert split["gpu_log_blocks"] == math.log2(1 + 4 * 8 * 8)


def test_residency_is_limited_by_warps_shared_memory_and_registers() -> None:
    assert residency(SM80, 128, 0, 32) == 16  # 64 warps of 4
    assert residency(SM80, 32, 0, 32) == 32  # at most 32 blocks
    assert residency(SM80, 128, 80 * 1024, 32) == 2  # 164 KiB, 1 KiB reserved per block
    assert residency(SM80, 128, 0, 128) == 4  # 64 Ki registers / (128 x 128)
    assert residency(SM80, 128, 0, 250) == 2  # allocated as 256
    assert residency(Target(kind="cuda", arch="sm_90"), 128, 80 * 1024, 32) == 2


def test_with_build_stats_takes_the_worst_kernel_and_every_spill() -> None:
    program = half_matmul()
    vector = extract(program, SM80, gpu_config(program, mode="wmma"))
    kernels = {
        "k_0": {"registers": 90, "stack_bytes": 8, "spill_store_bytes": 4, "spill_load_bytes": 4},
        "k_1": {"registers": 20, "shared_bytes": 512, "spill_load_bytes": 8},
    }
    built = with_build_stats(vector, {"kernels": kernels})
    assert built["ptxas_registers"] == 90.0 and built["ptxas_spill_bytes"] == 16.0
    assert built["ptxas_stack_bytes"] == 8.0 and built["ptxas_shared_bytes"] == 512.0
    assert list(built) == feature_names()
    assert {k: v for k, v in built.items() if not k.startswith("ptxas_")} == {
        k: v for k, v in vector.items() if not k.startswith("ptxas_")
    }
    assert with_build_stats(vector, {"compiler": "gcc"}) == vector  # a CPU build
