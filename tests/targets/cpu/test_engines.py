"""The dot-product engine template (`targets.cpu.schedule.engine`): a contraction of bfloat16
or 8-bit sides gets a `dot` mode where the target names the instruction, and none where it
does not; its kernels compile with each engine ISA's flags on every x86-64 host, and run and
agree with the reference where this host has the instructions (skipped, with the reason,
elsewhere). Small odd shapes: partial tiles at both edges, k blocks, both row layouts."""

from __future__ import annotations

import copy
import platform
from typing import Any

import pytest

from tests.compiler.cbuild import check_configs, compile_for
from tests.compiler.test_forms import matmul_forms
from tunehub.compiler import features
from tunehub.compiler.ir import Program
from tunehub.compiler.lower import lower
from tunehub.compiler.program import load
from tunehub.compiler.space import space_for
from tunehub.schemas.target import Target
from tunehub.targets.cpu.runtime import allow_tiles
from tunehub.worker.device import can_run, cpu_isa

pytestmark = pytest.mark.skipif(
    platform.machine() not in ("x86_64", "AMD64"), reason="x86-64 flags need an x86-64 gcc"
)

BF16 = "x86_64-avx512+avx512_bf16"
VNNI = "x86_64-avx512+avx512_vnni"
AVX_VNNI = "x86_64-avx2+avx_vnni"
AMX = "x86_64-avx512+amx_tile+amx_bf16+amx_int8"
# (row dtype, column dtype, accumulator) -> the engine ISAs that compute it
SIDES: dict[tuple[str, str, str], tuple[str, ...]] = {
    ("bfloat16", "bfloat16", "float32"): (BF16, AMX),
    ("int8", "int8", "int32"): (VNNI, AVX_VNNI, AMX),
    ("uint8", "int8", "int32"): (VNNI, AVX_VNNI, AMX),
}
INTRINSICS = ("_mm512_dpbf16_ps", "_dpbusd_", "_tile_dpbf16ps", "_tile_dpbssd", "_tile_dpbusd")
CASES = [(sides, isa) for sides, isas in SIDES.items() for isa in isas]


def matmul(a: str, b: str, acc: str, m: int = 37, n: int = 45, k: int = 192) -> Program:
    document: dict[str, Any] = copy.deepcopy(matmul_forms(m, n, k)["nn"])
    document["inputs"][0]["dtype"], document["inputs"][1]["dtype"] = a, b
    document["computes"][0]["expr"] = f"{acc}(A[i, k]) * {acc}(B[k, j])"
    document["computes"][0]["dtype"] = acc
    return load(document)


def configs(program: Program, target: Target) -> list[dict[str, Any]]:
    """The dot template's seeds, the default with k blocks and interleaved row words, and
    with each row layout where it is valid (in place: not with the offset)."""
    space = space_for(program, target)
    found = [c for c in space.seeds({}) if c["s0.mode"] == "dot"]
    variants = [
        {"s0.dot_kc": 64, "s0.dot_pack_rows": "interleaved", "s0.dot_unroll": 2},
        {"s0.dot_kc": 64},
        {"s0.dot_pack_rows": "rows"},
        {"s0.dot_pack_rows": "none"},
        {"s0.dot_unroll": 2},
    ]
    for variant in variants:
        config = {**found[0], **variant}
        if config not in found and space.check(config) is None:
            found.append(config)
    return found


@pytest.mark.parametrize(("sides", "isa"), CASES)
def test_dot_kernels_compile_with_their_isas_flags(sides: tuple[str, str, str], isa: str) -> None:
    target = Target(kind="cpu", isa=isa)
    program = matmul(*sides)
    for config in configs(program, target)[:3]:  # the run test runs every one
        source = lower(program, target, config).source
        assert any(intrinsic in source for intrinsic in INTRINSICS)
        assert compile_for(lower(program, target, config), isa).exists()


@pytest.mark.parametrize(("sides", "isa"), CASES)
def test_dot_kernels_agree_with_the_reference(sides: tuple[str, str, str], isa: str) -> None:
    if not can_run(isa):
        pytest.skip(f"this host ({cpu_isa()}) has no {', '.join(isa.split('+')[1:])}")
    target = Target(kind="cpu", isa=isa)
    program = matmul(*sides)
    check_configs(program, target, configs(program, target), {})


