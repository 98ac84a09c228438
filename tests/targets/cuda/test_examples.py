"""Every example through the worker's CUDA path, shrunk to emulate quickly: the default, the
seeds and random valid candidates of each architecture's space build with nvcc for sm_80 and
sm_90 (one batched front end per architecture), and sm_90's pass the emulated check against
the reference.

Shrinking divides every literal extent of 256 or more by 8 (1024 -> 128, 4096 -> 512), which
keeps the ratios that packed layouts rely on (int4 weights: K / 8 words per row).
"""

from __future__ import annotations

import json
import random
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from tests.targets.cuda.cases import needs_nvcc
from tunehub.compiler.ir import Program
from tunehub.compiler.lower import lower
from tunehub.compiler.program import load
from tunehub.compiler.space import space_for
from tunehub.compiler.space.space import Config
from tunehub.schemas.record import RecordStatus
from tunehub.schemas.target import Target
from tunehub.targets.cuda.build import CudaBuilder
from tunehub.targets.cuda.check import check_configs
from tunehub.worker.measure.case import CaseCache

EXAMPLES = sorted((Path(__file__).resolve().parents[3] / "examples").glob("*.json"))
ARCHS = ("sm_80", "sm_90")
SAMPLES = 2
SYMBOL_VALUE = 5  # odd: partial tiles everywhere


def shrink(signature: dict[str, Any]) -> dict[str, Any]:
    def extent(value: Any) -> Any:
        return value // 8 if isinstance(value, int) and value >= 256 else value

    shrunk = json.loads(json.dumps(signature))
    for tensor in [*shrunk["inputs"], *shrunk["computes"]]:
        tensor["shape"] = [extent(e) for e in tensor["shape"]]
        reduce = tensor.get("reduce")
        if reduce:
            reduce["axes"] = {axis: extent(e) for axis, e in reduce["axes"].items()}
    return shrunk


@cache
def example(path: Path, arch: str = "sm_90") -> tuple[Program, list[Config]]:
    """The shrunk program, its default config, its seeds and SAMPLES distinct random valid
    ones of its space on `arch`."""
    program = load(shrink(json.loads(path.read_text())))
    space = space_for(program, Target(kind="cuda", arch=arch))
    rng = random.Random(path.stem)
    configs = {space.key(c): c for c in (space.default(), *space.seeds())}
    wanted = len(configs) + SAMPLES
    for _ in range(20 * SAMPLES):
        if len(configs) == wanted:
            break
        config = space.sample(rng)
        configs.setdefault(space.key(config), config)
    return program, list(configs.values())


@needs_nvcc
def test_candidates_build_for_sm80_and_sm90() -> None:
    def build(arch: str) -> list[tuple[str, Any]]:
        target = Target(kind="cuda", arch=arch)
        lowered = [
            (path.stem, lower(program, target, config))
            for path in EXAMPLES
            for program, configs in [example(path, arch)]
            for config in configs
        ]
        results = CudaBuilder().build_many([k for _, k in lowered], target, timeout_s=600)
        return [(name, r) for (name, _), r in zip(lowered, results, strict=True)]

    with ThreadPoolExecutor(len(ARCHS)) as pool:
        for arch, built in zip(ARCHS, pool.map(build, ARCHS), strict=True):
            for name, result in built:
                assert result.status is RecordStatus.OK, f"{name} on {arch}:\n{result.log}"
                assert result.stats["kernels"], f"{name} on {arch}: no ptxas statistics"


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_candidates_pass_the_emulated_check(path: Path, tmp_path: Path) -> None:
    program, configs = example(path)
    symbols = {s.name: SYMBOL_VALUE for s in program.symbols}
    target = Target(kind="cuda", arch="sm_90")
    results = check_configs(
        program, target, configs, symbols, emulate=True, cases=CaseCache(tmp_path)
    )
    failed = [
        f"{r.status} {r.config}:\n{r.log}" for r in results if r.status is not RecordStatus.OK
    ]
    assert not failed, "\n\n".join(failed)
