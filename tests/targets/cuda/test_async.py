"""`cp.async` in the GPU contraction kernels: the tensor-core pipeline (`wmma_stages`) and the
SIMT kernel's asynchronous double buffering (`async_copy`). Where the knobs exist, the shared
memory the stages take, the rendered PTX helpers and their emulator fallbacks, nvcc builds for
sm_80 and sm_90, and emulated runs at small, non-dividing sizes (the copies' zero-filled
tails) for float16, bfloat16, a batched matmul, an int4 matmul (whose dequantized side keeps
the register path) and float32 SIMT matmuls."""

from __future__ import annotations

import re
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.compiler.test_lower import c, signature, t
from tests.targets.cuda.test_wmma import (
    SM80,
    SM90,
    VARIANTS,
    assert_right,
    int4_matmul,
    matmul,
    wmma_config,
)
from tunehub.compiler.analysis import analyze
from tunehub.compiler.ir import Program
from tunehub.compiler.lower import lower
from tunehub.compiler.schedule.plan import plan
from tunehub.compiler.space import space_for
from tunehub.compiler.space.space import Config, Space
from tunehub.schemas.record import RecordStatus
from tunehub.schemas.target import Target
from tunehub.targets.cuda.build import CudaBuilder
from tunehub.targets.cuda.schedule.wmma import WmmaShape
from tunehub.targets.gpu.schedule.operands import operands

BIG = {"wmma_bm": 128, "wmma_bn": 128, "wmma_warps": 8, "wmma_frags": 2}


def batched(dtype: str) -> Program:
    return signature(
        [
            c(
                "acc",
                "bmn",
                [3, 20, 24],
                "float32(A[b, m, k]) * float32(B[b, k, n])",
                op="sum",
                over={"k": 36},
            )
        ],
        [t("A", [3, 20, 36], dtype), t("B", [3, 36, 24], dtype)],
        ["acc"],
    )


def knob(program: Program, target: Target, name: str) -> tuple[Any, ...] | None:
    space = space_for(program, target)
    return next((v for key, v in space.knobs.items() if key.endswith(f".{name}")), None)


def stages(program: Program, target: Target) -> tuple[Any, ...] | None:
    return knob(program, target, "wmma_stages")


def source(program: Program, target: Target, **knobs: Any) -> str:
    return lower(program, target, wmma_config(space_for(program, target), **knobs)).source


def tiled_config(space: Space, **knobs: Any) -> Config:
    """The naive config with the contraction in `tiled` mode, double-buffered by `cp.async`,
    and `knobs` set."""
    config = dict(space.naive())
    knobs = {"mode": "tiled", "double": True, "async_copy": True, **knobs}
    for name in config:
        config[name] = knobs.get(name.split(".", 1)[1], config[name])
    assert space.check(config) is None, space.check(config)
    return config


TILED_VARIANTS: list[dict[str, Any]] = [
    {"bm": 32, "bn": 32, "tm": 2, "tn": 2, "bk": 8},  # A[m, k] transposed: 4-byte copies
    {"bm": 32, "bn": 64, "bk": 16, "vec": True},  # B rows as 16-byte copies
    {"bm": 16, "bn": 32, "tm": 2, "tn": 2, "bk": 8, "split_k": 2},
]


def test_stages_only_on_sm80_and_later() -> None:
    fp16 = matmul("float16", 64, 96, 80)
    assert stages(fp16, SM80) == (1, 2, 3)
    assert stages(fp16, SM90) == (1, 2, 3)
    assert stages(int4_matmul(), SM80) == (1, 2, 3)  # X is copied raw, W is dequantized
    assert stages(fp16, Target(kind="cuda", arch="sm_75")) is None
    assert stages(fp16, Target(kind="cuda", arch="sm_70")) is None
    space = space_for(fp16, SM80)
    tiled = {**space.naive(), **{k: "tiled" for k in space.knobs if k.endswith(".mode")}}
    staged = {**tiled, **{k: 2 for k in tiled if k.endswith(".wmma_stages")}}
    assert space.check(staged) is not None  # a wmma knob off its first value in tiled mode
    assert space.canonical(staged) == tiled


def test_async_copy_only_for_raw_sides_on_sm80_and_later() -> None:
    fp32 = matmul("float32", 40, 72, 52)
    assert knob(fp32, SM80, "async_copy") == (False, True)
    assert knob(fp32, Target(kind="cuda", arch="sm_75"), "async_copy") is None
    assert knob(int4_matmul(), SM90, "async_copy") is None  # float16 X, dequantized W
    space = space_for(fp32, SM90)
    single = {**tiled_config(space), **{k: False for k in space.knobs if k.endswith(".double")}}
    assert space.check(single) is not None  # cp.async double-buffers: needs `double`


