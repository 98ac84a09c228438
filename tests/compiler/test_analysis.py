"""Stage analysis: classification, prologue inlining, epilogue fusion, workspaces, row groups."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tunehub.compiler.analysis import CONTRACTION, INJECTIVE, REDUCTION, analyze, contiguous
from tunehub.compiler.ir import Call, Cast, Const, Load, Program, Var, loads, walk
from tunehub.compiler.program import load

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def example(name: str) -> Program:
    return load(json.loads((EXAMPLES / f"{name}.json").read_text()))


def program(inputs: list[Any], computes: list[Any], outputs: list[str], **extra: Any) -> Program:
    return load({"name": "t", "inputs": inputs, "computes": computes, "outputs": outputs, **extra})


def tensor(name: str, shape: list[Any], dtype: str = "float32") -> dict[str, Any]:
    return {"name": name, "shape": shape, "dtype": dtype}


def compute(name: str, axes: str, shape: list[Any], expr: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "axes": list(axes), "shape": shape, "dtype": "float32", "expr": expr}


def reduce(
    name: str, axes: str, shape: list[Any], expr: str, op: str, over: dict[str, Any]
) -> dict[str, Any]:
    return {**compute(name, axes, shape, expr), "reduce": {"op": op, "axes": over}}


@pytest.mark.parametrize(
    ("name", "kinds"),
    [
        ("matmul_128", [CONTRACTION]),
        ("batched_matmul_nt", [CONTRACTION]),
        ("conv2d_3x3", [CONTRACTION]),
        ("int4_matmul", [CONTRACTION]),
        ("column_sum", [REDUCTION]),
        ("gelu", [INJECTIVE]),
        ("softmax", [REDUCTION, REDUCTION, INJECTIVE]),
        ("layernorm", [REDUCTION, REDUCTION, INJECTIVE]),
    ],
)
def test_examples_are_classified(name: str, kinds: list[str]) -> None:
    assert [s.kind for s in analyze(example(name)).stages] == kinds


def test_matmul_epilogue_is_fused_into_the_contraction() -> None:
    (stage,) = analyze(example("matmul_bias_relu")).stages
    assert stage.kind == CONTRACTION and stage.output
    assert [c.name for c in stage.epilogue] == ["out"] and stage.buffer == "out"
    assert stage.dtype == "float32"
    assert stage.contraction is not None
    assert stage.contraction.lhs_axes == {"i"} and stage.contraction.rhs_axes == {"j"}


def test_gemv_is_a_reduction_not_a_contraction() -> None:
    p = program(
        [tensor("A", [8, 16]), tensor("x", [16])],
        [reduce("y", "i", [8], "A[i, k] * x[k]", "sum", {"k": 16})],
        ["y"],
    )
    assert analyze(p).stages[0].kind == REDUCTION


def test_max_of_products_is_a_reduction() -> None:
    p = program(
        [tensor("A", [8, 16]), tensor("B", [16, 4])],
        [reduce("C", "ij", [8, 4], "A[i, k] * B[k, j]", "max", {"k": 16})],
        ["C"],
    )
    assert analyze(p).stages[0].kind == REDUCTION


def test_injective_producers_are_inlined_with_their_rounding() -> None:
    p = program(
        [tensor("A", [8, 16], "float16"), tensor("B", [16, 4])],
        [
            {**compute("h", "ik", [8, 16], "A[i, k] * 2.0"), "dtype": "float16"},
            reduce("C", "ij", [8, 4], "float32(h[i, k]) * B[k, j]", "sum", {"k": 16}),
        ],
        ["C"],
    )
    (stage,) = analyze(p).stages
    assert {ld.tensor for ld in loads(stage.anchor.body)} == {"A", "B"}
    assert any(isinstance(e, Cast) and e.dtype == "float16" for e in walk(stage.anchor.body))
    assert stage.kind == CONTRACTION


def test_an_anchor_read_twice_is_materialized() -> None:
    p = program(
        [tensor("X", [4, 8])],
        [
            reduce("s", "i", [4], "X[i, k]", "sum", {"k": 8}),
            compute("a", "i", [4], "s[i] * 2.0"),
            compute("b", "i", [4], "s[i] + 1.0"),
        ],
        ["a", "b"],
    )
    analysis = analyze(p)
    assert [s.buffer for s in analysis.stages] == ["s", "a", "b"]
    assert [s.buffer for s in analysis.workspaces] == ["s"]


def test_transposed_read_is_not_an_epilogue() -> None:
    p = program(
        [tensor("X", [4, 4, 8])],
        [
            reduce("s", "ij", [4, 4], "X[i, j, k]", "sum", {"k": 8}),
            compute("t", "ij", [4, 4], "s[j, i]"),
        ],
        ["t"],
    )
    assert [s.buffer for s in analyze(p).stages] == ["s", "t"]


def test_output_anchor_is_not_fused_into() -> None:
    p = program(
        [tensor("X", [4, 8])],
        [reduce("s", "i", [4], "X[i, k]", "sum", {"k": 8}), compute("t", "i", [4], "s[i] * 2.0")],
        ["s", "t"],
    )
    assert [(s.buffer, s.output) for s in analyze(p).stages] == [("s", True), ("t", True)]


def test_epilogue_waits_for_stages_it_reads() -> None:
    """`out` reads `b`, computed after `a`: fusing it into `a` would read `b` too early."""
    p = program(
        [tensor("X", [4, 8])],
        [
            reduce("a", "i", [4], "X[i, k]", "sum", {"k": 8}),
            reduce("b", "i", [4], "X[i, k] * 2.0", "max", {"k": 8}),
            compute("out", "i", [4], "a[i] + b[i]"),
        ],
        ["out"],
    )
    stages = analyze(p).stages
    assert [(s.anchor.name, s.buffer) for s in stages] == [("a", "a"), ("b", "out")]


def test_finish_applies_the_epilogue_at_the_anchor_axes() -> None:
    (stage,) = analyze(example("int4_matmul")).stages
    value = stage.finish(Var("acc", "float32"), {"m": Var("r"), "n": Var("c")})
    reads = {(ld.tensor, ld.indices) for ld in loads(value)}
    assert reads == {("bias", (Var("c"),)), ("residual", (Var("r"), Var("c")))}
    assert isinstance(value, Cast) and value.dtype == "float16"


def test_softmax_forms_one_row_group() -> None:
    (group,) = analyze(example("softmax")).groups
    assert (group.first, group.last, group.rows) == (0, 2, 1)


def test_reading_another_row_breaks_the_group() -> None:
    p = program(
        [tensor("X", [4, 8])],
        [
            reduce("m", "i", [4], "X[i, k]", "max", {"k": 8}),
            compute("y", "ij", [4, 8], "X[i, j] - m[3 - i]"),
        ],
        ["y"],
    )
    assert analyze(p).groups == ()


def test_contiguity_of_axes() -> None:
    stage = analyze(example("matmul_128")).stages[0]
    assert not contiguous(stage, "k")  # B[k, j] strides over k
    assert contiguous(stage, "j")
    row = analyze(example("softmax")).stages[0]
    assert contiguous(row, "k")


def test_loads_of_inlined_producers_are_gone() -> None:
    stage = analyze(example("int4_matmul")).stages[0]
    assert all(isinstance(ld, Load) for ld in loads(stage.anchor.body))
    assert {ld.tensor for ld in stage.reads()} == {"X", "W", "scales", "bias", "residual"}


def _variance(expr: str, outputs: tuple[str, ...] = ("y",)) -> Program:
    """Rows of 64: a mean, a sum `var` of `expr` (which may read `dev` = x - mean and an
    input `m`), and an output over both."""
    dev = compute("dev", "ik", [8, 64], "x[i, k] - mu[i]")
    return program(
        [tensor("x", [8, 64]), *([tensor("m", [8])] if "m[" in expr else [])],
        [
            reduce("mu", "i", [8], "x[i, k] / 64.0", "sum", {"k": 64}),
            *([dev] if "dev[" in expr else []),
            reduce("var", "i", [8], expr, "sum", {"k": 64}),
            compute("y", "ij", [8, 64], "(x[i, j] - mu[i]) * rsqrt(var[i] + 0.00001)"),
        ],
        list(outputs),
    )


@pytest.mark.parametrize(
    "expr",
    [
        "(x[i, k] - mu[i]) * (x[i, k] - mu[i])",
        "(mu[i] - x[i, k]) ** 2",
        "dev[i, k] * dev[i, k] / 64.0",
        "0.5 * ((x[i, k] - mu[i]) * (x[i, k] - mu[i]))",
    ],
)
def test_one_pass_splits_a_variance_into_two_sums_that_need_no_mean(expr: str) -> None:
    """However the squared deviation is written (the mean inlined or not, squared by `**`,
    the terms scaled), `one_pass` sums `x - K` and `(x - K) ** 2`, K being the row's first
    term, and the mean, a sum of `x / 64`, becomes `(S1 + 64 * K) / 64`: no sum of its own;
    the output reads the two sums. Without it, the stages are as written."""
    p = _variance(expr)
    stages = analyze(p, one_pass=True).stages
    assert [s.anchor.name for s in stages] == ["var_shifted", "var_squares", "y"]
    for stage in stages[:2]:
        assert {ld.tensor for ld in loads(stage.anchor.body)} == {"x"}
        assert any(ld.indices[-1] == Const(0, "int64") for ld in loads(stage.anchor.body))
    assert {ld.tensor for ld in stages[2].reads()} == {"x", "var_shifted", "var_squares"}
    assert [s.anchor.name for s in analyze(p).stages] == ["mu", "var", "y"]
    assert [g.stages for g in analyze(p, one_pass=True).groups] == [range(0, 3)]


@pytest.mark.parametrize(
    ("mean", "dtype"),
    [
        ("x[i, k] * x[i, k]", "float32"),  # another sum: no mean of the variance's x
        ("x[i, k] / float32(k + 1)", "float32"),  # scaled along the row
        ("x[i, k] / 64.0", "float16"),  # a 16-bit sum: S1 does not round as it does
    ],
)
def test_one_pass_keeps_a_sum_it_cannot_make_from_the_shifted_one(mean: str, dtype: str) -> None:
    p = program(
        [tensor("x", [8, 64])],
        [
            {**reduce("mu", "i", [8], mean, "sum", {"k": 64}), "dtype": dtype},
            reduce("var", "i", [8], "(x[i, k] - mu[i]) ** 2", "sum", {"k": 64}),
            compute("y", "ij", [8, 64], "x[i, j] * rsqrt(var[i] + 0.00001)"),
        ],
        ["y"],
    )
    names = [s.anchor.name for s in analyze(p, one_pass=True).stages]
    assert names == ["mu", "var_shifted", "var_squares", "y"]


@pytest.mark.parametrize(
    "expr",
    [
        "(x[i, k] - m[i]) * (x[i, k] - m[i])",  # the centre is no reduction: one pass already
        "(x[i, k] - mu[i]) * (x[i, k] + mu[i])",  # no square
        "(x[i, k] - mu[i]) * (x[i, k] - mu[i]) * x[i, k]",  # scaled along the row
    ],
)
def test_one_pass_leaves_other_sums_alone(expr: str) -> None:
    p = _variance(expr)
    assert [s.anchor.name for s in analyze(p, one_pass=True).stages] == ["mu", "var", "y"]


def test_keep_terms_stores_a_costly_term_where_an_output_computes_it_again() -> None:
    """Softmax's row sum keeps its `exp(x - max)` terms in `Y`, whose stage reads them back
    instead of calling `exp` again; the row max's terms (plain reads) are not worth keeping.
    Without `keep_terms` (CUDA), the stages are as written."""
    p = example("softmax")
    stages = analyze(p, keep_terms=True).stages
    assert [s.keeps for s in stages] == [None, "Y", None]
    body = stages[2].anchor.body
    assert not any(isinstance(e, Call) and e.fn == "exp" for e in walk(body))
    assert Load("Y", (Var("i"), Var("j")), "float32") in loads(body)
    assert [s.keeps for s in analyze(p).stages] == [None, None, None]
    assert [g.stages for g in analyze(p, keep_terms=True).groups] == [range(0, 3)]


@pytest.mark.parametrize(
    ("term", "out", "dtype"),
    [
        ("x[i, k] - m[i]", "(x[i, j] - m[i]) / s[i]", "float32"),  # nothing costly
        ("exp(x[i, k] - m[i])", "exp(x[j, i] - m[i]) / s[i]", "float32"),  # not along the row
        ("exp(x[i, k] - m[i])", "exp(x[i, j] - m[i]) / s[i]", "float16"),  # a store rounds
        ("exp(x[i, k] - m[i])", "exp(x[i, j] - m[i] + 1.0) / s[i]", "float32"),  # another term
    ],
)
def test_keep_terms_keeps_only_what_reads_back_as_it_was(term: str, out: str, dtype: str) -> None:
    p = program(
        [tensor("x", [8, 8])],
        [
            reduce("m", "i", [8], "x[i, k]", "max", {"k": 8}),
            reduce("s", "i", [8], term, "sum", {"k": 8}),
            {**compute("y", "ij", [8, 8], out), "dtype": dtype},
        ],
        ["y"],
    )
    assert [s.keeps for s in analyze(p, keep_terms=True).stages] == [None, None, None]


def test_a_variance_that_is_an_output_is_stored_from_the_two_sums() -> None:
    stages = analyze(_variance("dev[i, k] * dev[i, k]", ("y", "var")), one_pass=True).stages
    assert [s.anchor.name for s in stages] == ["var_shifted", "var_squares", "y"]
    assert stages[1].buffer == "var" and stages[1].output
    assert [c.name for c in stages[1].epilogue] == ["var"]
