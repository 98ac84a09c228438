"""Canonical form and workload key: names never matter, semantics always do; the printer
round-trips through the parser."""

from __future__ import annotations

import copy

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tests.signatures import MATMUL_BIAS_RELU
from tunehub.compiler.canonical import canonical_form, to_text, workload_key
from tunehub.compiler.errors import SignatureError
from tunehub.compiler.parse import Scope, parse
from tunehub.compiler.program import load

# The same workload: every name changed, the source formatted differently.
RENAMED = {
    "name": "linear_relu_v2",
    "symbols": {"batch": {"min": 1, "max": 8192}},
    "inputs": [
        {"name": "x", "shape": ["batch", 1024], "dtype": "float16"},
        {"name": "weight", "shape": [1024, 4096], "dtype": "float16"},
        {"name": "b", "shape": [4096], "dtype": "float16"},
    ],
    "computes": [
        {
            "name": "partial",
            "axes": ["row", "col"],
            "shape": ["batch", 4096],
            "dtype": "float32",
            "reduce": {"op": "sum", "axes": {"red": 1024}},
            "expr": "(float32(x[row,red])*float32((weight[red,col])))",
        },
        {
            "name": "y",
            "axes": ["n", "m"],
            "shape": ["batch", 4096],
            "dtype": "float16",
            "expr": "float16(max(((partial[n, m]) + float32(b[m])), 0.))",
        },
    ],
    "outputs": ["y"],
}


def key(sig: dict) -> str:
    return workload_key(load(sig))


def test_canonical_form_replaces_names_by_position():
    assert canonical_form(load(MATMUL_BIAS_RELU)) == {
        "version": 1,
        "symbols": [[1, 8192]],
        "inputs": [
            {"shape": ["s0", 1024], "dtype": "float16"},
            {"shape": [1024, 4096], "dtype": "float16"},
            {"shape": [4096], "dtype": "float16"},
        ],
        "computes": [
            {
                "shape": ["s0", 4096],
                "dtype": "float32",
                "reduce": {"op": "sum", "extents": [1024]},
                "expr": "(float32(in0[a0, r0]) * float32(in1[r0, a1]))",
            },
            {
                "shape": ["s0", 4096],
                "dtype": "float16",
                "reduce": None,
                "expr": "float16(max((c0[a0, a1] + float32(in2[a1])), 0.0))",
            },
        ],
        "outputs": ["c1"],
    }


def test_key_is_a_sha256_hex_digest():
    digest = key(MATMUL_BIAS_RELU)
    assert len(digest) == 64
    assert int(digest, 16) >= 0


def test_renaming_and_reformatting_keep_the_key():
    assert key(RENAMED) == key(MATMUL_BIAS_RELU)


def changed(edit) -> dict:
    sig = copy.deepcopy(MATMUL_BIAS_RELU)
    edit(sig)
    return sig


SEMANTIC_CHANGES = {
    "constant": lambda s: s["computes"][1].update(
        expr="float16(max(acc[i, j] + float32(bias[j]), 0.5))"
    ),
    "literal dtype context": lambda s: s["computes"][1].update(
        expr="float16(max(acc[i, j] + float32(bias[j]), float16(0.0)))"
    ),
    "operand order": lambda s: s["computes"][0].update(expr="float32(B[k, j]) * float32(A[i, k])"),
    "read index": lambda s: s["computes"][1].update(
        expr="float16(max(acc[i, j] + float32(bias[4095 - j]), 0.0))"
    ),
    "shape": lambda s: (
        s["inputs"][2].update(shape=[4097]),
        s["computes"][1].update(expr="float16(max(acc[i, j] + float32(bias[j + 1]), 0.0))"),
    ),
    "input dtype": lambda s: s["inputs"][2].update(dtype="bfloat16"),
    "compute dtype": lambda s: s["computes"][0].update(dtype="float64"),
    "reduce op": lambda s: s["computes"][0]["reduce"].update(op="max"),
    "reduce extent": lambda s: (
        s["inputs"][0].update(shape=["M", 1023]),
        s["inputs"][1].update(shape=[1023, 4096]),
        s["computes"][0]["reduce"].update(axes={"k": 1023}),
    ),
    "symbol range": lambda s: s["symbols"]["M"].update(max=4096),
    "axis order": lambda s: s["computes"][1].update(axes=["j", "i"], shape=[4096, "M"]),
    "input order": lambda s: s["inputs"].reverse(),
    "outputs": lambda s: s.update(outputs=["acc", "out"]),
}


@pytest.mark.parametrize("edit", SEMANTIC_CHANGES.values(), ids=SEMANTIC_CHANGES.keys())
def test_semantic_changes_change_the_key(edit):
    assert key(changed(edit)) != key(MATMUL_BIAS_RELU)


