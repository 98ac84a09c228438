"""Lowering end to end: programs compiled with gcc and run against the reference evaluator
under the naive config, the default config and sampled configs, for every stage class and
the semantics the C renderer must get right."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

import pytest

from tests.compiler.cbuild import HOST, check_configs
from tunehub.compiler.backend import compiler_backend
from tunehub.compiler.errors import InvalidConfig
from tunehub.compiler.ir import Call, Program, walk
from tunehub.compiler.loop import (
    Assign,
    For,
    Namer,
    Prefetch,
    Seq,
    Store,
    const,
    format_stmt,
    seq,
    stmts,
)
from tunehub.compiler.lower import lower, lower_function, signature_names
from tunehub.compiler.program import load
from tunehub.compiler.schedule.stage import Context
from tunehub.compiler.space import space_for

CPU = HOST  # the kernels are run here
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SAMPLES = 4


def configs(program: Program, samples: int = SAMPLES, seed: int = 0) -> list[dict[str, Any]]:
    space = space_for(program, CPU)
    rng = random.Random(seed)
    return [space.naive(), space.default(), *(space.sample(rng) for _ in range(samples))]


def check(program: Program, symbols: dict[str, int] | None = None, samples: int = SAMPLES) -> None:
    check_configs(program, CPU, configs(program, samples), symbols or {})


def signature(computes: list[Any], inputs: list[Any], outputs: list[str], **extra: Any) -> Program:
    return load({"name": "t", "inputs": inputs, "computes": computes, "outputs": outputs, **extra})


def t(name: str, shape: list[Any], dtype: str = "float32") -> dict[str, Any]:
    return {"name": name, "shape": shape, "dtype": dtype}


def c(
    name: str, axes: str, shape: list[Any], expr: str, dtype: str = "float32", **reduce: Any
) -> dict[str, Any]:
    decl: dict[str, Any] = {"name": name, "axes": list(axes), "shape": shape, "dtype": dtype}
    decl["expr"] = expr
    if reduce:
        decl["reduce"] = {"op": reduce["op"], "axes": reduce["over"]}
    return decl


@pytest.mark.parametrize(
    ("name", "symbols"),
    [
        ("gelu", {}),
        ("column_sum", {}),
        ("softmax", {}),
        ("layernorm", {}),
        ("rmsnorm", {}),
        ("matmul_odd", {}),
        ("matmul_bias_relu", {}),
        ("batched_matmul_nt", {}),
        ("conv2d_3x3", {}),
        ("int4_matmul", {"M": 3}),
    ],
)
def test_examples(name: str, symbols: dict[str, int]) -> None:
    program = load(json.loads((EXAMPLES / f"{name}.json").read_text()))
    check(program, symbols, samples=2)


def test_symbolic_and_non_dividing_extents() -> None:
    program = signature(
        [c("C", "ij", ["M", "N"], "A[i, k] * B[k, j]", op="sum", over={"k": 13})],
        [t("A", ["M", 13]), t("B", [13, "N"])],
        ["C"],
        symbols={"M": {"min": 1, "max": 512}, "N": {"min": 1, "max": 512}},
    )
    check(program, {"M": 37, "N": 70}, samples=8)
    check(program, {"M": 1, "N": 1})


def test_integer_semantics() -> None:
    """C truncation for // and %, zero divisors, wrap-around in narrow and 32-bit types."""
    program = signature(
        [
            c("q", "i", [64], "a[i] // b[i] + a[i] % b[i] * 16", "int32"),
            c("w", "i", [64], "a[i] * 1000000000 + (a[i] << 28)", "int32"),
            c("n", "i", [64], "int8(a[i]) * int8(100) + int8(b[i] // 3)", "int8"),
            c("u", "i", [64], "uint8(a[i]) - uint8(200) + (uint8(b[i]) >> 1)", "uint8"),
            c("f", "i", [64], "int32(x[i] * 7.0) + int32(uint8(x[i] * 100.0))", "int32"),
            c("g", "i", [64], "x[i] * 9.0 // 2.0 + x[i] * 9.0 % 2.0"),
            c("h", "i", [64], "(a[i] > b[i]) and not (x[i] < 0.0) or (a[i] == b[i])", "bool"),
            c("m", "i", [64], "min(a[i], b[i]) * max(a[i], b[i]) + abs(a[i] - 3)", "int32"),
        ],
        [t("a", [64], "int32"), t("b", [64], "int32"), t("x", [64])],
        ["q", "w", "n", "u", "f", "g", "h", "m"],
    )
    check(program)


