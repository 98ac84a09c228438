"""CUDA schedule spaces: device limits reject configs before nvcc sees them, sampled configs
are valid and stay within the limits once lowered, and each mode's knobs are canonical."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest

from tunehub.compiler.errors import InvalidConfig
from tunehub.compiler.ir import Program
from tunehub.compiler.loop import Namer, seq
from tunehub.compiler.lower import lower, lower_function, signature_names
from tunehub.compiler.program import load
from tunehub.compiler.schedule.stage import Context
from tunehub.compiler.space import space_for
from tunehub.compiler.space.space import Config
from tunehub.schemas.target import Target
from tunehub.targets.cuda.compiler import BACKEND as CUDA_BACKEND
from tunehub.targets.cuda.launches import launches
from tunehub.targets.gpu.limits import limits_for

SM80 = Target(kind="cuda", arch="sm_80")
EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def example(name: str) -> Program:
    return load(json.loads((EXAMPLES / f"{name}.json").read_text()))


def tiled(space_config: Config, **knobs: int | bool) -> Config:
    return {**space_config, "s0.mode": "tiled", **{f"s0.{k}": v for k, v in knobs.items()}}


@pytest.mark.parametrize("name", sorted(p.stem for p in EXAMPLES.glob("*.json")))
def test_sampled_configs_are_valid_and_within_the_device_limits(name: str) -> None:
    program = example(name)
    space = space_for(program, SM80)
    limits = limits_for(SM80)
    rng = random.Random(name)
    for config in [space.naive(), space.default(), *(space.sample(rng) for _ in range(6))]:
        assert space.check(config) is None
        for launch in launches(lower_function(program, SM80, config, space)):
            assert launch.threads <= limits.threads_per_block
            assert launch.shared_bytes <= limits.shared_bytes


def test_threads_per_block_are_limited() -> None:
    program = example("softmax")
    space = space_for(program, SM80)
    config = {**space.naive(), "s0.order": "row", "s0.threads": 1024, "s0.group": 2}
    assert "threads per block" in str(space.check(config))
    with pytest.raises(InvalidConfig):
        lower(program, SM80, config)
    program = example("matmul_512")
    space = space_for(program, SM80)
    config = tiled(space.naive(), bm=128, bn=128, tm=1, tn=1, bk=8)
    assert "16384 threads" in str(space.check(config))


def test_shared_memory_is_limited_per_architecture() -> None:
    program = example("matmul_1024")
    big = dict(bm=128, bn=128, bk=32, tm=8, tn=8, double=True)  # 66 KiB of tiles
    for arch, fits in (("sm_75", False), ("sm_80", True), ("sm_90", True)):
        target = Target(kind="cuda", arch=arch)
        space = space_for(program, target)
        reason = space.check(tiled(space.naive(), **big))
        assert (reason is None) == fits, (arch, reason)
        if not fits:
            assert "shared memory" in str(reason)


def test_register_estimate_is_limited() -> None:
    program = example("matmul_1024")
    space = space_for(program, SM80)
    base = dict(bm=128, bn=128, bk=32, tm=4, tn=4)  # 1024 threads: 64 registers each
    assert space.check(tiled(space.naive(), **base)) is None
    reason = space.check(tiled(space.naive(), **base, double=True))
    assert "registers" in str(reason)


def test_knobs_of_other_modes_keep_their_first_values() -> None:
    space = space_for(example("int4_matmul"), SM80)
    naive = space.naive()
    assert naive["s0.mode"] == "plain"
    assert space.check({**naive, "s0.bm": 32}) is not None
    mixed = {**naive, "s0.mode": "gemv", "s0.bk": 32, "s0.gemv_cols": 8}
    assert space.check(mixed) is not None
    assert space.canonical(mixed) == {**naive, "s0.mode": "gemv", "s0.gemv_cols": 8}
    assert space.check(space.canonical(mixed)) is None
    rng = random.Random(0)
    modes = {space.sample(rng)["s0.mode"] for _ in range(40)}
    assert modes == {"tiled", "gemv", "wmma"}  # `plain` is the naive config alone


def test_the_gemv_kernel_is_offered_for_few_or_symbolic_rows() -> None:
    assert "gemv" in space_for(example("int4_matmul"), SM80).knobs["s0.mode"]
    assert "gemv" not in space_for(example("matmul_128"), SM80).knobs["s0.mode"]


def test_tiled_constraints() -> None:
    program = example("matmul_odd")  # 127 x 61 x 253: no aligned vectors along k = 61
    space = space_for(program, SM80)
    assert "split evenly" in str(space.check(tiled(space.naive(), bm=16, bn=32, bk=8, tm=2, tn=1)))
    assert "vectors" in str(space.check(tiled(space.naive(), vec=True)))
    assert "empty" in str(space.check(tiled(space.naive(), bk=32, split_k=4)))
    assert "one warp" in str(space.check(tiled(space.naive(), bm=16, bn=16, tm=4, tn=4)))


def test_defaults_pick_the_gemv_kernel_for_few_rows() -> None:
    program = load(
        {
            "name": "decode",
            "inputs": [
                {"name": "x", "shape": [2, 512], "dtype": "float32"},
                {"name": "w", "shape": [1024, 512], "dtype": "float32"},
            ],
            "computes": [
                {
                    "name": "y",
                    "axes": ["m", "n"],
                    "shape": [2, 1024],
                    "dtype": "float32",
                    "reduce": {"op": "sum", "axes": {"k": 512}},
                    "expr": "x[m, k] * w[n, k]",
                }
            ],
            "outputs": ["y"],
        }
    )
    space = space_for(program, SM80)
    config = space.default()
    assert config["s0.mode"] == "gemv" and config["s0.gemv_rows"] == 2
    kernel = lower(program, SM80, config)
    assert "vload_f32x4" in kernel.source  # the weight rows are read as float4
    assert math.prod(kernel.launch["kernels"][0]["block"]) == 32 * config["s0.gemv_warps"]


def test_naive_config_is_the_fallback_kernel() -> None:
    """Every GPU schedule's naive config lowers to one thread per output element."""
    for name in ("softmax", "matmul_odd", "column_sum", "gelu", "int4_matmul"):
        program = example(name)
        space = space_for(program, SM80)
        naive = lower_function(program, SM80, space.naive(), space)
        ctx = Context(space.analysis, SM80, Namer(signature_names(program)))
        expected = seq(CUDA_BACKEND.fallback.lower(s, {}, ctx, ()) for s in space.analysis.stages)
        assert naive.body == expected
