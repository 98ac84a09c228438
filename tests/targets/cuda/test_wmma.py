"""The tensor-core contraction mode (`wmma`): where the space offers it, its checks, the
rendered WMMA calls, nvcc builds for sm_80 and sm_90, and emulated runs (the worker's path:
emulated build, sandboxed run, verification against the reference evaluator) at small,
non-dividing sizes for float16, bfloat16 and an int4-dequantizing matmul."""

from __future__ import annotations

import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.compiler.test_lower import c, signature, t
from tunehub.compiler.ir import Program
from tunehub.compiler.kernel import Kernel
from tunehub.compiler.lower import lower
from tunehub.compiler.space import space_for
from tunehub.compiler.space.space import Config, Space
from tunehub.schemas.record import RecordStatus
from tunehub.schemas.target import Target
from tunehub.targets.cuda.build import CudaBuilder
from tunehub.targets.cuda.check import check_configs
from tunehub.worker.measure.case import CaseCache

SM80 = Target(kind="cuda", arch="sm_80")
SM90 = Target(kind="cuda", arch="sm_90")


def matmul(dtype: str, m: Any, n: int, k: int, epilogue: bool = False) -> Program:
    computes = [
        c("acc", "mn", [m, n], "float32(A[m, k]) * float32(B[k, n])", op="sum", over={"k": k})
    ]
    inputs = [t("A", [m, k], dtype), t("B", [k, n], dtype)]
    if epilogue:
        computes.append(
            c("out", "mn", [m, n], f"{dtype}(max(acc[m, n] + float32(bias[n]), 0.0))", dtype)
        )
        inputs.append(t("bias", [n], dtype))
    symbols = {"M": {"min": 1, "max": 256}} if isinstance(m, str) else {}
    return signature(computes, inputs, ["out" if epilogue else "acc"], symbols=symbols)


