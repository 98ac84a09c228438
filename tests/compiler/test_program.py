"""Loading signatures into validated programs: the samples load, every invalid one is named."""

from __future__ import annotations

import copy
import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.compiler.c_ints import c_value
from tests.signatures import MATMUL_BIAS_RELU
from tunehub.compiler.errors import SignatureError
from tunehub.compiler.ir import (
    Binary,
    Cast,
    Compute,
    Const,
    Load,
    ReduceAxis,
    Symbol,
    Tensor,
    Var,
)
from tunehub.compiler.program import MAX_ELEMENTS, MAX_SYMBOL_VALUE, load
from tunehub.schemas.signature import TaskSignature

MATMUL = {
    "name": "matmul",
    "inputs": [
        {"name": "A", "shape": [64, 32], "dtype": "float32"},
        {"name": "B", "shape": [32, 16], "dtype": "float32"},
    ],
    "computes": [
        {
            "name": "C",
            "axes": ["i", "j"],
            "shape": [64, 16],
            "dtype": "float32",
            "reduce": {"op": "sum", "axes": {"k": 32}},
            "expr": "A[i, k] * B[k, j]",
        }
    ],
    "outputs": ["C"],
}

# int4 weights: W packs 8 nibbles per uint32 along K, one fp16 scale per 32 weights, zero 7.
INT4_DEQUANT_MATMUL = {
    "name": "int4_matmul",
    "symbols": {"M": {"min": 1, "max": 4096}},
    "inputs": [
        {"name": "X", "shape": ["M", 4096], "dtype": "float16"},
        {"name": "W", "shape": [1024, 512], "dtype": "uint32"},
        {"name": "scales", "shape": [1024, 128], "dtype": "float16"},
    ],
    "computes": [
        {
            "name": "w",
            "axes": ["j", "k"],
            "shape": [1024, 4096],
            "dtype": "float32",
            "expr": "(float32((W[j, k // 8] >> uint32(4 * (k % 8))) & 15) - 7.0)"
            " * float32(scales[j, k // 32])",
        },
        {
            "name": "out",
            "axes": ["i", "j"],
            "shape": ["M", 1024],
            "dtype": "float32",
            "reduce": {"op": "sum", "axes": {"k": 4096}},
            "expr": "float32(X[i, k]) * w[j, k]",
        },
    ],
    "outputs": ["out"],
}

# 3x3 convolution with zero padding 1: the out-of-bounds taps are guarded by where.
CONV2D_PAD = {
    "name": "conv2d",
    "inputs": [
        {"name": "I", "shape": [1, 3, 8, 8], "dtype": "float32"},
        {"name": "F", "shape": [4, 3, 3, 3], "dtype": "float32"},
    ],
    "computes": [
        {
            "name": "out",
            "axes": ["n", "f", "y", "x"],
            "shape": [1, 4, 8, 8],
            "dtype": "float32",
            "reduce": {"op": "sum", "axes": {"c": 3, "ry": 3, "rx": 3}},
            "expr": "where(y + ry >= 1 and y + ry <= 8 and x + rx >= 1 and x + rx <= 8, "
            "I[n, c, y + ry - 1, x + rx - 1], 0.0) * F[f, c, ry, rx]",
        }
    ],
    "outputs": ["out"],
}


def with_expr(expr: str, base: dict = MATMUL_BIAS_RELU, compute: int = 1) -> dict:
    sig = copy.deepcopy(base)
    sig["computes"][compute]["expr"] = expr
    return sig


def error(sig: dict | str) -> str:
    with pytest.raises(SignatureError) as info:
        load(sig)
    return str(info.value)


# -- samples ---------------------------------------------------------------------------------


def test_design_doc_example_loads():
    program = load(MATMUL_BIAS_RELU)
    assert program.name == "matmul_bias_relu"
    assert program.symbols == (Symbol("M", 1, 8192),)
    assert program.inputs[0] == Tensor("A", ("M", 1024), "float16")
    acc, out = program.computes
    assert acc.reduce_op == "sum"
    assert acc.reduce_axes == (ReduceAxis("k", 1024),)
    assert acc.body == Binary(
        "*",
        Cast("float32", Load("A", (Var("i"), Var("k")), "float16")),
        Cast("float32", Load("B", (Var("k"), Var("j")), "float16")),
        "float32",
    )
    assert out.body.dtype == "float16"
    assert program.outputs == ("out",)
    assert program.consumers("acc") == [out]