def test_float_functions() -> None:
    exprs = [
        "exp(x[i]) + log(abs(x[i]) + 1.0) + sqrt(abs(x[i])) + rsqrt(abs(x[i]) + 1.0)",
        "tanh(x[i]) + sigmoid(x[i]) + erf(x[i]) + floor(x[i] * 4.0) + ceil(x[i] * 4.0)",
        "pow(abs(x[i]) + 1.0, 1.5) + x[i] ** 2.0 - float32(-x[i] < 0.5)",
    ]
    computes = [c(f"y{n}", "i", [40], e) for n, e in enumerate(exprs)]
    computes.append(c("d", "i", [40], "float64(x[i]) * exp(float64(x[i]))", "float64"))
    program = signature(computes, [t("x", [40])], ["y0", "y1", "y2", "d"])
    check(program)


def test_half_dtypes() -> None:
    """float16/bfloat16 inputs and outputs, a half accumulator rounded per term."""
    program = signature(
        [
            c("h", "ik", [9, 33], "x[i, k] * 1.5 + float16(y[k])", "float16"),
            c("s", "i", [9], "float32(h[i, k]) * y[k]", "bfloat16", op="sum", over={"k": 33}),
            c("o", "i", [9], "float16(s[i]) + float16(1.0)", "float16"),
        ],
        [t("x", [9, 33], "float16"), t("y", [33], "bfloat16")],
        ["o"],
    )
    check(program, samples=6)


def test_guarded_reads_for_padding() -> None:
    program = signature(
        [
            c(
                "y",
                "i",
                ["N"],
                "where(i + r >= 1 and i + r <= N, x[i + r - 1], 0.0) * w[r]",
                op="sum",
                over={"r": 3},
            ),
            c("z", "i", ["N"], "where(i >= 2, x[i - 2], -1.0) + y[i]"),
        ],
        [t("x", ["N"]), t("w", [3])],
        ["z"],
        symbols={"N": {"min": 1, "max": 100}},
    )
    check(program, {"N": 19})
    check(program, {"N": 1})


def test_reductions_of_every_op_and_a_scalar_output() -> None:
    program = signature(
        [
            c("mx", "j", [17], "x[i, j] * 3.0", op="max", over={"i": 21}),
            c("mn", "j", [17], "a[i, j]", "int8", op="min", over={"i": 21}),
            c("pr", "i", [21], "1.0 + 0.0625 * x[i, j]", op="prod", over={"j": 17}),
            c("total", "", [], "x[i, j]", "float64", op="sum", over={"i": 21, "j": 17}),
            c("any", "", [], "a[i, j] > 6", "bool", op="max", over={"i": 21, "j": 17}),
        ],
        [t("x", [21, 17]), t("a", [21, 17], "int8")],
        ["mx", "mn", "pr", "total", "any"],
    )
    check(program, samples=8)


def test_epilogue_chain_and_materialized_anchor() -> None:
    program = signature(
        [
            c("acc", "ij", [12, 20], "A[i, k] * B[j, k]", op="sum", over={"k": 7}),
            c("biased", "ij", [12, 20], "acc[i, j] + bias[j]"),
            c("act", "ij", [12, 20], "float16(max(biased[i, j], 0.0))", "float16"),
            c("stat", "i", [12], "float32(act[i, j])", op="max", over={"j": 20}),
            c("out", "ij", [12, 20], "float32(act[i, j]) - stat[i]"),
        ],
        [t("A", [12, 7]), t("B", [20, 7]), t("bias", [20])],
        ["out", "act"],
    )
    check(program)


def _softmax_rows(rows: list[int], width: int) -> Program:
    """Softmax over `width` columns of rows `rows` (axes `b`, `h`): max, sum, output."""
    axes = "bh"[: len(rows)]
    index = ", ".join(axes)
    return signature(
        [
            c("m", axes, rows, f"x[{index}, k]", op="max", over={"k": width}),
            c("s", axes, rows, f"exp(x[{index}, k] - m[{index}])", op="sum", over={"k": width}),
            c("y", axes + "k", [*rows, width], f"exp(x[{index}, k] - m[{index}]) / s[{index}]"),
        ],
        [t("x", [*rows, width])],
        ["y"],
    )


def test_3d_softmax_rows() -> None:
    program = _softmax_rows([2, 3], 37)
    assert len(space_for(program, CPU).analysis.groups) == 1
    check(program, samples=6)


