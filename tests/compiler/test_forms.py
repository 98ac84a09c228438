"""Equivalent forms of one computation land on the same schedule template, whatever the
user wrote: operand layouts (NN, NT, TN, TT), batch axes of extent 1 anywhere, casts and
epilogues split over several computes, the MLC-LLM five-block int4 linear beside the inline
one (with its float16 products summed unrounded, and rounded), and NCHW beside NHWC
convolutions. Each form's default and a seeded sample of its space
are built and checked against the reference evaluator."""

from __future__ import annotations

import random
from typing import Any

import pytest

from tests.compiler.cbuild import HOST, check_configs
from tunehub.compiler.analysis import CONTRACTION, analyze
from tunehub.compiler.ir import Program
from tunehub.compiler.program import load
from tunehub.compiler.schedule.plan import plan
from tunehub.compiler.space import space_for

M, N, K = 9, 40, 24  # rows, columns, reduce of the tests: none a multiple of a vector width


def tensor(name: str, shape: list[Any], dtype: str = "float32") -> dict[str, Any]:
    return {"name": name, "shape": shape, "dtype": dtype}


def matmul_forms(m: int, n: int, k: int) -> dict[str, dict[str, Any]]:
    """C = A @ B (m x k times k x n) in every operand layout, and with axes of extent 1."""

    def form(a: list[Any], b: list[Any], axes: list[str], shape: list[Any], expr: str) -> Any:
        return {
            "name": "form",
            "inputs": [tensor("A", a), tensor("B", b)],
            "computes": [
                {
                    "name": "C",
                    "axes": axes,
                    "shape": shape,
                    "dtype": "float32",
                    "reduce": {"op": "sum", "axes": {"k": k}},
                    "expr": expr,
                }
            ],
            "outputs": ["C"],
        }

    return {
        "nn": form([m, k], [k, n], ["i", "j"], [m, n], "A[i, k] * B[k, j]"),
        "nt": form([m, k], [n, k], ["i", "j"], [m, n], "A[i, k] * B[j, k]"),
        "tn": form([k, m], [k, n], ["i", "j"], [m, n], "A[k, i] * B[k, j]"),
        "tt": form([k, m], [n, k], ["i", "j"], [m, n], "A[k, i] * B[j, k]"),
        "unit_batch_first": form(
            [1, m, k], [k, n], ["b", "i", "j"], [1, m, n], "A[b, i, k] * B[k, j]"
        ),
        "unit_batch_middle": form(
            [m, 1, k], [k, n], ["i", "b", "j"], [m, 1, n], "A[i, b, k] * B[k, j]"
        ),
        "unit_row_and_col_axes": form(
            [m, 1, k], [1, k, n], ["i", "u", "v", "j"], [m, 1, 1, n], "A[i, u, k] * B[v, k, j]"
        ),
    }


def epilogue_forms(m: int, n: int, k: int) -> dict[str, dict[str, Any]]:
    """A matmul + bias + relu + float16 cast written in one compute and in four."""
    inputs = [tensor("A", [m, k]), tensor("B", [k, n]), tensor("bias", [n])]
    acc = {
        "name": "acc",
        "axes": ["i", "j"],
        "shape": [m, n],
        "dtype": "float32",
        "reduce": {"op": "sum", "axes": {"k": k}},
        "expr": "A[i, k] * B[k, j]",
    }

    def step(name: str, dtype: str, expr: str) -> dict[str, Any]:
        return {"name": name, "axes": ["i", "j"], "shape": [m, n], "dtype": dtype, "expr": expr}

    one = step("out", "float16", "float16(max(acc[i, j] + bias[j], 0.0))")
    four = [
        step("biased", "float32", "acc[i, j] + bias[j]"),
        step("relu", "float32", "max(biased[i, j], 0.0)"),
        step("out", "float16", "float16(relu[i, j])"),
    ]
    base = {"name": "epilogue", "inputs": inputs, "outputs": ["out"]}
    return {
        "epilogue_in_one": {**base, "computes": [acc, one]},
        "epilogue_in_four": {**base, "computes": [acc, *four]},
    }


