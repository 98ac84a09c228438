"""Cost-model features: a fixed key set, deterministic, finite, and sensitive to the config."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest

from compiler.errors import InvalidConfig
from compiler.features import FEATURE_VERSION, extract, feature_names
from compiler.program import load
from compiler.space import space_for
from schemas.target import Target

CPU = Target(kind="cpu", isa="x86_64-avx512")
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
    assert small["log_flops"] < large["log_flops"] and FEATURE_VERSION == 2


def test_invalid_config_raises() -> None:
    program = load(json.loads((EXAMPLES / "gelu.json").read_text()))
    with pytest.raises(InvalidConfig):
        extract(program, CPU, {})
