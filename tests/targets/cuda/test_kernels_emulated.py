"""CUDA kernels run on the CPU through the emulator against the reference evaluator, at small
sizes: every GPU schedule and kernel variant, fused and unfused row groups, symbolic and
non-dividing extents, 16-bit and integer types. Each candidate takes the worker's path
(`targets.cuda.check`: emulated build, sandboxed run, verification), as `tunehub check` does."""

from __future__ import annotations

import random
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.compiler.test_forms import program_of
from tests.compiler.test_lower import c, signature, t
from tests.targets.cuda.test_wmma import int4_matmul
from tunehub.compiler.ir import Program
from tunehub.compiler.lower import lower
from tunehub.compiler.space import space_for
from tunehub.compiler.space.space import Config
from tunehub.schemas.record import RecordStatus
from tunehub.schemas.target import Target
from tunehub.targets.cuda.check import check_configs
from tunehub.worker.measure.case import CaseCache

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="the emulator needs g++")

CUDA = Target(kind="cuda", arch="sm_90")


@pytest.fixture
def cases(tmp_path: Path) -> CaseCache:
    return CaseCache(tmp_path)


def check(
    cases: CaseCache,
    program: Program,
    stage_configs: Sequence[dict[str, Any]] = (),
    symbols: dict[str, int] | None = None,
    samples: int = 2,
) -> None:
    """Naive, default, `samples` sampled configs, and the naive config updated with each of
    `stage_configs` (knobs without the stage prefix, applied to every stage that takes the
    value)."""
    space = space_for(program, CUDA)
    rng = random.Random(0)
    configs: list[Config] = [space.naive(), space.default()]
    configs += [space.sample(rng) for _ in range(samples)]
    for update in stage_configs:
        config = dict(space.naive())
        for name in config:
            knob = name.split(".", 1)[1]
            if knob in update and update[knob] in space.knobs[name]:
                config[name] = update[knob]
        assert space.check(config) is None, (update, space.check(config))
        configs.append(config)
    results = check_configs(program, CUDA, configs, symbols or {}, emulate=True, cases=cases)
    for result in results:
        assert result.status == RecordStatus.OK, f"{result.config}:\n{result.log}"


def test_softmax_rows_fused_and_unfused(cases: CaseCache) -> None:
    program = signature(
        [
            c("m", "i", [5], "x[i, k]", op="max", over={"k": 37}),
            c("s", "i", [5], "exp(x[i, k] - m[i])", op="sum", over={"k": 37}),
            c("y", "ij", [5, 37], "exp(x[i, j] - m[i]) / s[i]"),
        ],
        [t("x", [5, 37])],
        ["y"],
    )
    check(
        cases,
        program,
        [
            {"fuse": False, "order": "row", "threads": 64, "group": 2},
            {"fuse": True, "order": "row", "threads": 32},
            {"fuse": True, "order": "col", "threads": 64},
            {"fuse": False, "order": "col", "threads": 32, "group": 8, "items": 2},
            {"fuse": True, "cache": True, "order": "row", "threads": 64},
            {"fuse": True, "cache": True, "order": "col", "threads": 32},
        ],
    )


def test_the_row_cache_reads_each_row_once_in_vector_loads(cases: CaseCache) -> None:
    """A float16 layernorm over two row axes: with `cache` its rows are read once, in 16-byte
    loads (8 halves), into shared memory, where every stage reads them; right with fewer
    threads than chunks and more, and where the rows are not whole chunks (scalar copy)."""
    for width, expect_vectors in ((64, True), (60, False)):
        program = signature(
            [
                c("s", "bi", [2, 3], "float32(x[b, i, k])", op="sum", over={"k": width}),
                c(
                    "v",
                    "bi",
                    [2, 3],
                    f"(float32(x[b, i, k]) - s[b, i] / {width}.0) ** 2",
                    op="sum",
                    over={"k": width},
                ),
                c(
                    "y",
                    "bij",
                    [2, 3, width],
                    f"float16((float32(x[b, i, j]) - s[b, i] / {width}.0)"
                    f" * rsqrt(v[b, i] / {width}.0 + 1e-5) * float32(g[j]))",
                    "float16",
                ),
            ],
            [t("x", [2, 3, width], "float16"), t("g", [width], "float16")],
            ["y"],
        )
        space = space_for(program, CUDA)
        assert space.default()["g0.cache"] is True
        source = lower(program, CUDA, space.default()).source
        assert source.count("x_[") == 1  # the copy; the stages read the shared row
        assert ("vload_f16x8" in source) is expect_vectors
        check(
            cases,
            program,
            [
                {"fuse": True, "cache": True, "order": "row", "threads": 32},
                {"fuse": True, "cache": True, "order": "row", "threads": 128},
            ],
        )