def test_a_version_2_signature_shares_the_key_of_the_version_1_one_meaning_the_same():
    """Only a 16-bit float sum or product means something else in version 2 (its terms are
    not rounded): such a compute's key differs, every other keeps its version 1 key."""
    assert "terms" not in str(canonical_form(load(MATMUL_BIAS_RELU)))
    assert key({**MATMUL_BIAS_RELU, "version": 2}) == key(MATMUL_BIAS_RELU)
    half = changed(lambda s: s["computes"][0].update(dtype="float16", expr="A[i, k] * B[k, j]"))
    assert key({**half, "version": 2}) != key(half)
    form = canonical_form(load({**half, "version": 2}))
    assert form["computes"][0]["terms"] == "float32"


def test_task_name_is_not_part_of_the_key():
    assert key(changed(lambda s: s.update(name="other"))) == key(MATMUL_BIAS_RELU)


def test_to_text_renames_and_parenthesizes():
    scope = Scope("test", frozenset({"i", "j"}), {"T": ("float16", 2)})
    expr = parse("-T[i, j] * 2 ** -1 + -0.5 < 1e-05 or not True", scope)
    assert to_text(expr, {"T": "in0", "i": "a0"}) == (
        "(((((-in0[a0, j]) * pow(2, (-1))) + (-0.5)) < 1e-05) or (not True))"
    )


# -- round trip ------------------------------------------------------------------------------

SCOPE = Scope(
    context="test",
    variables=frozenset({"i", "j", "n"}),
    tensors={
        "H": ("float16", 2),
        "F": ("float32", 1),
        "D": ("float64", 1),
        "I": ("int32", 1),
        "U": ("uint32", 1),
        "Q": ("uint8", 1),
        "L": ("bool", 1),
    },
)

INT_LEAVES = st.sampled_from(["i", "j", "n", "0", "7", "255", "I[i]", "U[j]", "Q[n]"])
FLOAT_LEAVES = st.one_of(
    st.sampled_from(["0.5", ".25", "1e-5", "2.", "3E2", "F[i]", "D[j]", "H[i, j]"]),
    st.floats(min_value=0, max_value=1000, allow_nan=False).map(repr),
)
BOOL_LEAVES = st.sampled_from(["True", "False", "L[i]"])


@st.composite
def _level(draw, kids):
    """One more level of (int, float, bool) source texts built from the level below."""
    (i1, f1, b1), (i2, f2, b2) = draw(kids), draw(kids)

    def binary(a: str, ops: list[str], b: str) -> str:
        # Unparenthesized operands exercise precedence; the filter drops ill-typed results.
        text = f"{a} {draw(st.sampled_from(ops))} {b}"
        return f"({text})" if draw(st.booleans()) else text

    ints = [
        binary(i1, ["+", "-", "*", "//", "%", "&", "|", "^"], i2),
        binary(i1, ["<<", ">>"], draw(st.sampled_from(["1", "3"]))),
        f"{draw(st.sampled_from(['-', '+', '~']))}{i1}",
        f"{draw(st.sampled_from(['abs', 'floor', 'ceil']))}({i1})",
        f"{draw(st.sampled_from(['min', 'max']))}({i1}, {i2})",
        f"where({b1}, {i1}, {i2})",
        f"{draw(st.sampled_from(['int8', 'uint32', 'int64']))}({f1})",
        f"I[{i1}]",
    ]
    floats = [
        binary(f1, ["+", "-", "*", "/", "//", "%", "**"], f2),
        binary(i1, ["+", "-", "*", "/", "**"], f2),
        f"{draw(st.sampled_from(['-', '+']))}{f1}",
        f"{draw(st.sampled_from(['exp', 'log', 'sqrt', 'tanh', 'erf', 'sigmoid']))}({i1})",
        f"{draw(st.sampled_from(['rsqrt', 'abs', 'floor']))}({f1})",
        f"{draw(st.sampled_from(['min', 'max', 'pow']))}({f1}, {i2})",
        f"where({b1}, {f1}, {i2})",
        f"{draw(st.sampled_from(['float16', 'bfloat16', 'float64']))}({i1})",
        f"F[{i1}]",
        f"H[{i1}, {i2}]",
    ]
    bools = [
        binary(i1, ["<", "<=", ">", ">=", "==", "!="], f2),
        binary(b1, ["and", "or", "&", "|", "^", "=="], b2),
        f"{draw(st.sampled_from(['not ', '~']))}{b1}",
        f"bool({f1})",
        f"L[{i1}]",
    ]
    return tuple(draw(st.sampled_from(options)) for options in (ints, floats, bools))


EXPRESSIONS = st.recursive(
    st.tuples(INT_LEAVES, FLOAT_LEAVES, BOOL_LEAVES), _level, max_leaves=12
).flatmap(st.sampled_from)


def _parse_or_reject(text: str):
    try:
        return parse(text, SCOPE)
    except SignatureError:
        assume(False)
        raise


@settings(max_examples=400, deadline=None)
@given(EXPRESSIONS)
def test_to_text_round_trips_through_the_parser(text):
    expr = _parse_or_reject(text)
    printed = to_text(expr)
    assert parse(printed, SCOPE) == expr
    assert to_text(parse(printed, SCOPE)) == printed