def test_a_kept_term_is_computed_once_and_read_back() -> None:
    """Softmax's row sum stores each `exp(x - max)` into `y` as it sums it and `y`'s stage
    reads it back (`Stage.keeps`): every `exp` of the kernel is stored into `y`, none
    accumulated or computed again. Right fused and not, in vector accumulators, an `omp
    simd` loop, scalar, or split over threads, on rows of 37 (a tail past the vectors) over
    two row axes."""
    program = _softmax_rows([2, 3], 37)
    space = space_for(program, CPU)
    assert [s.keeps for s in space.analysis.stages] == [None, "y", None]
    default = space.default()
    fn = lower_function(program, CPU, {**default, "s1.unroll": 2}, space)
    exps = [
        s
        for s in stmts(fn.body)
        if isinstance(s, (Store, Assign))
        and any(isinstance(e, Call) and e.fn == "exp" for e in walk(s.value))
    ]
    assert len(exps) == 3  # two vector accumulators' terms and the tail's
    assert all(isinstance(s, Store) and s.buffer == "y" for s in exps)
    unfused = space.canonical({**default, "g0.fuse": False})
    configs = [
        default,
        {**default, "s1.unroll": 2},
        {**default, "s1.unroll": 1},
        {**default, "s1.vec": 0, "s2.vec": 0},
        unfused,
        {**unfused, "s1.split": True, "s1.parallel": 0, "s1.unroll": 1},
        space.naive(),
    ]
    assert all(space.check(config) is None for config in configs)
    assert space.check({**unfused, "s1.cols": 16, "s1.unroll": 1}) is not None
    check_configs(program, CPU, configs, {})


def test_naive_config_is_the_fallback_nest() -> None:
    """Every schedule's naive config lowers to exactly the plain loop nest."""
    for name in ("softmax", "matmul_odd", "column_sum", "gelu"):
        program = load(json.loads((EXAMPLES / f"{name}.json").read_text()))
        space = space_for(program, CPU)
        naive = lower_function(program, CPU, space.naive(), space)
        ctx = Context(space.analysis, CPU, Namer(signature_names(program)))
        assert naive.body == seq(
            compiler_backend(CPU).fallback.lower(s, {}, ctx, ()) for s in space.analysis.stages
        )


def test_naive_kernel_is_scalar_and_serial() -> None:
    program = load(json.loads((EXAMPLES / "matmul_128.json").read_text()))
    source = lower(program, CPU, space_for(program, CPU).naive()).source
    assert "#pragma omp" not in source and "no-tree-loop-vectorize" in source


def test_invalid_configs_are_rejected() -> None:
    program = load(json.loads((EXAMPLES / "softmax.json").read_text()))
    naive = space_for(program, CPU).naive()
    for bad in (
        {**naive, "s0.vec": 3},
        {**naive, "nope": 1},
        {k: v for k, v in naive.items() if k != "s0.vec"},
        {**naive, "s0.vec": 16, "s0.unroll": 4, "s0.cols": 16},
        {**naive, "s0.split": True, "s0.parallel": 1},
    ):
        with pytest.raises(InvalidConfig):
            lower(program, CPU, bad)


@pytest.mark.parametrize("name", ["softmax", "layernorm", "rmsnorm"])
def test_row_reductions_with_interleaved_vector_accumulators(name: str) -> None:
    """vec with unroll: that many independent vector accumulators per row (and a scalar one
    for the values past the last whole step), fused into the row group or not."""
    program = load(json.loads((EXAMPLES / f"{name}.json").read_text()))
    space = space_for(program, CPU)
    configs = []
    for unroll, fuse in ((2, True), (4, False)):
        config = space.canonical({**space.default(), "g0.fuse": fuse})
        for stage in space.analysis.stages:
            if stage.kind == "reduction":
                config[f"s{stage.index}.unroll"] = unroll
        assert space.check(config) is None
        configs.append(config)
    check_configs(program, CPU, configs, {})


def test_a_fused_row_group_prefetches_the_next_row_a_line_at_a_time() -> None:
    """With `prefetch` (rows not pipelined), the last stage's row loop runs a cache line at a
    time (16 floats), each line headed by a prefetch of the same columns one row on; rows of
    37 (not whole lines) over two row axes, float16 data (32 to a line), scalar and vector
    loops, right."""
    program = signature(
        [
            c(
                "s",
                "bh",
                [2, 3],
                "float32(x[b, h, k]) * float32(x[b, h, k])",
                op="sum",
                over={"k": 37},
            ),
            c(
                "y",
                "bhk",
                [2, 3, 37],
                "float16(float32(x[b, h, k]) / sqrt(s[b, h] + 1.0))",
                "float16",
            ),
        ],
        [t("x", [2, 3, 37], "float16")],
        ["y"],
    )
    space = space_for(program, CPU)
    default = {**space.default(), "g0.prefetch": True, "g0.pipeline": 0}
    assert default["g0.fuse"] and space.check(default) is None
    fn = lower_function(program, CPU, default, space)
    hints = [s for s in stmts(fn.body) if isinstance(s, Prefetch)]
    assert [h.buffer for h in hints] == ["x"]
    lines = [
        s
        for s in stmts(fn.body)
        if isinstance(s, For) and isinstance(s.body, Seq) and hints[0] in s.body.body
    ]
    assert len(lines) == 1 and lines[0].extent == const(2)  # 37 halves: two lines of 32
    rows = format_stmt(fn.body)
    assert "prefetch x[" in rows and "h + 1" in rows
    off = {**default, "g0.prefetch": False}
    assert not any(isinstance(s, Prefetch) for s in stmts(lower_function(program, CPU, off).body))
    scalar = {**default, "s1.vec": 0}
    check_configs(program, CPU, [default, off, scalar], {})