def test_matmul_loads():
    (c,) = load(MATMUL).computes
    assert c == Compute(
        "C",
        ("i", "j"),
        (64, 16),
        "float32",
        Binary(
            "*",
            Load("A", (Var("i"), Var("k")), "float32"),
            Load("B", (Var("k"), Var("j")), "float32"),
            "float32",
        ),
        "sum",
        (ReduceAxis("k", 32),),
    )


def test_int4_dequant_loads():
    w, out = load(INT4_DEQUANT_MATMUL).computes
    assert w.body.dtype == "float32"
    assert w.body.a.b == Const(7.0, "float32")
    assert out.body.b == Load("w", (Var("j"), Var("k")), "float32")


def test_padded_conv2d_loads():
    (out,) = load(CONV2D_PAD).computes
    assert [r.name for r in out.reduce_axes] == ["c", "ry", "rx"]


def test_model_json_and_dict_inputs_agree():
    model = TaskSignature.model_validate(MATMUL)
    assert load(model) == load(MATMUL) == load(json.dumps(MATMUL))


# -- document shape (pydantic) ---------------------------------------------------------------


def test_pydantic_errors_become_one_line_signature_errors():
    sig = copy.deepcopy(MATMUL)
    del sig["outputs"]
    message = error(sig)
    assert message.startswith("invalid signature: outputs: Field required")
    assert "\n" not in message


def test_bad_json_is_a_signature_error():
    assert error("{not json").startswith("invalid signature: ")


def test_symbol_ranges_are_checked():
    sig = copy.deepcopy(MATMUL_BIAS_RELU)
    sig["symbols"]["M"] = {"min": 8, "max": 2}
    assert "symbol range is empty" in error(sig)
    sig["symbols"]["M"] = {"min": 1, "max": MAX_SYMBOL_VALUE + 1}
    assert error(sig) == f"symbol 'M': max {MAX_SYMBOL_VALUE + 1} is over the limit of 2147483648"


# -- names -----------------------------------------------------------------------------------


def renamed(path: tuple, value) -> dict:
    sig = copy.deepcopy(MATMUL_BIAS_RELU)
    node = sig
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return sig


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (("inputs", 1, "name"), "A", "input 'A': the name 'A' is already used by input 'A'"),
        (("computes", 0, "name"), "bias", "compute 'bias': the name 'bias' is already used by"),
        (("computes", 1, "name"), "acc", "compute 'acc': the name 'acc' is already used by"),
        (("inputs", 0, "name"), "M", "input 'M': the name 'M' is already used by symbol 'M'"),
        (("computes", 0, "axes"), ["i", "i"], "compute 'acc' axis 'i': the name 'i' is already"),
        (("computes", 0, "axes"), ["i", "M"], "the name 'M' is already used by symbol 'M'"),
        (("computes", 0, "axes"), ["i", "B"], "the name 'B' is already used by input 'B'"),
        (
            ("computes", 0, "reduce"),
            {"op": "sum", "axes": {"j": 1024}},
            "compute 'acc' reduce axis 'j': the name 'j' is already used by compute 'acc' axis",
        ),
        (("inputs", 2, "name"), "exp", "input 'exp': the name 'exp' is reserved"),
        (("computes", 0, "axes"), ["i", "float16"], "the name 'float16' is reserved"),
        (("computes", 0, "axes"), ["and", "j"], "the name 'and' is reserved"),
        (("computes", 0, "axes"), ["i", "j k"], "axis 'j k': the name 'j k' is not an identifier"),
        (("symbols",), {"": {"min": 1, "max": 2}}, "symbol '': the name '' is not an identifier"),
    ],
)
def test_duplicate_and_reserved_names(path, value, message):
    assert message in error(renamed(path, value))


# -- shapes and sizes ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (("inputs", 0, "shape"), ["N", 1024], "input 'A' shape[0]: 'N' is not a declared symbol"),
        (("inputs", 1, "shape"), [1024, 0], "input 'B' shape[1]: extent must be positive, got 0"),
        (("computes", 1, "shape"), ["M", -4], "compute 'out' shape[1]: extent must be positive"),
        (
            ("computes", 0, "reduce"),
            {"op": "sum", "axes": {"k": "K"}},
            "compute 'acc' reduce axis 'k': 'K' is not a declared symbol",
        ),
        (
            ("computes", 0, "reduce"),
            {"op": "sum", "axes": {"k": 0}},
            "compute 'acc' reduce axis 'k': extent must be positive, got 0",
        ),
    ],
)
def test_bad_extents(path, value, message):
    assert message in error(renamed(path, value))