def int4_forms(n: int, k: int) -> dict[str, dict[str, Any]]:
    """An int4 weight-only linear (8 nibbles per uint32, group 32, zero point 7, float16
    scales) written inline, and in MLC-LLM's five blocks as the TIR frontend reads them
    (signature version 2): unpack to float16, dequantize, an NT matmul over a unit batch axis
    summing float16 products, two adds."""
    inline = _int4_inline(
        "int4_inline",
        n,
        k,
        "float32(X[b, m, r]) * (float32(int32((W[j, r // 8] >> (4 * (r % 8))) & 15) - 7)"
        " * float32(S[j, r // 32]))",
        "float16(acc[b, m, j] + float32(bias[j]) + float32(R[b, m, j]))",
    )
    return {"int4_inline": inline, "int4_mlc": {"version": 2, **_int4_mlc(n, k)}}


def int4_rounded_forms(n: int, k: int) -> dict[str, dict[str, Any]]:
    """The int4 linear whose every product rounds to float16 before it is summed: MLC-LLM's
    five blocks as a version 1 signature reads them, and one sum with the rounding written
    as a cast, its dequantize rounded as the blocks round it."""
    dequantize = "float16((float16((W[j, r // 8] >> uint32(r % 8 * 4)) & uint32(15)) - float16(7))"
    inline = _int4_inline(
        "int4_inline_rounded",
        n,
        k,
        f"float16(X[b, m, r] * {dequantize} * S[j, r // 32]))",
        "float16(float16(acc[b, m, j]) + bias[j]) + R[b, m, j]",
    )
    return {"int4_inline_rounded": inline, "int4_mlc_v1": {"version": 1, **_int4_mlc(n, k)}}


def _int4_inline(name: str, n: int, k: int, term: str, out: str) -> dict[str, Any]:
    """The linear as a float32 sum of `term` over r, then `out` (bias and residual added)."""
    rows: dict[str, Any] = {"axes": ["b", "m", "j"], "shape": [1, "seq", n]}
    return {
        "name": name,
        "symbols": INT4_SYMBOLS,
        "inputs": _int4_inputs(n, k),
        "computes": [
            {
                "name": "acc",
                **rows,
                "dtype": "float32",
                "reduce": {"op": "sum", "axes": {"r": k}},
                "expr": term,
            },
            {"name": "out", **rows, "dtype": "float16", "expr": out},
        ],
        "outputs": ["out"],
    }


INT4_SYMBOLS = {"seq": {"min": 1, "max": 64}}