def _layernorm_rows(rows: list[Any], width: int) -> Program:
    """Layernorm over `width` columns of rows `[b, h]`: a mean, a variance, the output (on
    the CPU three stages: the variance's two sums in one pass, the mean made of one of them,
    and the output)."""
    return signature(
        [
            c("mu", "bh", rows, f"x[b, h, k] / {width}.0", op="sum", over={"k": width}),
            c(
                "var",
                "bh",
                rows,
                f"(x[b, h, k] - mu[b, h]) * (x[b, h, k] - mu[b, h]) / {width}.0",
                op="sum",
                over={"k": width},
            ),
            c(
                "y",
                "bhk",
                [*rows, width],
                "(x[b, h, k] - mu[b, h]) * rsqrt(var[b, h] + 0.00001) * g[k]",
            ),
        ],
        [t("x", [*rows, width]), t("g", [width])],
        ["y"],
        symbols={"R": {"min": 1, "max": 64}} if "R" in rows else {},
    )


def _chunked(fn_body: Any) -> list[For]:
    """The loops that run two loops in step: a `chunk` loop over two loops."""
    return [
        s
        for s in stmts(fn_body)
        if isinstance(s, For)
        and s.var.startswith("chunk")
        and isinstance(s.body, Seq)
        and [type(b) for b in s.body.body] == [For, For]
    ]


