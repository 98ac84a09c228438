"""Every example compiles with nvcc for sm_80 and sm_90 under the naive config, the default
config, sampled configs and configs that exercise each kernel variant (GEMV, split-K, vector
loads, double buffering, dynamic shared memory), through the worker's builder (one batched
nvcc front end per architecture, the architectures in parallel)."""

from __future__ import annotations

import json
import random
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tunehub.compiler.kernel import Kernel
from tunehub.compiler.lower import lower
from tunehub.compiler.program import load
from tunehub.compiler.space import space_for
from tunehub.compiler.space.space import Config
from tunehub.schemas.record import RecordStatus
from tunehub.schemas.target import Target
from tunehub.targets.cuda.build import CudaBuilder

CUDA = Target(kind="cuda", arch="sm_80")
ARCHS = ("sm_80", "sm_90")
EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
SAMPLES = 2

# Variants of the contraction kernels the defaults and a few samples may miss.
VARIANTS: list[Config] = [
    {"mode": "gemv", "gemv_cols": 4, "gemv_warps": 2, "gemv_rows": 2, "gemv_vec": 8},
    {"mode": "gemv", "gemv_cols": 8, "gemv_warps": 4, "gemv_rows": 1, "gemv_vec": 32},
    {
        "mode": "gemv",
        "gemv_cols": 2,
        "gemv_warps": 8,
        "gemv_rows": 1,
        "gemv_vec": 32,
        "gemv_ahead": True,
    },
    {"mode": "tiled", "bm": 32, "bn": 32, "bk": 16, "tm": 2, "tn": 2, "split_k": 4},
    {"mode": "tiled", "bm": 64, "bn": 64, "bk": 16, "tm": 4, "tn": 4, "vec": True},
    {"mode": "tiled", "bm": 128, "bn": 128, "bk": 32, "tm": 8, "tn": 8, "double": True},
]


def kernels() -> list[tuple[str, Kernel]]:
    """(which config, kernel) for every example: naive, default, samples and variants."""
    found = []
    for path in sorted(EXAMPLES.glob("*.json")):
        program = load(json.loads(path.read_text()))
        space = space_for(program, CUDA)
        rng = random.Random(path.name)
        configs = [("naive", space.naive()), ("default", space.default())]
        configs += [("sample", space.sample(rng)) for _ in range(SAMPLES)]
        for variant in VARIANTS:
            config = {**space.naive()}
            for stage in space.analysis.stages:
                if stage.kind == "contraction":
                    config.update({f"s{stage.index}.{k}": v for k, v in variant.items()})
            if config != space.naive() and space.check(config) is None:
                configs.append(("variant", config))
        found += [(which, lower(program, CUDA, config)) for which, config in configs]
    return found


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_examples_compile_for_sm80_and_sm90() -> None:
    """...and the default configs spill no registers."""
    found = kernels()

    def build(arch: str) -> list[str]:
        target = Target(kind="cuda", arch=arch)
        results = CudaBuilder().build_many([k for _, k in found], target, 600)
        problems = []
        for (which, kernel), result in zip(found, results, strict=True):
            if result.status != RecordStatus.OK:
                problems.append(f"{arch} {kernel.entry}:\n{result.log}\n{kernel.source}")
            stats = result.stats.get("kernels", {}).values()
            spills = [s.get("spill_store_bytes", 0) for s in stats]
            if which in ("naive", "default") and any(spills):
                problems.append(f"{arch} {kernel.entry} ({which}) spills {spills}")
        return problems

    with ThreadPoolExecutor(len(ARCHS)) as pool:
        problems = [p for per_arch in pool.map(build, ARCHS) for p in per_arch]
    assert not problems, "\n\n".join(problems[:3])
