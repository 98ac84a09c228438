"""The GPU attention template on CUDA: attention chains computed in one pass over key blocks
staged in shared memory, verified in the emulator against the reference (boolean and
additive masks, grouped heads, causal with its key blocks cut, L != S, ragged blocks,
symbolic lengths, views of one projection) and compiled by nvcc for sm_80 and sm_90."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest

from tests import signatures
from tunehub.compiler.lower import lower
from tunehub.compiler.program import load
from tunehub.compiler.space import space_for
from tunehub.schemas.record import RecordStatus
from tunehub.schemas.target import Target
from tunehub.targets.cuda.build import CudaBuilder
from tunehub.targets.cuda.check import check_configs
from tunehub.worker.measure.case import CaseCache

CUDA = Target(kind="cuda", arch="sm_90")
CASES: dict[str, dict[str, Any]] = {
    "bool mask, grouped heads": dict(mask="bool", heads=4, kv_heads=2),
    "causal, ragged blocks": dict(causal=True, queries=70, keys=70),
    "float mask, L != S": dict(mask="float32", queries=37, keys=45, depth=12, width=20),
    "symbolic lengths": dict(queries="L", keys="S", causal=True),
    "views of one projection": dict(queries=19, keys=19, packed=True, causal=True),
}


@pytest.mark.skipif(shutil.which("g++") is None, reason="the emulator needs g++")
@pytest.mark.parametrize("case", CASES)
def test_the_one_pass_kernel_is_the_reference_in_the_emulator(case: str) -> None:
    program = load(signatures.attention(**CASES[case]))
    space = space_for(program, CUDA)
    assert space.default()["a0.fuse"] is True
    configs = [space.default(), {**space.default(), "a0.threads": 32, "a0.kb": 16}]
    assert all(space.check(c) is None for c in configs)
    symbols = {"L": 37, "S": 29} if case == "symbolic lengths" else {}
    cases = CaseCache(Path(tempfile.mkdtemp(prefix="tunehub-attention-")))
    results = check_configs(program, CUDA, configs, symbols, emulate=True, cases=cases)
    assert [r.status for r in results] == [RecordStatus.OK] * len(configs), results


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_the_kernel_compiles_for_sm80_and_sm90() -> None:
    program = load(signatures.attention(mask="bool", heads=8, kv_heads=2, queries=64, keys=64,
                                        depth=64, width=64))  # fmt: skip
    for arch in ("sm_80", "sm_90"):
        target = Target(kind="cuda", arch=arch)
        kernel = lower(program, target, space_for(program, target).default())
        (result,) = CudaBuilder().build_many([kernel], target, 600)
        assert result.status == RecordStatus.OK, result.log
