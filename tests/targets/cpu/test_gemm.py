"""The contraction template: every kind of contraction, under hand-picked configs that reach
each code path (k blocking, unpacked rows, either vector side, edges, prefetch) and under
sampled configs, compiled with gcc and compared with the reference evaluator."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from tests.compiler.cbuild import HOST, check_configs
from tests.compiler.test_forms import matmul_forms
from tunehub.compiler.analysis import analyze
from tunehub.compiler.dtypes import INDEX
from tunehub.compiler.ir import Binary, Call, Cast, Const, Load, Program, Var
from tunehub.compiler.loop import For, stmts
from tunehub.compiler.lower import lower, lower_function
from tunehub.compiler.program import load
from tunehub.compiler.schedule.plan import plan
from tunehub.compiler.schedule.vectorize import vectorize
from tunehub.compiler.space import space_for
from tunehub.compiler.space.space import Config
from tunehub.schemas.target import CPU_ISAS, Target
from tunehub.targets.cpu.schedule.contraction import PackedGemm
from tunehub.targets.cpu.schedule.gemm.tiling import lanes_of
from tunehub.targets.cpu.schedule.reduction import Reduction

CPU = HOST  # the kernels are run here
EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
SAMPLES = 6


def example(name: str) -> Program:
    return load(json.loads((EXAMPLES / f"{name}.json").read_text()))


def tensor(name: str, shape: list[Any], dtype: str = "float32") -> dict[str, Any]:
    return {"name": name, "shape": shape, "dtype": dtype}


def int4_matmul(k: int = 64, n: int = 48) -> Program:
    """The int4 example's shape of computation (NT dequantized weight, bias, residual,
    symbolic M), small enough for the reference evaluator."""
    return load(
        {
            "name": "int4_small",
            "symbols": {"M": {"min": 1, "max": 256}},
            "inputs": [
                tensor("X", ["M", k], "float16"),
                tensor("W", [n, k // 8], "uint32"),
                tensor("scales", [n, k // 32], "float16"),
                tensor("bias", [n], "float16"),
                tensor("residual", ["M", n], "float16"),
            ],
            "computes": [
                {
                    "name": "acc",
                    "axes": ["m", "j"],
                    "shape": ["M", n],
                    "dtype": "float32",
                    "reduce": {"op": "sum", "axes": {"k": k}},
                    "expr": "float32(X[m, k]) * (float32(int32((W[j, k // 8] >> (4 * (k % 8)))"
                    " & 15) - 7) * float32(scales[j, k // 32]))",
                },
                {
                    "name": "out",
                    "axes": ["m", "j"],
                    "shape": ["M", n],
                    "dtype": "float16",
                    "expr": "float16(float32(residual[m, j]) + float32(bias[j]) + acc[m, j])",
                },
            ],
            "outputs": ["out"],
        }
    )


def half_matmul() -> Program:
    """float16 operands, float32 accumulation, a float16 result (an epilogue cast)."""
    return load(
        {
            "name": "half",
            "inputs": [tensor("A", [33, 70], "float16"), tensor("B", [70, 45], "float16")],
            "computes": [
                {
                    "name": "acc",
                    "axes": ["i", "j"],
                    "shape": [33, 45],
                    "dtype": "float32",
                    "reduce": {"op": "sum", "axes": {"k": 70}},
                    "expr": "float32(A[i, k]) * float32(B[k, j])",
                },
                {
                    "name": "out",
                    "axes": ["i", "j"],
                    "shape": [33, 45],
                    "dtype": "float16",
                    "expr": "float16(acc[i, j])",
                },
            ],
            "outputs": ["out"],
        }
    )


def two_sided(expr: str, a: list[int], b: list[int], c: list[int], k: int) -> Program:
    """`C[i, j]`, shaped `c`, the sum over k < `k` of `expr` over `A` and `B` so shaped."""
    return load(
        {
            "name": "two_sided",
            "inputs": [tensor("A", a), tensor("B", b)],
            "computes": [
                {
                    "name": "C",
                    "axes": ["i", "j"],
                    "shape": c,
                    "dtype": "float32",
                    "reduce": {"op": "sum", "axes": {"k": k}},
                    "expr": expr,
                }
            ],
            "outputs": ["C"],
        }
    )


def matmul_outer() -> Program:
    """A matmul whose elements feed a 3-d product: fused as a row group over (i, j), the
    template computes one output element at a time."""
    return load(
        {
            "name": "outer",
            "inputs": [tensor("A", [19, 40]), tensor("B", [40, 37]), tensor("D", [5])],
            "computes": [
                {
                    "name": "C",
                    "axes": ["i", "j"],
                    "shape": [19, 37],
                    "dtype": "float32",
                    "reduce": {"op": "sum", "axes": {"k": 40}},
                    "expr": "A[i, k] * B[k, j]",
                },
                {
                    "name": "E",
                    "axes": ["i", "j", "z"],
                    "shape": [19, 37, 5],
                    "dtype": "float32",
                    "expr": "C[i, j] * D[z]",
                },
            ],
            "outputs": ["E"],
        }
    )


def variants(program: Program, *overrides: dict[str, Any], samples: int = SAMPLES) -> list[Config]:
    """The naive and default configs, the default under each override of stage-0 knobs, and
    `samples` sampled configs."""
    space = space_for(program, CPU)
    default = space.default()
    configs = [space.naive(), default]
    for override in overrides:
        config = {**default, **{f"s0.{k}": v for k, v in override.items()}}
        assert space.check(config) is None, (override, space.check(config))
        configs.append(config)
    rng = random.Random(len(program.name))
    configs += [space.sample(rng) for _ in range(samples)]
    return configs


PATHS: tuple[dict[str, Any], ...] = (
    {"pack_rows": "interleaved"},
    {"pack_rows": "rows", "kc": 0},
    {"pack_rows": "none", "tile_order": "rows"},
    {"mr": 6, "nv": 1, "mb": 1, "nb": 1, "parallel": 0},  # many partial blocks and tiles
    {"mr": 6, "nv": 2, "unroll": 4, "prefetch": 8},  # tiles fit 16 registers: every ISA
    {"vec_side": "lhs", "mr": 4, "nv": 3},
)


@pytest.mark.parametrize("name", ["matmul_odd", "batched_matmul_nt", "matmul_bias_relu"])
def test_matmuls(name: str) -> None:
    program = example(name)
    check_configs(program, CPU, variants(program, *PATHS), {})


def test_vector_side_read_in_place() -> None:
    program = example("matmul_bias_relu")  # 256 columns: whole 32- and 64-wide tiles
    unpacked = [
        {"pack_cols": False, "mr": 2, "nv": nv, "kc": kc, "pack_rows": pack}
        for nv, kc, pack in ((2, 0, "none"), (4, 64, "rows"), (1, 128, "interleaved"))
    ]
    check_configs(program, CPU, variants(program, *unpacked, samples=0), {})
    space = space_for(example("matmul_odd"), CPU)  # 253 columns
    reason = space.check({**space.default(), "s0.pack_cols": False})
    assert reason is not None and "-wide tiles across j (253)" in reason
    conv = space_for(example("conv2d_3x3"), CPU)  # the vector side spans (n, y, x)
    reason = conv.check({**conv.default(), "s0.pack_cols": False})
    assert reason is not None and "single column axis" in reason


def test_a_transposed_side_is_packed_in_blocks_of_k() -> None:
    """`B[j, k]` reads k contiguously: its panels are packed `PACK_K_BLOCK` k values at a
    time, every lane of the panel per block, so the panel's strided writes stay in L1 (an NT
    matmul 256^3 0.287 -> 0.214 ms, AVX-512 Xeon, with the NN one at 0.19). k = 100 leaves
    a partial block; right with k blocks and without, and with the rows packed too."""
    program = two_sided("A[i, k] * B[j, k]", [20, 100], [45, 100], [20, 45], 100)
    configs = variants(program, {"kc": 64}, {"pack_rows": "rows"}, samples=2)
    fn = lower_function(program, CPU, configs[1])
    assert configs[1]["s0.pack_cols"]
    assert any(isinstance(s, For) and s.var.startswith("pkb") for s in stmts(fn.body))
    check_configs(program, CPU, configs, {})


def test_vectorize_follows_contiguous_reads() -> None:
    a = Load("A", (Var("i"), Binary("+", Var("j"), Const(1, INDEX), INDEX)), "float16")
    scale = Load("s", (Var("i"),), "float32")
    value = vectorize(Binary("*", Cast("float32", a), scale, "float32"), "j", 16)
    assert value == Binary(
        "*", Cast("float32x16", Load(a.tensor, a.indices, "float16x16")), scale, "float32x16"
    )
    transposed = Load("B", (Var("j"), Var("k")), "float32")
    assert vectorize(transposed, "j", 16) is None  # a gather
    guarded = Call("where", (Binary("<", Var("j"), Var("n"), "bool"), a, a), "float16")
    assert vectorize(guarded, "j", 16) is None  # a per-lane select


def test_k_blocks_keep_partial_sums() -> None:
    program = example("matmul_bias_relu")  # k = 256
    packs = ("none", "interleaved", "rows")
    blocked = [{"kc": kc, "pack_rows": pack} for kc in (64, 128) for pack in packs]
    check_configs(program, CPU, variants(program, *blocked, samples=0), {})


def test_conv2d_as_implicit_gemm() -> None:
    program = example("conv2d_3x3")  # k = (c, ry, rx) = 288, padding through `where`
    paths = [*PATHS, {"kc": 64}, {"vec_side": "rhs", "kc": 128, "pack_rows": "interleaved"}]
    check_configs(program, CPU, variants(program, *paths), {})


@pytest.mark.parametrize("m", [1, 5, 37])
def test_int4_dequant_with_symbolic_rows(m: int) -> None:
    program = int4_matmul()
    paths = [*PATHS, {"kc": 0, "pack_rows": "interleaved"}]
    check_configs(program, CPU, variants(program, *paths, samples=3), {"M": m})


def test_half_inputs_accumulate_in_float32() -> None:
    program = half_matmul()
    check_configs(program, CPU, variants(program, *PATHS), {})


def test_inside_a_fused_row_group() -> None:
    program = matmul_outer()
    space = space_for(program, CPU)
    fused = {**space.default(), "g0.fuse": True}
    check_configs(program, CPU, [fused, *variants(program, samples=4)], {})


def test_axis_groups() -> None:
    conv = plan(analyze(example("conv2d_3x3")).stages[0])
    assert conv is not None  # n has extent 1: fixed at 0, in neither group
    assert conv.lhs_axes == ("y", "x") and conv.rhs_axes == ("f",) and conv.unit_axes == ("n",)
    bmm = plan(analyze(example("batched_matmul_nt")).stages[0])
    assert bmm is not None and bmm.lhs_axes == ("i",) and bmm.rhs_axes == ("j",)
    # The default vectorizes the side holding the output's contiguous axis.
    assert space_for(example("conv2d_3x3"), CPU).default()["s0.vec_side"] == "lhs"


def test_a_16_bit_sum_rounds_each_term_in_the_template() -> None:
    """A float16 sum rounds each product before adding it (in float32): the template keeps
    that rounding (`Plan.term`), so the stage gets its packed space and exact results."""
    program = load(
        {
            "name": "half_acc",
            "inputs": [tensor("A", [8, 16], "float16"), tensor("B", [16, 8], "float16")],
            "computes": [
                {
                    "name": "C",
                    "axes": ["i", "j"],
                    "shape": [8, 8],
                    "dtype": "float16",
                    "reduce": {"op": "sum", "axes": {"k": 16}},
                    "expr": "A[i, k] * B[k, j]",
                }
            ],
            "outputs": ["C"],
        }
    )
    stage = analyze(program).stages[0]
    found = plan(stage)
    assert found is not None and found.term == "float16"
    assert PackedGemm().knobs(stage, CPU) != Reduction().knobs(stage, CPU)
    check_configs(program, CPU, variants(program, {"pack_cols": True}, samples=8), {})


def test_register_budget() -> None:
    space = space_for(example("matmul_odd"), CPU)
    reason = space.check({**space.default(), "s0.mr": 16, "s0.nv": 2})
    assert reason is not None and "vector registers" in reason
    reason = space.check({**space.naive(), "s0.kc": 0, "s0.nv": 2})
    assert reason is not None and "plain nest" in reason


@pytest.mark.parametrize("isa", CPU_ISAS)
def test_the_default_tile_fits_every_isas_registers(isa: str) -> None:
    space = space_for(example("matmul_odd"), Target(kind="cpu", isa=isa))
    assert space.check(space.default()) is None


@pytest.mark.parametrize("isa", CPU_ISAS)
def test_the_default_blocks_leave_two_threads_work(isa: str) -> None:
    """An output that one default block would hold (a value projection, 64 x 128) is split
    so that the parallel loop has two blocks; a large one keeps its 256-wide blocks."""
    target = Target(kind="cpu", isa=isa)
    lanes = lanes_of(target, "float32")
    for m, n in ((64, 128), (64, 4096)):
        program = load(matmul_forms(m, n, 512)["nt"])
        config = space_for(program, target).default()
        columns = int(config["s0.nb"]) * int(config["s0.nv"]) * lanes
        rows = int(config["s0.mb"]) * int(config["s0.mr"])
        assert -(-n // columns) * -(-m // rows) >= 2, config
    assert (config["s0.nb"], config["s0.mb"]) == (8, 32)  # the large one's
    small = load(matmul_forms(64, 128, 64)["nt"])
    check_configs(small, CPU, [space_for(small, CPU).default()], {})


def test_a_computed_side_packs_in_runs_with_a_ragged_tail() -> None:
    """A side computed from k-contiguous reads (here B[j, k] shifted) packs in
    vectorized runs of k; a k extent that is no multiple of the run packs its tail one
    value at a time, and every k block (kc) does the same."""
    program = load(
        {
            "name": "scaled_nt",
            "inputs": [tensor("A", [13, 70]), tensor("B", [35, 70]), tensor("s", [35])],
            "computes": [
                {
                    "name": "C",
                    "axes": ["i", "j"],
                    "shape": [13, 35],
                    "dtype": "float32",
                    "reduce": {"op": "sum", "axes": {"k": 70}},
                    "expr": "A[i, k] * (B[j, k] - s[k % 35])",
                }
            ],
            "outputs": ["C"],
        }
    )
    blocks = [{"kc": kc, "pack_cols": True, "vec_side": "rhs"} for kc in (0, 64)]
    check_configs(program, CPU, variants(program, *blocks, samples=2), {})


@pytest.mark.parametrize("name", ["batched_matmul_nt", "conv2d_3x3"])
def test_column_panels_pack_once_per_column_block_and_batch(name: str) -> None:
    """With one k block a thread packs a column block's panels once and keeps them for its
    later row blocks; a new column block or batch index (B[b, j, k] differs per b) packs
    again, whichever loops run in parallel and however small the row blocks are."""
    program = example(name)
    space = space_for(program, CPU)
    reused = [
        {
            "kc": 0,
            "mr": 2,
            "mb": 1,
            "nv": 1,
            "nb": nb,
            "parallel": parallel,
            "vec_side": side,
            "pack_cols": True,
        }
        for nb in (1, 2)
        for parallel in range(len(space.knobs["s0.parallel"]))
        for side in ("rhs", "lhs")
    ]
    check_configs(program, CPU, variants(program, *reused, samples=0), {})


def test_only_a_single_k_block_keeps_its_column_panels() -> None:
    """k blocks refill the panels at every block: nothing to keep across row blocks."""
    program = example("conv2d_3x3")  # k = 288
    space = space_for(program, CPU)
    assert "memset(packed" in lower(program, CPU, {**space.default(), "s0.kc": 0}).source
    blocked = lower(program, CPU, {**space.default(), "s0.kc": 64}).source
    assert "packcols" in blocked and "memset(packed" not in blocked


def nchw_conv_bias_relu(filters: int = 7) -> Program:
    """A padded 3x3 NCHW convolution of a symbolic batch and a non-square image, with a bias
    and relu epilogue: every part a channels-last relayout permutes (k = 72: a k block of
    64 leaves a partial one)."""
    guard = "y + ry >= 1 and y + ry <= 9 and x + rx >= 1 and x + rx <= 11"
    return load(
        {
            "name": "nchw_bias_relu",
            "symbols": {"N": {"min": 1, "max": 4}},
            "inputs": [
                tensor("data", ["N", 8, 9, 11]),
                tensor("weight", [filters, 8, 3, 3]),
                tensor("bias", [filters]),
            ],
            "computes": [
                {
                    "name": "conv",
                    "axes": ["n", "f", "y", "x"],
                    "shape": ["N", filters, 9, 11],
                    "dtype": "float32",
                    "reduce": {"op": "sum", "axes": {"c": 8, "ry": 3, "rx": 3}},
                    "expr": f"where({guard}, data[n, c, y + ry - 1, x + rx - 1], 0.0)"
                    " * weight[f, c, ry, rx]",
                },
                {
                    "name": "out",
                    "axes": ["n", "f", "y", "x"],
                    "shape": ["N", filters, 9, 11],
                    "dtype": "float32",
                    "expr": "max(conv[n, f, y, x] + bias[f], 0.0)",
                },
            ],
            "outputs": ["out"],
        }
    )


def test_relayout_computes_an_nchw_conv_channels_last() -> None:
    """The seed that broadcasts the image copies it channels-last, the weights filters-last,
    and stores the output through a copy with the filters last; under every packing, k
    order, k block and parallel split it computes what the reference does, as does the
    other relaid seed (the batch, read by the image alone, is one of its columns)."""
    program = nchw_conv_bias_relu()
    space = space_for(program, CPU)
    (relaid,) = [s for s in space.seeds() if s["s0.relayout"] and s["s0.vec_side"] == "rhs"]
    source = lower(program, CPU, relaid).source
    for copy in ("datarelaid_", "weightrelaid_", "outrelaid_"):  # the copies' workspaces
        assert copy in source
    paths = [
        {"pack_rows": pack, "kc": kc, "k_order": order, "parallel": parallel}
        for pack in ("rows", "interleaved", "none")
        for kc, order, parallel in ((0, "lhs", 2), (64, "given", 1), (0, "rhs", 0))
    ]
    configs = [relaid, *({**relaid, **{f"s0.{k}": v for k, v in p.items()}} for p in paths)]
    configs += [s for s in space.seeds() if s["s0.relayout"] and s["s0.vec_side"] == "lhs"]
    assert all(space.check(config) is None for config in configs)
    for batch in (1, 3):
        check_configs(program, CPU, configs, {"N": batch})


def test_an_nchw_conv_of_many_filters_keeps_its_flipped_seed_on_16_registers() -> None:
    """32 filters: on AVX-512 the seed broadcasting the image from a channels-last copy
    gets a tile as wide as the filters (2 vectors, 14 rows); on AVX2 that tile (4 vectors)
    leaves room for 2 rows, too few, and the seed keeps the default's tile instead of
    being dropped. It computes what the reference does."""
    program = nchw_conv_bias_relu(32)
    tiles = {}
    for isa in ("x86_64-avx2", "x86_64-avx512"):
        space = space_for(program, Target(kind="cpu", isa=isa))
        default = space.default()
        (flipped,) = [s for s in space.seeds() if s["s0.relayout"] and s["s0.vec_side"] == "rhs"]
        assert default["s0.vec_side"] == "lhs"
        tiles[isa] = (flipped["s0.mr"], flipped["s0.nv"], default["s0.mr"], default["s0.nv"])
    assert tiles["x86_64-avx2"] == (6, 2, 6, 2)
    assert tiles["x86_64-avx512"][:2] == (14, 2)
    space = space_for(program, CPU)
    seeds = [s for s in space.seeds() if s["s0.relayout"] and s["s0.vec_side"] == "rhs"]
    check_configs(program, CPU, seeds, {"N": 2})


def test_relayout_copies_the_output_back_along_whole_vectors() -> None:
    """With 16 filters and rows of 11 pixels, the output's copy back to NCHW walks the
    filters innermost (whole vectors of contiguous reads; its rows of 11 are not whole
    vectors) and stays right; with 7 filters it walks the pixels, as the buffer is laid."""
    for filters, innermost in ((16, 16), (7, 11)):
        program = nchw_conv_bias_relu(filters)
        space = space_for(program, CPU)
        relaid = {**space.default(), "s0.relayout": True, "s0.vec_side": "rhs"}
        assert space.check(relaid) is None
        lines = lower(program, CPU, relaid).source.splitlines()
        store = next(n for n, line in enumerate(lines) if line.lstrip().startswith("out_["))
        loop = next(line for line in reversed(lines[:store]) if "for (" in line)
        assert f"< {innermost};" in loop
        check_configs(program, CPU, [relaid], {"N": 2})


def test_relayout_needs_a_layout_to_change() -> None:
    """A row-major matmul's sides and output are already laid out as the template reads
    and writes them: `relayout` is refused there, and no seed offers it; transposed sides
    (A[k, i], B[j, k]) are copied as packing reads them, a seed offers that, and it is
    computed right."""
    nn = example("matmul_odd")
    space = space_for(nn, CPU)
    assert space.check({**space.default(), "s0.relayout": True}) is not None
    assert not any(seed["s0.relayout"] for seed in space.seeds())
    tt = two_sided("A[k, i] * B[j, k]", [19, 13], [35, 19], [13, 35], 19)
    relaid = {"relayout": True, "vec_side": "rhs", "pack_rows": "rows"}
    transposed_output = {"relayout": True, "vec_side": "lhs", "mr": 4, "nv": 1}
    seeded = [seed for seed in space_for(tt, CPU).seeds() if seed["s0.relayout"]]
    assert len(seeded) == 1
    configs = variants(tt, relaid, transposed_output, samples=0) + seeded
    check_configs(tt, CPU, configs, {})