def test_the_dot_mode_is_offered_only_with_the_instruction() -> None:
    program = matmul("bfloat16", "bfloat16", "float32")
    assert "dot" in space_for(program, Target(kind="cpu", isa=BF16)).knobs["s0.mode"]
    plain = space_for(program, Target(kind="cpu", isa="x86_64-avx512"))
    assert "s0.mode" not in plain.knobs and "s0.dot_mr" not in plain.knobs
    # VNNI does not take bfloat16, nor a k the words do not divide.
    assert "s0.mode" not in space_for(program, Target(kind="cpu", isa=VNNI)).knobs
    odd = matmul("int8", "int8", "int32", k=30)
    assert "s0.mode" not in space_for(odd, Target(kind="cpu", isa=VNNI)).knobs
    # Signed rows are offset while packed: never read in place.
    signed = space_for(matmul("int8", "int8", "int32"), Target(kind="cpu", isa=VNNI))
    reason = signed.check({**signed.default(), "s0.dot_pack_rows": "none"})
    assert reason is not None and "in place" in reason


def test_a_dot_tile_counts_as_the_fmas_it_does_in_the_features() -> None:
    """A cost model keyed by the engine's target sees the engine's work: each vdpbf16ps of
    an 8 x 2 tile is two FMAs a lane, and its two column registers are loads."""
    target = Target(kind="cpu", isa=BF16)
    program = matmul("bfloat16", "bfloat16", "float32", 64, 64, 64)
    config = {**space_for(program, target).default(), "s0.dot_mr": 8, "s0.dot_nv": 2}
    found = features.extract(program, target, config)
    assert found["kernel_vector_fmas"] == 8 * 2 * 2 and found["kernel_vector_loads"] == 2


def test_amx_tiles_take_the_place_of_the_dot_instructions_where_the_target_has_them() -> None:
    """AMX's knobs are tile shapes (1 or 2 tiles of 16 each way), k blocks of whole tile
    steps (64 int8 values), rows packed as rows; signed int8 multiplies as it is (tdpbssd:
    no offset); asking Linux for the tile state is harmless where there is none."""
    target = Target(kind="cpu", isa=AMX)
    space = space_for(matmul("int8", "int8", "int32"), target)
    assert space.knobs["s0.dot_mr"] == (16, 32)
    assert all(kc % 64 == 0 for kc in space.knobs["s0.dot_kc"]) and 64 in space.knobs["s0.dot_kc"]
    source = lower(matmul("int8", "int8", "int32"), target, space.default()).source
    assert "_tile_dpbssd" in source and "0x80808080" not in source
    assert isinstance(allow_tiles(), bool)


def int4_linear(rounded: bool, m: int = 37, n: int = 45, k: int = 192) -> Program:
    """An int4 weight-only linear with bfloat16 activations, its weights dequantized in
    float32 or, `rounded`, rounded to bfloat16 as a bfloat16 model's dequantize does."""
    weight = "float32(int32((W[j, r // 8] >> (4 * (r % 8))) & 15) - 8) * float32(S[j, r // 32])"
    if rounded:
        weight = f"float32(bfloat16({weight}))"
    inputs = [
        ("X", [m, k], "bfloat16"),
        ("W", [n, k // 8], "uint32"),
        ("S", [n, k // 32], "bfloat16"),
    ]
    rows = {"axes": ["i", "j"], "shape": [m, n]}
    return load(
        {
            "name": "int4_linear",
            "inputs": [{"name": a, "shape": s, "dtype": d} for a, s, d in inputs],
            "computes": [
                {
                    "name": "acc",
                    **rows,
                    "dtype": "float32",
                    "reduce": {"op": "sum", "axes": {"r": k}},
                    "expr": f"float32(X[i, r]) * {weight}",
                },
                {"name": "out", **rows, "dtype": "bfloat16", "expr": "bfloat16(acc[i, j])"},
            ],
            "outputs": ["out"],
        }
    )


@pytest.mark.parametrize("isa", [BF16, AMX])
def test_an_int4_linear_whose_weights_round_to_bfloat16_runs_on_the_engines(isa: str) -> None:
    """A side that computes its value and rounds it to bfloat16 (a dequantized weight) is
    packed as that value: the engines take it. A weight dequantized in float32 is not
    bfloat16, so it stays on the FMA template: a dot would round it."""
    target = Target(kind="cpu", isa=isa)
    assert "s0.mode" not in space_for(int4_linear(rounded=False), target).knobs
    program = int4_linear(rounded=True)
    found = configs(program, target)
    assert found and all(c["s0.mode"] == "dot" for c in found)
    source = lower(program, target, found[0]).source
    assert ("_tile_dpbf16ps" if "amx_bf16" in isa else "_mm512_dpbf16_ps") in source
    assert compile_for(lower(program, target, found[0]), isa).exists()
    if not can_run(isa):
        pytest.skip(f"this host ({cpu_isa()}) has no {', '.join(isa.split('+')[1:])}")
    check_configs(program, target, found, {})
