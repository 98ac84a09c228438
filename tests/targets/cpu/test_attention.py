"""The flash-attention template: attention chains (the eager form's four stages, as
`frontends.attention` writes them, or as a signature spells them) found whatever their
batch and head axes, mask and views, and computed in one pass over key blocks with an online
softmax that agrees with the reference evaluator: causal, boolean and additive masks,
grouped key/value heads, L != S, ragged query and key blocks, symbolic lengths."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest

from tests import signatures
from tests.compiler.cbuild import HOST, check_configs
from tunehub.compiler.attention import ATTENTION, pattern
from tunehub.compiler.explain import explain
from tunehub.compiler.flops import contraction_flops
from tunehub.compiler.ir import Program
from tunehub.compiler.lower import lower_function
from tunehub.compiler.program import load
from tunehub.compiler.space import space_for
from tunehub.compiler.space.space import Config


def attention(**shape: Any) -> Program:
    return load(signatures.attention(**shape))


def fused(program: Program, fit: bool = False, **knobs: Any) -> Config:
    """The default config (the chain fused) with chain knobs `knobs`; with `fit`, its query
    rows `qb` halved until the host's registers hold its tile (AVX2 has half AVX-512's)."""
    space = space_for(program, HOST)
    config = {**space.default(), **{f"a0.{k}": v for k, v in knobs.items()}}
    while fit and int(config["a0.qb"]) > 1 and space.check(config):
        config["a0.qb"] = int(config["a0.qb"]) // 2
    assert space.check(config) is None, space.check(config)
    return config


CASES = {
    "causal": dict(causal=True),
    "bool mask": dict(mask="bool"),
    "float mask": dict(mask="float32"),
    "grouped heads": dict(heads=4, kv_heads=2, mask="bool"),
    "L != S, no batch": dict(batch=(), queries=37, keys=45, depth=12, width=20),
    "two batch axes": dict(batch=(2, 1), heads=2, kv_heads=1, causal=True),
    "symbolic lengths": dict(queries="L", keys="S", causal=True),
    "views of one projection": dict(queries=19, keys=19, packed=True, causal=True),
    "float64": dict(dtype="float64", mask="float64", causal=True),
}


@pytest.mark.parametrize("case", CASES)
def test_the_one_pass_kernel_is_the_reference(case: str) -> None:
    program = attention(**CASES[case])  # type: ignore[arg-type]
    space = space_for(program, HOST)
    assert [c.kind for c in space.chains] == [ATTENTION]
    assert space.default()["a0.fuse"] is True
    lanes = space.knobs["a0.vec"][0]
    configs = [
        space.default(),
        fused(program, qb=1, kb=16, unroll=2, parallel=0),  # ragged key blocks
        fused(program, True, qb=8, kb=16, unroll=4, vec=lanes),  # rows past the blocks too
        fused(program, qb=2, kb=32, chunk=32, parallel=1),  # query chunks
    ]
    symbols = {"L": 37, "S": 29} if case == "symbolic lengths" else {}
    check_configs(program, HOST, configs, symbols)


def test_a_fused_chain_keeps_no_scores_buffer() -> None:
    program = attention(queries=37, keys=45, mask="bool")
    space = space_for(program, HOST)
    default = space.default()
    # Per thread: a key block's pack, a block's scores, each row's max and sum.
    kept = lower_function(program, HOST, default).workspaces
    assert all(w.per_thread for w in kept)
    assert sorted(math.prod(w.shape) for w in kept) == [37, 37, 4 * 64, 8 * 64]
    # Unfused, the scores and the softmax's max and sum are workspaces, as before.
    unfused = space.canonical({**default, "a0.fuse": False})
    assert space.check(unfused) is None
    assert [w.shape for w in lower_function(program, HOST, unfused).workspaces] == [
        (1, 4, 37, 45), (1, 4, 37), (1, 4, 37)]  # fmt: skip


def test_a_fused_chain_fixes_its_stages_knobs_and_an_unfused_one_its_own() -> None:
    program = attention(mask="float32")
    space = space_for(program, HOST)
    default = space.default()
    tiled = {**default, "s1.vec": space.knobs["s1.vec"][-1]}  # the max, vectorized
    assert "its stages' knobs keep their naive values" in (space.check(tiled) or "")
    assert space.canonical(tiled) == default
    unfused = {**default, "a0.fuse": False}
    assert "not fused" in (space.check(unfused) or "")
    rng = random.Random(0)
    drawn = [space.sample(rng) for _ in range(40)]
    assert all(space.check(c) is None for c in drawn)
    assert {c["a0.fuse"] for c in drawn} == {False, True}
    assert all(space.check(c) is None for c in space.seeds())
    assert space.seeds()[0] == default


def test_what_is_not_an_attention_chain() -> None:
    """16-bit attention rounds its scores and weights, which one pass would not; a softmax's
    max that is an output must be stored anyway."""
    assert space_for(attention(dtype="float16"), HOST).chains == ()
    full = attention()
    with_max = Program(full.name, full.symbols, full.inputs, full.computes, ("m", "o"))
    assert space_for(with_max, HOST).chains == ()


@pytest.mark.parametrize("packed", [False, True])
def test_attention_counts_its_matmuls_and_its_softmax(packed: bool) -> None:
    """Two FLOPs per term of each matmul and five per score, whether the scores are a
    contraction (q and k apart) or a reduction by class (views of one tensor)."""
    heads, length, depth = 4, 19, 8
    program = attention(heads=heads, queries=length, keys=length, packed=packed)
    scores = heads * length * length
    assert contraction_flops(program, {}) == 2 * scores * depth * 2 + 5 * scores


def test_a_causal_chain_skips_the_blocks_before_its_keys() -> None:
    """Only a logit that is the scores under constants, masked by `key <= query`, may skip
    keys: another mask could leave a row nothing but masked keys, whose weights are then
    uniform over every key."""
    found = [
        pattern(space_for(attention(**shape), HOST).chains[0].members)
        for shape in (dict(causal=True), dict(causal=True, mask="bool"), dict(mask="float32"))
    ]
    assert [p is not None and p.causal for p in found] == [True, False, False]
    program = attention(queries=70, keys=70, causal=True)
    configs = [fused(program, qb=qb, kb=16, chunk=chunk) for qb in (1, 4) for chunk in (0, 32)]
    check_configs(program, HOST, configs, {})


def test_explain_says_what_the_chain_and_its_knobs_are() -> None:
    found = explain(attention(mask="bool"), HOST)
    assert "a0: stages 0..3 are attention, one pass over the keys" in found.groups
    meanings = {k.name: k.meaning for k in found.knobs if k.name.startswith("a0.")}
    assert set(meanings) == {
        f"a0.{k}" for k in ("fuse", "qb", "kb", "vec", "unroll", "chunk", "parallel")
    }
    assert all(meanings.values())