def test_the_row_cache_needs_a_row_read_twice_of_constant_length() -> None:
    once = signature(
        [c("s", "i", [4], "x[i, k]", op="sum", over={"k": 32}), c("y", "ij", [4, 32], "s[i]")],
        [t("x", [4, 32])],
        ["y"],
    )
    symbolic = signature(
        [
            c("m", "i", [4], "x[i, k]", op="max", over={"k": "K"}),
            c("y", "ij", [4, "K"], "x[i, j] - m[i]"),
        ],
        [t("x", [4, "K"])],
        ["y"],
        symbols={"K": {"min": 1, "max": 4096}},
    )
    for program in (once, symbolic):
        space = space_for(program, CUDA)
        config = {**space.default(), "g0.fuse": True, "g0.cache": True}
        assert "no input row is read by more than one stage" in str(space.check(config))
        assert space.default()["g0.cache"] is False
    space = space_for(symbolic, CUDA)
    assert "not fused" in str(space.check({**space.naive(), "g0.cache": True}))


def test_reductions_along_columns_and_to_a_scalar(cases: CaseCache) -> None:
    program = signature(
        [
            c("cs", "j", [19], "x[i, j]", op="sum", over={"i": 33}),
            c("mx", "", [], "x[i, j] * 2.0", op="max", over={"i": 33, "j": 19}),
            c("pr", "j", [19], "x[i, j] > 0.0", "bool", op="min", over={"i": 33}),
        ],
        [t("x", [33, 19])],
        ["cs", "mx", "pr"],
    )
    check(
        cases,
        program,
        [
            {"order": "col", "threads": 32, "group": 4, "unroll": 2},
            {"order": "row", "threads": 128},
        ],
    )


def test_elementwise_integer_and_half_semantics(cases: CaseCache) -> None:
    program = signature(
        [
            c("q", "i", [70], "a[i] // b[i] + a[i] % b[i] * 16", "int32"),
            c("n", "i", [70], "int8(a[i]) * int8(100) + int8(b[i] // 3)", "int8"),
            c("h", "i", [70], "float16(x[i] * 1.5) + float16(exp(x[i]))", "float16"),
            c("g", "i", [70], "bfloat16(erf(x[i]) + tanh(x[i]) + sigmoid(x[i]))", "bfloat16"),
        ],
        [t("a", [70], "int32"), t("b", [70], "int32"), t("x", [70], "float16")],
        ["q", "n", "h", "g"],
    )
    check(cases, program, [{"threads": 64, "items": 4}])


def test_matmul_tiles_at_non_dividing_extents(cases: CaseCache) -> None:
    program = signature(
        [c("C", "ij", [13, 21], "A[i, k] * B[k, j]", op="sum", over={"k": 9})],
        [t("A", [13, 9]), t("B", [9, 21])],
        ["C"],
    )
    check(
        cases,
        program,
        [
            {"mode": "tiled", "bm": 16, "bn": 16, "bk": 8, "tm": 1, "tn": 2},
            {"mode": "tiled", "bm": 16, "bn": 32, "bk": 8, "tm": 2, "tn": 2, "double": True},
            {"mode": "gemv", "gemv_cols": 2, "gemv_warps": 2, "gemv_rows": 4, "gemv_vec": 2},
        ],
        samples=1,
    )