def test_a_pipelined_row_group_overlaps_the_next_rows_first_stage_with_this_rows_last() -> None:
    """`pipeline` blocks the innermost row axis; in a block, the next row's sums (the
    variance's two in one loop, `one_pass`, the mean made of one) run in step with this row's
    output loop (rows of 128 at 16 lanes: the sums' 2 iterations of 4 vectors against the
    output's 8 vectors, in 2 chunks; at 8 lanes, 4 chunks). Right for row counts that leave
    partial blocks and blocks of one row, over two row axes, with the prefetch knob refused
    beside it."""
    program = _layernorm_rows([2, "R"], 128)
    space = space_for(program, CPU)
    default = space.default()
    assert default["g0.pipeline"] == 64 and not default["g0.prefetch"]
    fn = lower_function(program, CPU, default, space)
    [zipped] = _chunked(fn.body)
    sum_steps = 128 // (default["s0.vec"] * default["s0.unroll"])  # vectors of the ISA's width
    assert zipped.extent == const(math.gcd(sum_steps, 128 // default["s2.vec"]))
    ahead, here = zipped.body.body
    written = {s.name for s in stmts(ahead) if isinstance(s, Assign)}
    written |= {s.buffer for s in stmts(ahead) if isinstance(s, Store)}
    assert len(written) == 2  # each sum's accumulator (or array of vector accumulators)
    ahead_text, here_text = format_stmt(ahead), format_stmt(here)
    assert "h + 1" in ahead_text and "h + 1" not in here_text and "y[" in here_text
    both = {**default, "g0.prefetch": True}
    assert "prefetch" in (space.check(both) or "")
    small = {**default, "g0.pipeline": 16}
    scalar = {**small, "s2.vec": 0}
    for rows in (37, 33, 1):
        check_configs(program, CPU, [default, small, scalar], {"R": rows})


def test_one_pass_variance_agrees_with_the_reference_far_from_zero() -> None:
    """Rows whose mean (about 100) is far larger than their spread (about 0.6), where the
    textbook one-pass `E[x^2] - E[x]^2` in float32 is off by 4% of the variance: the
    sums shifted by each row's first term agree with the reference, fused or not, in
    sibling loops or (differing knobs) one after another."""
    program = signature(
        [
            c("mu", "i", [24], "(x[i, k] + 100.0) / 200.0", op="sum", over={"k": 200}),
            c("var", "i", [24], "(x[i, k] + 100.0 - mu[i]) ** 2", op="sum", over={"k": 200}),
            c("y", "ik", [24, 200], "(x[i, k] + 100.0 - mu[i]) * rsqrt(var[i] / 200.0)"),
        ],
        [t("x", [24, 200])],
        ["y", "var"],
    )
    space = space_for(program, CPU)
    default = space.default()
    assert len(space.analysis.stages) == 3  # the mean is the shifted sum plus 200 K
    apart = {**default, "s0.unroll": 1, "s1.unroll": 2}
    unfused = space.canonical({**default, "g0.fuse": False})
    simd = {**default, **{f"s{n}.unroll": 1 for n in range(2)}}  # one `omp simd` reduction loop
    scalar = {**default, **{f"s{n}.vec": 0 for n in range(2)}, "g0.pipeline": 0}
    check_configs(program, CPU, [default, apart, unfused, simd, scalar], {})


def test_one_pass_sums_of_a_half_variance_are_kept_at_the_accumulators_precision() -> None:
    """A float16 variance of rows whose first term stands 30 above the rest: the sums are
    shifted by that term, so their difference cancels about 64 * 900 down to the variance's
    64 * 15. They are stored as float32 (each term rounded to float16, as the program's own
    sum rounds its terms); stored as float16 (a step of 32 at 58000), this check fails."""
    program = signature(
        [
            c(
                "mu",
                "i",
                [8],
                "(float32(x[i, k]) + where(k == 0, 30.0, 0.0)) / 64.0",
                op="sum",
                over={"k": 64},
            ),
            c(
                "var",
                "i",
                [8],
                "(float32(x[i, k]) + where(k == 0, 30.0, 0.0) - mu[i]) ** 2",
                "float16",
                op="sum",
                over={"k": 64},
            ),
            c(
                "y",
                "ik",
                [8, 64],
                "float16(float32(x[i, k]) * rsqrt(float32(var[i]) + 1.0))",
                "float16",
            ),
        ],
        [t("x", [8, 64], "float16")],
        ["y", "var"],
    )
    space = space_for(program, CPU)
    sums = [s for s in space.analysis.stages if s.anchor.name in space.analysis.sums_for]
    assert [(s.anchor.dtype, s.anchor.term) for s in sums] == [("float32", "float16")] * 2
    check_configs(program, CPU, [space.default(), space.naive()], {})


def test_sibling_reductions_of_a_row_share_one_loop() -> None:
    """A row's min and max (neither reads the other): one loop computes both, its
    reductions combined; with nothing left to overlap, `pipeline` lays the rows out as
    without it (a statement run in step with itself duplicated its locals)."""
    program = signature(
        [
            c("lo", "i", [9], "x[i, k]", op="min", over={"k": 64}),
            c("hi", "i", [9], "x[i, k]", op="max", over={"k": 64}),
        ],
        [t("x", [9, 64])],
        ["lo", "hi"],
    )
    space = space_for(program, CPU)
    default = space.default()
    assert default["g0.fuse"] and default["g0.pipeline"]
    fn = lower_function(program, CPU, default, space)
    [loop] = [s for s in stmts(fn.body) if isinstance(s, For) and s.reduction]
    assert [op for op, _ in loop.reduction] == ["min", "max"]
    assert not _chunked(fn.body)
    check_configs(program, CPU, [default, {**default, "s1.unroll": 2}], {})


def test_a_reduction_loop_runs_in_step_four_vectors_at_a_time_or_more() -> None:
    """A softmax's next row max (an `omp simd` reduction loop) beside this row's output: in
    chunks of four of its vectors (each chunk combines its lanes again), not one: rows of
    128 at the ISA's `v` lanes run in `128 / (4 v)` chunks."""
    program = _softmax_rows([6], 128)
    space = space_for(program, CPU)
    default = space.default()
    assert default["s0.unroll"] == 1 and default["g0.pipeline"]
    [zipped] = _chunked(lower_function(program, CPU, default, space).body)
    assert zipped.extent == const(128 // (4 * default["s0.vec"]))
    check_configs(program, CPU, [default], {})


def test_pipelined_rows_run_one_after_another_where_no_chunking_fits() -> None:
    """Rows of 100 split into no whole vectors of 16: no chunk loop and no row blocks, the
    stages of each row in turn as without `pipeline`."""
    program = _layernorm_rows([3, 5], 100)
    space = space_for(program, CPU)
    default = space.default()
    fn = lower_function(program, CPU, default, space)
    assert not _chunked(fn.body)
    assert not any(isinstance(s, For) and s.var == "hb" for s in stmts(fn.body))  # h's blocks
    check_configs(program, CPU, [default, {**default, "g0.pipeline": 16}], {})