def test_buffer_over_the_element_limit():
    sig = copy.deepcopy(MATMUL_BIAS_RELU)
    sig["symbols"]["M"]["max"] = 2**21
    sig["inputs"][0]["shape"] = ["M", 2048]
    assert error(sig) == (
        f"'A' has {2**32} elements at the symbol maxima, over the limit of {MAX_ELEMENTS}"
    )


def test_buffers_over_the_total_size_limit():
    sig = copy.deepcopy(MATMUL_BIAS_RELU)
    sig["symbols"]["M"]["max"] = 2**19
    sig["computes"][0]["dtype"] = "float64"  # 2**31 elements: at the element limit, 16 GiB
    assert re.fullmatch(
        r"all buffers together take [0-9.]+ GiB at the symbol maxima, over the limit of 16 GiB",
        error(sig),
    )


# -- expressions -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("Z[i, j]", "compute 'out': unknown tensor 'Z' at column 1"),
        ("out[i, j]", "compute 'out': compute 'out' reads itself at column 1"),
        ("acc[i]", "compute 'out': 'acc' has rank 2 but is read with 1 index at column 1"),
        ("acc[i, j] + q", "compute 'out': unknown name 'q' at column 13"),
        (
            "acc[i, k]",
            "compute 'out': 'k' is a reduce axis of compute 'acc', not here at column 8",
        ),
        ("bias[j * 0.5]", "compute 'out': index 0 of 'bias' must be an integer, got float32"),
        ("acc[i, j] / 2 / 0 < 1 < 2", "compute 'out': comparison chains are not allowed"),
    ],
)
def test_expression_errors_name_the_compute(expr, message):
    assert message in error(with_expr(expr))


def test_reading_a_later_compute():
    message = error(with_expr("float32(out[i, j])", compute=0))
    assert message == "compute 'acc': compute 'out' is read before it is defined at column 9"


def test_bool_sum_is_rejected():
    sig = copy.deepcopy(MATMUL)
    sig["computes"][0]["dtype"] = "bool"
    assert error(sig) == "compute 'C': reduce 'sum' on a bool compute"


# -- bounds ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "expr",
    [
        "acc[M - 1 - i, 4095 - j]",
        "acc[i // 2, j]",
        "acc[i, j % 7]",
        "acc[i, j % 4097]",
        "acc[min(i + 1, M - 1), max(j - 1, 0)]",
        "acc[i, abs(j - 4095)]",
        "acc[i, j & 4095]",
        "acc[i, (j >> 2) << 2]",
        "acc[i, j // 4 * 4 + 3]",
        "acc[i, int32(j)]",
        "acc[i, where(j < 10, j, 0)]",
        "acc[i, uint8(bias[0] < 0.0) * 7]",
        "where(i >= 1, acc[i - 1, j], 0.0)",
        "where(i + 1 < M, acc[i + 1, j], acc[i, j])",
        "where(j < 4095, acc[i, bias_index[j]], 0.0)",
    ],
)
def test_provably_in_bounds_or_guarded_reads_load(expr):
    sig = with_expr(expr)
    sig["inputs"].append({"name": "bias_index", "shape": [4096], "dtype": "int32"})
    sig["computes"].insert(
        1,
        {
            "name": "unused_guard",
            "axes": ["i"],
            "shape": [1],
            "dtype": "bool",
            "expr": "True",
        },
    )
    sig["outputs"].append("unused_guard")
    load(sig)


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("acc[i + 1, j]", "compute 'out': index 0 of 'acc' ((i + 1)) can reach M or more"),
        ("acc[i - 1, j]", "compute 'out': index 0 of 'acc' ((i - 1)) can be negative"),
        ("acc[i, j + M]", "index 1 of 'acc' ((j + M)) can reach 4096 or more"),
        ("acc[i * 2, j]", "index 0 of 'acc' ((i * 2)) can reach M or more"),
        ("acc[M, j]", "index 0 of 'acc' (M) is always outside [0, M)"),
        ("acc[i, 4096]", "index 1 of 'acc' (4096) is always outside [0, 4096)"),
        ("acc[i, (j + 1) % 4097]", "can reach 4096 or more"),
        ("acc[i, int64(bias[j])]", "index 1 of 'acc' (int64(bias[j])) can be negative"),
        ("acc[i, int8(j)]", "index 1 of 'acc' (int8(j)) can be negative"),
        ("acc[i, -j]", "can be negative"),
        ("acc[i, j | 4096]", "can reach 4096 or more"),
        ("acc[i % 4, j]", "can reach M or more"),
        ("where(i > 0, acc[i - 1, j + 4096], 0.0)", "index 1 of 'acc' ((j + 4096)) is always"),
        ("where(acc[i + 1, j] > 0.0, acc[i, j], 0.0)", "index 0 of 'acc' ((i + 1)) can reach M"),
    ],
)
def test_unprovable_reads_outside_where_are_errors(expr, message):
    assert message in error(with_expr(expr))