def test_matmul_vector_loads_double_buffering_split_k_and_dynamic_shared_memory(
    cases: CaseCache,
) -> None:
    program = signature(
        [
            c("acc", "ij", [20, 24], "A[i, k] * B[k, j]", op="sum", over={"k": 64}),
            c("out", "ij", [20, 24], "max(acc[i, j] + bias[j], 0.0)"),
        ],
        [t("A", [20, 64]), t("B", [64, 24]), t("bias", [24])],
        ["out"],
    )
    tile = {"mode": "tiled", "bm": 16, "bn": 16, "bk": 16, "tm": 2, "tn": 2}
    check(
        cases,
        program,
        [
            {**tile, "vec": True},
            {**tile, "vec": True, "double": True},
            {**tile, "split_k": 4},
            {**tile, "split_k": 2, "double": True, "vec": True},
            # 66 KiB of tiles: dynamic shared memory
            {**tile, "bm": 128, "bn": 128, "bk": 32, "tm": 8, "tn": 8, "double": True},
        ],
        samples=0,
    )


def test_batched_nt_matmul_and_conv2d(cases: CaseCache) -> None:
    bmm = signature(
        [c("C", "bij", [2, 17, 11], "A[b, i, k] * B[b, j, k]", op="sum", over={"k": 8})],
        [t("A", [2, 17, 8]), t("B", [2, 11, 8])],
        ["C"],
    )
    check(
        cases, bmm, [{"mode": "tiled", "bm": 16, "bn": 16, "bk": 8, "tm": 2, "tn": 4, "vec": True}]
    )
    conv = signature(
        [
            c(
                "out",
                "nfyx",
                [1, 4, 6, 6],
                "where(y + ry >= 1 and y + ry <= 6 and x + rx >= 1 and x + rx <= 6, "
                "data[n, c, y + ry - 1, x + rx - 1], 0.0) * weight[f, c, ry, rx]",
                op="sum",
                over={"c": 3, "ry": 3, "rx": 3},
            )
        ],
        [t("data", [1, 3, 6, 6]), t("weight", [4, 3, 3, 3])],
        ["out"],
    )
    check(
        cases,
        conv,
        [{"mode": "tiled", "bm": 16, "bn": 32, "bk": 8, "tm": 4, "tn": 2, "split_k": 2}],
    )


def test_int4_dequant_matmul_with_symbolic_rows(cases: CaseCache) -> None:
    program = signature(
        [
            c(
                "acc",
                "mn",
                ["M", 32],
                "float32(X[m, k]) * (float32(int32((W[n, k // 8] >> (4 * (k % 8))) & 15) - 7)"
                " * float32(s[n, k // 32]))",
                op="sum",
                over={"k": 64},
            ),
            c("out", "mn", ["M", 32], "float16(float32(r[m, n]) + acc[m, n])", "float16"),
        ],
        [
            t("X", ["M", 64], "float16"),
            t("W", [32, 8], "uint32"),
            t("s", [32, 2], "float16"),
            t("r", ["M", 32], "float16"),
        ],
        ["out"],
        symbols={"M": {"min": 1, "max": 64}},
    )
    variants = [
        {"mode": "gemv", "gemv_cols": 2, "gemv_warps": 4, "gemv_rows": 2, "gemv_vec": 8},
        {"mode": "tiled", "bm": 16, "bn": 16, "bk": 16, "tm": 1, "tn": 1, "double": True},
        {"mode": "gemv", "gemv_cols": 4, "gemv_warps": 1, "gemv_rows": 1, "gemv_vec": 32},
        {"mode": "gemv", "gemv_cols": 2, "gemv_warps": 2, "gemv_rows": 1, "gemv_vec": 64},
    ]
    check(cases, program, variants, {"M": 3}, samples=1)
    check(cases, program, variants[:1], {"M": 1}, samples=0)


def test_the_gemv_reads_its_epilogue_first_and_scales_each_run_once(cases: CaseCache) -> None:
    """The GEMV kernel reads the epilogue's residual before its k loop (clamped into
    range for the rows and columns past the edge, which are never stored), and where a run
    lies in one scale group it sums the run's products and multiplies by the scale once; a
    run over two groups (64 of k, groups of 32) multiplies each product. Right either way."""
    program = int4_matmul(128)  # 40 columns: a block of the first variant is past the edge
    space = space_for(program, CUDA)
    variants = [
        {"mode": "gemv", "gemv_cols": 4, "gemv_warps": 4, "gemv_rows": 4, "gemv_vec": 32},
        {"mode": "gemv", "gemv_cols": 2, "gemv_warps": 2, "gemv_rows": 8, "gemv_vec": 64},
    ]
    sources = []
    for variant in variants:
        config = {**space.naive(), **{f"s0.{k}": v for k, v in variant.items()}}
        sources.append(lower(program, CUDA, config).source)
    for source in sources:
        assert source.index("r_[") < source.index("for (int64_t r")
    assert "float p = 0.0f;" in sources[0] and "float p = 0.0f;" not in sources[1]  # partials
    check(cases, program, variants, {"M": 5}, samples=0)