def int4_matmul(k: int = 96) -> Program:
    return signature(
        [
            c(
                "acc",
                "mn",
                ["M", 40],
                "float32(X[m, k]) * (float32(int32((W[n, k // 8] >> (4 * (k % 8))) & 15) - 7)"
                " * float32(s[n, k // 32]))",
                op="sum",
                over={"k": k},
            ),
            c("out", "mn", ["M", 40], "float16(float32(r[m, n]) + acc[m, n])", "float16"),
        ],
        [
            t("X", ["M", k], "float16"),
            t("W", [40, k // 8], "uint32"),
            t("s", [40, k // 32], "float16"),
            t("r", ["M", 40], "float16"),
        ],
        ["out"],
        symbols={"M": {"min": 1, "max": 256}},
    )


def wmma_config(space: Space, **knobs: Any) -> Config:
    """The naive config with every contraction stage in `wmma` mode and `knobs` set."""
    config = dict(space.naive())
    for name in config:
        knob = name.split(".", 1)[1]
        if knob == "mode" and "wmma" in space.knobs[name]:
            config[name] = "wmma"
        elif knob in knobs and f"{name.split('.')[0]}.mode" in config:
            config[name] = knobs[knob]
    assert config != space.naive()
    assert space.check(config) is None, space.check(config)
    return config


VARIANTS: list[dict[str, Any]] = [
    {},
    {"wmma_bm": 128, "wmma_bn": 64, "wmma_warps": 8, "wmma_frags": 1},
    {"wmma_bm": 64, "wmma_bn": 128, "wmma_warps": 4, "wmma_frags": 4},
    {"wmma_bm": 128, "wmma_bn": 128, "wmma_warps": 8, "wmma_frags": 2},
]


def modes(program: Program, target: Target) -> tuple[Any, ...]:
    space = space_for(program, target)
    return next(v for name, v in space.knobs.items() if name.endswith(".mode"))


def test_offered_only_for_16_bit_factors_on_tensor_core_archs() -> None:
    assert "wmma" in modes(matmul("float16", 64, 96, 80), SM80)
    assert "wmma" in modes(matmul("bfloat16", 64, 96, 80), SM90)
    assert "wmma" in modes(int4_matmul(), SM80)
    assert "wmma" in modes(matmul("float16", 64, 96, 80), Target(kind="cuda", arch="sm_70"))
    assert "wmma" not in modes(matmul("bfloat16", 64, 96, 80), Target(kind="cuda", arch="sm_75"))
    assert "wmma" not in modes(matmul("float32", 64, 96, 80), SM90)
    assert "wmma" not in modes(matmul("float16", 64, 96, 80), Target(kind="cuda"))
    # A float32 matmul's space is unchanged: no WMMA knobs.
    assert not any("wmma" in name for name in space_for(matmul("float32", 64, 96, 80), SM90).knobs)


def test_check_rejects_bad_warp_grids_and_resets_other_knobs() -> None:
    space = space_for(matmul("float16", 64, 96, 80), SM80)
    good = wmma_config(space)
    bad = wmma_config(space)
    bad.update({k: 4 for k in bad if k.endswith("wmma_frags")})  # 64 / 64 = 1 warp row, 4 cols
    bad.update({k: 64 for k in bad if k.endswith("wmma_bn")})  # 64 / (16 * 4) = 1 fragment
    assert space.check(bad) is None
    bad.update({k: 8 for k in bad if k.endswith("wmma_warps")})  # 8 cols of 64: too narrow
    assert space.check(bad) is not None
    tiled = {**good, **{k: 32 for k in good if k.endswith(".bm")}}
    assert space.check(tiled) is not None  # a tiled knob off its first value in wmma mode
    assert space.canonical(tiled) == good
    assert space.naive() == {k: v[0] for k, v in space.knobs.items()}


def test_renders_wmma_calls_and_16_bit_shared_tiles() -> None:
    program = matmul("bfloat16", 64, 96, 80, epilogue=True)
    space = space_for(program, SM80)
    source = lower(program, SM80, wmma_config(space)).source
    for text in (
        "#include <mma.h>",
        "__shared__ __align__(32) __nv_bfloat16",
        "nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, 16, 16, 16, __nv_bfloat16,",
        # B[k, n] keeps its layout in shared memory: a row-major B fragment
        "matrix_b, 16, 16, 16, __nv_bfloat16, nvcuda::wmma::row_major>",
        "nvcuda::wmma::mma_sync(",
        "nvcuda::wmma::store_matrix_sync(",
        "__syncwarp();",
        "__float2bfloat16_rn(",
        "] = A_[",  # a 16-bit input element is staged as it is, not converted twice
    ):
        assert text in source, text


def kernels() -> list[Kernel]:
    found = []
    for program in (
        matmul("float16", 64, 96, 80, epilogue=True),
        matmul("bfloat16", "M", 128, 64),
        int4_matmul(),
    ):
        space = space_for(program, SM80)
        found += [lower(program, SM80, wmma_config(space, **v)) for v in VARIANTS]
    return found


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_compiles_for_sm80_and_sm90() -> None:
    found = kernels()

    def build(arch: str) -> list[str]:
        results = CudaBuilder().build_many(found, Target(kind="cuda", arch=arch), 600)
        problems = []
        for kernel, result in zip(found, results, strict=True):
            if result.status != RecordStatus.OK:
                problems.append(f"{arch} {kernel.entry}:\n{result.log}\n{kernel.source}")
            stats = result.stats.get("kernels", {}).values()
            if any(s.get("spill_store_bytes", 0) for s in stats):
                problems.append(f"{arch} {kernel.entry} spills")
        return problems

    with ThreadPoolExecutor(2) as pool:
        problems = [p for per_arch in pool.map(build, ("sm_80", "sm_90")) for p in per_arch]
    assert not problems, "\n\n".join(problems[:3])


def assert_right(
    tmp_path: Path,
    program: Program,
    configs: list[Config],
    symbols: dict[str, int],
    emulate: bool = True,
) -> None:
    """Every config verified against the reference, through the emulator or on the GPU."""
    cases = CaseCache(tmp_path)
    results = check_configs(program, SM90, configs, symbols, emulate=emulate, cases=cases)
    for result in results:
        assert result.status == RecordStatus.OK, f"{result.config}:\n{result.log}"


def run(tmp_path: Path, program: Program, symbols: dict[str, int]) -> None:
    space = space_for(program, SM90)
    assert_right(tmp_path, program, [wmma_config(space, **v) for v in VARIANTS[:2]], symbols)


emulated = pytest.mark.skipif(shutil.which("g++") is None, reason="the emulator needs g++")


@emulated
def test_float16_matmul_with_edges_and_epilogue(tmp_path: Path) -> None:
    run(tmp_path, matmul("float16", 64, 96, 80, epilogue=True), {})


@emulated
def test_bfloat16_matmul_symbolic_rows(tmp_path: Path) -> None:
    run(tmp_path, matmul("bfloat16", "M", 40, 48), {"M": 37})


@emulated
def test_int4_dequant_matmul(tmp_path: Path) -> None:
    run(tmp_path, int4_matmul(), {"M": 5})