def test_shared_memory_counts_every_stage() -> None:
    program = matmul("float16", 64, 96, 80)
    stage = analyze(program).stages[0]
    found = plan(stage)
    assert found is not None
    ops = operands(stage, found)
    one, three = WmmaShape(128, 128, 8, 2, 1), WmmaShape(128, 128, 8, 2, 3)
    tiles = 128 * (32 + 8) * 2 + 32 * (128 + 8) * 2  # A k-major, B[k, n] lane-major
    assert three.shared_bytes(ops) - one.shared_bytes(ops) == 2 * tiles
    kernel = lower(program, SM80, wmma_config(space_for(program, SM80), wmma_stages=3, **BIG))
    launched = kernel.launch["kernels"][0]["shared_bytes"]  # past 48 KiB: dynamic
    assert launched == three.shared_bytes(ops) > 48 * 1024
    assert "extern __shared__ __align__(1024) float4" in kernel.source  # wgmma atoms: 1024


def test_renders_ptx_helpers_with_emulator_fallbacks() -> None:
    text = source(matmul("float16", 64, 96, 80), SM80, wmma_stages=3)
    for line in (
        "cp.async.cg.shared.global [%0], [%1], 16, %2;",
        "cp.async.commit_group;",
        "cp.async.wait_group 1;",
        "#ifdef TUNEHUB_EMULATE",
        "__builtin_memset(",
    ):
        assert line in text, line
    # Rows of 36 halves are 8-byte aligned at best: 8-byte copies through L1 (.ca).
    assert "cp.async.ca.shared.global [%0], [%1], 8, %2;" in source(
        matmul("float16", 32, 64, 36), SM80, wmma_stages=2
    )
    fp32 = matmul("float32", 40, 72, 52)
    simt = lower(fp32, SM80, tiled_config(space_for(fp32, SM80), **TILED_VARIANTS[1])).source
    assert "cp_async4(As" in simt and "cp_async16(Bs" in simt
    # Only X is copied raw; the dequantized weights are evaluated and stored as before.
    copies = re.findall(r"cp_async16\([^,]*, (\w+) \+", source(int4_matmul(), SM80, wmma_stages=2))
    assert copies and set(copies) == {"X_"}


def kernels(target: Target) -> list[Any]:
    programs = (matmul("float16", 64, 96, 80, epilogue=True), batched("bfloat16"), int4_matmul())
    found = []
    for program in programs:
        space = space_for(program, target)
        for knobs in ({"wmma_stages": 2}, {"wmma_stages": 3, **BIG}):
            found.append(lower(program, target, wmma_config(space, **knobs)))
    fp32 = matmul("float32", "M", 72, 52)
    space = space_for(fp32, target)
    found += [lower(fp32, target, tiled_config(space, **v)) for v in TILED_VARIANTS]
    return found


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_compiles_for_sm80_and_sm90() -> None:
    def build(arch: str) -> list[str]:
        target = Target(kind="cuda", arch=arch)
        found = kernels(target)
        results = CudaBuilder().build_many(found, target, 600)
        return [
            f"{arch} {kernel.entry}:\n{result.log}\n{kernel.source}"
            for kernel, result in zip(found, results, strict=True)
            if result.status != RecordStatus.OK
        ]

    with ThreadPoolExecutor(2) as pool:
        problems = [p for per_arch in pool.map(build, ("sm_80", "sm_90")) for p in per_arch]
    assert not problems, "\n\n".join(problems[:3])


def run(tmp_path: Path, program: Program, symbols: dict[str, int]) -> None:
    space = space_for(program, SM90)
    configs = [wmma_config(space, wmma_stages=2), wmma_config(space, wmma_stages=3, **VARIANTS[1])]
    assert_right(tmp_path, program, configs, symbols)


emulated = pytest.mark.skipif(shutil.which("g++") is None, reason="the emulator needs g++")


@emulated
def test_float16_edges_and_epilogue(tmp_path: Path) -> None:
    run(tmp_path, matmul("float16", 64, 96, 80, epilogue=True), {})


@emulated
def test_bfloat16_symbolic_rows(tmp_path: Path) -> None:
    run(tmp_path, matmul("bfloat16", "M", 40, 48), {"M": 37})


@emulated
def test_batched_8_byte_runs(tmp_path: Path) -> None:
    run(tmp_path, batched("float16"), {})


@emulated
def test_int4_dequant_keeps_register_path(tmp_path: Path) -> None:
    run(tmp_path, int4_matmul(), {"M": 5})


@emulated
def test_float32_simt_double_buffering(tmp_path: Path) -> None:
    program = matmul("float32", "M", 72, 52)
    space = space_for(program, SM90)
    configs = [tiled_config(space, **v) for v in TILED_VARIANTS]
    assert_right(tmp_path, program, configs, {"M": 37})
