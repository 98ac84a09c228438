"""Every x86-64 ISA's kernels compile with that ISA's own flags (the builder's, warnings as
errors), whatever this machine is, and those this machine can run agree with the reference.

A kernel lowered for AVX-512 and compiled with AVX2 flags fails (gcc refuses 64-byte vector
returns without AVX-512F), so the flags always follow the kernel's target, never the host.
"""

from __future__ import annotations

import json
import platform
from pathlib import Path

import pytest

from tests.compiler.cbuild import check_configs, compile_for
from tunehub.compiler.ir import Program
from tunehub.compiler.lower import lower
from tunehub.compiler.program import load
from tunehub.compiler.space import space_for
from tunehub.schemas.target import Target
from tunehub.worker.device import can_run

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
# The kinds of kernels the renderer writes: a packed GEMM, a fused int4 dequantize GEMM with
# float16 inputs and output, an implicit-GEMM conv, fused row reductions, an injective map.
PROGRAMS = ("matmul_odd", "int4_matmul", "conv2d_3x3", "softmax", "layernorm", "gelu")
X86_ISAS = ("x86_64-avx512", "x86_64-avx2", "x86_64", "generic")
SYMBOLS = {"int4_matmul": {"M": 5}}

pytestmark = pytest.mark.skipif(
    platform.machine() not in ("x86_64", "AMD64"), reason="x86-64 flags need an x86-64 gcc"
)


def example(name: str) -> Program:
    return load(json.loads((EXAMPLES / f"{name}.json").read_text()))


@pytest.mark.parametrize("isa", X86_ISAS)
@pytest.mark.parametrize("name", PROGRAMS)
def test_default_kernels_compile_with_their_isas_flags(isa: str, name: str) -> None:
    target = Target(kind="cpu", isa=isa)
    program = example(name)
    space = space_for(program, target)
    for config in (space.naive(), space.default()):
        assert compile_for(lower(program, target, config), isa).exists()


@pytest.mark.parametrize("isa", [isa for isa in X86_ISAS if can_run(isa)])
def test_kernels_of_every_isa_this_host_runs_are_correct(isa: str) -> None:
    target = Target(kind="cpu", isa=isa)
    for name in ("matmul_odd", "softmax"):
        program = example(name)
        space = space_for(program, target)
        check_configs(program, target, [space.default()], SYMBOLS.get(name, {}))