def test_unsigned_wraparound_is_not_trusted():
    sig = copy.deepcopy(INT4_DEQUANT_MATMUL)
    sig["computes"][0]["expr"] = "float32(W[j, uint32(k // 8) - 1])"
    assert "can reach 512 or more" in error(sig)


# -- outputs ---------------------------------------------------------------------------------


def test_outputs_must_be_computes():
    message = "output 'A' must name a compute, but it is an input"
    assert error(renamed(("outputs",), ["A"])) == message
    assert error(renamed(("outputs",), ["nope"])) == (
        "output 'nope' must name a compute, but it is unknown"
    )
    assert error(renamed(("outputs",), ["out", "out"])) == "output 'out' is listed twice"


def test_unused_compute():
    sig = copy.deepcopy(MATMUL_BIAS_RELU)
    sig["computes"][1]["expr"] = "float16(bias[j])"
    assert error(sig) == "compute 'acc' is never used"


def test_intermediate_outputs_are_allowed():
    assert load(renamed(("outputs",), ["acc", "out"])).outputs == ("acc", "out")


# -- soundness of the bounds proof, checked by brute force -----------------------------------


@st.composite
def _index(draw, depth: int = 0) -> str:
    if depth >= 3 or draw(st.integers(0, 2)) == 0:
        return draw(st.sampled_from(["i", "j", "M", "N", "0", "1", "3", "7"]))
    a, b = draw(_index(depth + 1)), draw(_index(depth + 1))
    return draw(
        st.sampled_from(
            [
                f"({a} {draw(st.sampled_from(['+', '-', '*', '//', '%', '&', '|', '^']))} {b})",
                f"({a} {draw(st.sampled_from(['<<', '>>']))} {draw(st.sampled_from('0123'))})",
                f"(-{a})",
                f"{draw(st.sampled_from(['abs', 'int8', 'uint8']))}({a})",
                f"{draw(st.sampled_from(['min', 'max']))}({a}, {b})",
                f"where(i < j, {a}, {b})",
            ]
        )
    )


@settings(max_examples=300, deadline=None)
@given(_index(), st.sampled_from(["M", "N", 5]))
def test_accepted_reads_are_in_bounds_for_every_symbol_value(index, extent):
    sig = {
        "name": "bounds",
        "symbols": {"M": {"min": 1, "max": 6}, "N": {"min": 2, "max": 5}},
        "inputs": [{"name": "T", "shape": [extent], "dtype": "float32"}],
        "computes": [
            {
                "name": "out",
                "axes": ["i", "j"],
                "shape": ["M", 4],
                "dtype": "float32",
                "expr": f"T[{index}]",
            }
        ],
        "outputs": ["out"],
    }
    try:
        program = load(sig)
    except SignatureError as exc:
        assert str(exc).startswith("compute 'out': ")
        return
    (read,) = program.computes[0].body.indices
    for m in range(1, 7):
        for n in range(2, 6):
            size = {"M": m, "N": n}.get(extent, extent)
            for i in range(m):
                for j in range(4):
                    try:
                        value = c_value(read, {"i": i, "j": j, "M": m, "N": n})
                    except ZeroDivisionError:  # undefined, like in C: not a bounds question
                        continue
                    assert 0 <= value < size, (index, m, n, i, j, value)
