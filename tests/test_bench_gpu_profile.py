"""`bench/gpu_profile.py --check`'s parts that need no GPU: device values read back as the
reference evaluator holds them, and the verdict on a kernel's outputs."""

from __future__ import annotations

import numpy as np
import pytest

from bench.gpu_profile import host, mismatch
from tests.targets.cuda.test_wmma import int4_matmul
from tunehub.compiler.inputs import random_inputs
from tunehub.compiler.reference import evaluate

torch = pytest.importorskip("torch")


def test_values_come_back_in_the_evaluators_dtypes() -> None:
    bf16 = torch.tensor([1.5, -2.25, 3.0], dtype=torch.bfloat16)
    assert host(torch, bf16, "bfloat16").astype(np.float32).tolist() == [1.5, -2.25, 3.0]
    words = torch.tensor([-1, 7], dtype=torch.int32).view(torch.uint32)
    assert host(torch, words, "uint32").tolist() == [2**32 - 1, 7]


def test_a_kernel_is_right_or_its_first_differing_output_is_named() -> None:
    program = int4_matmul()
    symbols = {"M": 5}
    expected = evaluate(program, random_inputs(program, symbols, seed=1), symbols)
    assert mismatch(program, symbols, expected, dict(expected)) is None
    wrong = {name: value.copy() for name, value in expected.items()}
    wrong["out"][2, 3] += 1
    assert "out: 1 of 200 elements differ" in (mismatch(program, symbols, expected, wrong) or "")