def _int4_inputs(n: int, k: int) -> list[dict[str, Any]]:
    return [
        tensor("W", [n, k // 8], "uint32"),
        tensor("S", [n, k // 32], "float16"),
        tensor("X", [1, "seq", k], "float16"),
        tensor("bias", [n], "float16"),
        tensor("R", [1, "seq", n], "float16"),
    ]


def _int4_mlc(n: int, k: int) -> dict[str, Any]:
    def block(name: str, axes: list[str], shape: list[Any], expr: str) -> dict[str, Any]:
        return {"name": name, "axes": axes, "shape": shape, "dtype": "float16", "expr": expr}

    return {
        "name": "int4_mlc",
        "symbols": INT4_SYMBOLS,
        "inputs": _int4_inputs(n, k),
        "computes": [
            block(
                "compute",
                ["a", "c"],
                [n, k],
                "float16((W[a, c // 8] >> uint32(c % 8 * 4)) & uint32(15))",
            ),
            block(
                "dequantize",
                ["a", "c"],
                [n, k],
                "(compute[a, c] - float16(7)) * S[a, c // 32]",
            ),
            {
                **block(
                    "NT_matmul", ["b", "m", "j"], [1, "seq", n], "X[b, m, r] * dequantize[j, r]"
                ),
                "reduce": {"op": "sum", "axes": {"r": k}},
            },
            block("T_add", ["b", "m", "j"], [1, "seq", n], "NT_matmul[b, m, j] + bias[j]"),
            block("T_add_1", ["b", "m", "j"], [1, "seq", n], "T_add[b, m, j] + R[b, m, j]"),
        ],
        "outputs": ["T_add_1"],
    }


def conv_forms(c: int, f: int, hw: int) -> dict[str, dict[str, Any]]:
    """A 3x3 convolution with padding 1, in NCHW and in NHWC."""
    guard = f"y + ry >= 1 and y + ry <= {hw} and x + rx >= 1 and x + rx <= {hw}"

    def conv(name: str, data: list[int], out: list[int], axes: list[str], read: str) -> Any:
        return {
            "name": name,
            "inputs": [tensor("data", data), tensor("weight", [f, c, 3, 3])],
            "computes": [
                {
                    "name": "out",
                    "axes": axes,
                    "shape": out,
                    "dtype": "float32",
                    "reduce": {"op": "sum", "axes": {"c": c, "ry": 3, "rx": 3}},
                    "expr": f"where({guard}, {read}, 0.0) * weight[f, c, ry, rx]",
                }
            ],
            "outputs": ["out"],
        }

    return {
        "conv_nchw": conv(
            "nchw",
            [1, c, hw, hw],
            [1, f, hw, hw],
            ["n", "f", "y", "x"],
            "data[n, c, y + ry - 1, x + rx - 1]",
        ),
        "conv_nhwc": conv(
            "nhwc",
            [1, hw, hw, c],
            [1, hw, hw, f],
            ["n", "y", "x", "f"],
            "data[n, y + ry - 1, x + rx - 1, c]",
        ),
    }


FAMILIES: dict[str, dict[str, dict[str, Any]]] = {
    "matmul": matmul_forms(M, N, K),
    "epilogue": epilogue_forms(M, N, K),
    "int4": int4_forms(24, 64),
    "int4_rounded": int4_rounded_forms(24, 64),
    "conv": conv_forms(8, 12, 7),
}
FORMS = [(family, name) for family, forms in FAMILIES.items() for name in forms]
SYMBOLS = {"int4": {"seq": 5}, "int4_rounded": {"seq": 5}}


def program_of(family: str, name: str) -> Program:
    return load({"version": 1, **FAMILIES[family][name]})


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_form_of_a_family_gets_the_packed_template(family: str) -> None:
    """One contraction stage per form, planned (no fallback), its epilogue fused, and the
    same knobs as every other form of the family."""
    knob_sets = set()
    for name in FAMILIES[family]:
        program = program_of(family, name)
        stages = analyze(program).stages
        assert [s.kind for s in stages] == [CONTRACTION], name
        assert plan(stages[0]) is not None, name
        knob_sets.add(tuple(sorted(space_for(program, HOST).knobs)))
    assert len(knob_sets) == 1


def test_unit_axes_are_fixed_not_grouped() -> None:
    for name in ("unit_batch_first", "unit_batch_middle", "unit_row_and_col_axes"):
        found = plan(analyze(program_of("matmul", name)).stages[0])
        assert found is not None and found.lhs_axes == ("i",) and found.rhs_axes == ("j",)
        assert set(found.unit_axes) <= {"b", "u", "v"} and found.unit_axes, name


def test_a_float16_sum_rounds_its_terms_in_version_1_only() -> None:
    """Version 2 adds the products of a float16 sum unrounded (the plan of the inline float32
    sum); version 1 rounds each, as does a cast written around the product."""
    for family, name, term in [
        ("int4", "int4_mlc", None),
        ("int4", "int4_inline", None),
        ("int4_rounded", "int4_mlc_v1", "float16"),
        ("int4_rounded", "int4_inline_rounded", "float16"),
    ]:
        found = plan(analyze(program_of(family, name)).stages[0])
        assert found is not None and found.term == term and found.unit_axes == ("b",), name


@pytest.mark.parametrize(("family", "name"), FORMS)
def test_each_form_computes_its_reference(family: str, name: str) -> None:
    program = program_of(family, name)
    space = space_for(program, HOST)
    rng = random.Random(f"{family}/{name}")
    configs = [space.default(), space.sample(rng)]
    check_configs(program, HOST, configs, SYMBOLS.get(family, {}))