def test_a_gemv_may_read_every_runs_weights_before_its_products(cases: CaseCache) -> None:
    """With `gemv_ahead` a lane reads the int4 words and scales of all its runs into
    registers first, then computes run by run (activations still read per run); only where
    every lane takes the same number of runs (the run loop unrolls)."""
    program = int4_matmul(1024)
    space = space_for(program, CUDA)
    variants = [
        {"mode": "gemv", "gemv_cols": 2, "gemv_warps": 4, "gemv_rows": 4, "gemv_vec": 8},
        {"mode": "gemv", "gemv_cols": 4, "gemv_warps": 2, "gemv_rows": 1, "gemv_vec": 32},
    ]
    ahead = [{**v, "gemv_ahead": True} for v in variants]
    config = {**space.naive(), **{f"s0.{k}": v for k, v in ahead[0].items()}}
    source = lower(program, CUDA, config).source
    # 4 runs of 8 per lane: a word and a scale per run and column, read in one loop first
    assert "uint32_t held[4];" in source and source.count("W_[") == 2
    ragged = space_for(int4_matmul(128), CUDA)
    refused = {**ragged.naive(), **{f"s0.{k}": v for k, v in ahead[0].items()}}
    assert "gemv_ahead" in (ragged.check(refused) or "")
    check(cases, program, ahead, {"M": 5}, samples=0)


def test_warp_reductions_in_every_accumulator_type(cases: CaseCache) -> None:
    """Shuffles of 64-bit, narrow integer, bool and 16-bit float accumulators."""
    program = signature(
        [
            c("s64", "i", [7], "a[i, k]", "int64", op="sum", over={"k": 100}),
            c("m8", "i", [7], "int8(a[i, k])", "int8", op="max", over={"k": 100}),
            c("d", "i", [7], "float64(x[i, k])", "float64", op="sum", over={"k": 100}),
            c("h", "i", [7], "x[i, k]", "float16", op="sum", over={"k": 100}),
            c("b", "i", [7], "x[i, k] > 0.0", "bool", op="max", over={"k": 100}),
            c("u", "i", [7], "uint8(a[i, k])", "uint8", op="prod", over={"k": 100}),
        ],
        [t("a", [7, 100], "int32"), t("x", [7, 100], "bfloat16")],
        ["s64", "m8", "d", "h", "b", "u"],
    )
    check(cases, program, [{"order": "row", "threads": 64, "group": 2}], samples=0)


def test_a_16_bit_sum_rounds_each_term_in_the_gemv_and_tiled_kernels(cases: CaseCache) -> None:
    """The MLC-LLM form of an int4 linear as a version 1 signature sums float16 terms (each
    product rounded): it gets the GEMV and tiled kernels, which round each product as the
    reference does, and no tensor-core mode (an MMA cannot)."""
    program = program_of("int4_rounded", "int4_mlc_v1")
    modes = space_for(program, CUDA).knobs["s0.mode"]
    assert "gemv" in modes and "tiled" in modes and not {"wmma", "wgmma"} & set(modes)
    check(cases, program, [{"mode": "gemv", "gemv_vec": 8}, {"mode": "tiled"}], {"seq": 3})


def test_the_mlc_int4_linear_gets_the_inline_forms_kernels(cases: CaseCache) -> None:
    """As the TIR frontend reads it (version 2: float16 products summed unrounded), the MLC
    form's space is the inline form's, tensor cores included, and its kernels are right."""
    program = program_of("int4", "int4_mlc")
    space = space_for(program, CUDA)
    assert space.knobs == space_for(program_of("int4", "int4_inline"), CUDA).knobs
    assert {"gemv", "wmma", "wgmma"} <= set(space.knobs["s0.mode"])
    check(cases, program, [{"mode": "gemv", "gemv_vec": 8}, {"mode": "wmma"}], {"seq": 3})
