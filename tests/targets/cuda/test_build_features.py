"""A built CUDA candidate's ptxas features are what ptxas reported (`with_build_stats` over
`parse_ptxas` of a real nvcc build), not the estimates `extract` gives unbuilt candidates; a
CPU candidate's GPU columns stay 0."""

from __future__ import annotations

from typing import Any

from tests.targets.cuda.cases import needs_nvcc
from tunehub.compiler import features
from tunehub.compiler.lower import lower
from tunehub.compiler.program import load
from tunehub.compiler.space import space_for
from tunehub.compiler.space.space import Config
from tunehub.schemas.record import RecordStatus
from tunehub.schemas.target import Target
from tunehub.targets.cuda.build import CudaBuilder, parse_ptxas
from tunehub.worker import device
from tunehub.worker.jobs import CandidateRequest, build_candidate

SM80 = Target(kind="cuda", arch="sm_80")
CPU = Target(kind="cpu", isa=device.cpu_isa())
SIGNATURE: dict[str, Any] = {
    "name": "hgemm",
    "inputs": [
        {"name": "A", "shape": [128, 96], "dtype": "float16"},
        {"name": "B", "shape": [96, 128], "dtype": "float16"},
    ],
    "computes": [
        {
            "name": "C",
            "axes": ["m", "n"],
            "shape": [128, 128],
            "dtype": "float32",
            "expr": "float32(A[m, k]) * float32(B[k, n])",
            "reduce": {"op": "sum", "axes": {"k": 96}},
        }
    ],
    "outputs": ["C"],
}
PROGRAM = load(SIGNATURE)
PTXAS = ("ptxas_registers", "ptxas_spill_bytes", "ptxas_stack_bytes", "ptxas_shared_bytes")


def wmma(stages: int) -> Config:
    """A tensor-core config with a `stages`-deep cp.async pipeline (1: none)."""
    space = space_for(PROGRAM, SM80)
    config = {**space.naive(), "s0.mode": "wmma", "s0.wmma_stages": stages}
    assert space.check(config) is None
    return config


def others(vector: dict[str, float]) -> dict[str, float]:
    return {name: value for name, value in vector.items() if name not in PTXAS}


@needs_nvcc
def test_with_build_stats_replaces_the_estimates_with_ptxas_values() -> None:
    config = wmma(3)
    built = CudaBuilder().build(lower(PROGRAM, SM80, config), SM80, 120.0)
    assert built.status is RecordStatus.OK, built.log
    (kernel,) = parse_ptxas(built.log).values()
    assert kernel["registers"] > 0
    estimate = features.extract(PROGRAM, SM80, config)
    real = features.with_build_stats(estimate, {"kernels": parse_ptxas(built.log)})
    assert real["ptxas_registers"] == kernel["registers"]
    assert real["ptxas_spill_bytes"] == kernel["spill_store_bytes"] + kernel["spill_load_bytes"]
    assert real["ptxas_stack_bytes"] == kernel["stack_bytes"]
    # Static shared memory: the estimate counted it exactly.
    assert real["ptxas_shared_bytes"] == kernel["shared_bytes"] == estimate["ptxas_shared_bytes"]
    assert others(real) == others(estimate)
    # The register estimate is rough but of the right size (within 30% on this kernel).
    assert abs(estimate["ptxas_registers"] - kernel["registers"]) <= 0.3 * kernel["registers"]


@needs_nvcc
def test_a_built_cuda_candidate_carries_its_ptxas_stats() -> None:
    config = wmma(1)
    request = CandidateRequest(signature=SIGNATURE, target=SM80.model_dump(), config=config)
    result = build_candidate(request)
    assert result.status is RecordStatus.OK, result.log
    assert result.feature_version == features.FEATURE_VERSION == 3
    assert list(result.features) == features.feature_names()
    (kernel,) = result.build_stats["kernels"].values()
    assert result.features["ptxas_registers"] == kernel["registers"]
    assert result.features["ptxas_shared_bytes"] == kernel["shared_bytes"]
    estimate = features.extract(PROGRAM, SM80, config)
    assert result.features == features.with_build_stats(estimate, result.build_stats)
    assert result.features["gpu_tensor_cores"] == 1.0


def test_a_built_cpu_candidate_keeps_its_features() -> None:
    config = space_for(PROGRAM, CPU).default()
    request = CandidateRequest(signature=SIGNATURE, target=CPU.model_dump(), config=config)
    result = build_candidate(request)
    assert result.status is RecordStatus.OK, result.log
    assert result.features == features.extract(PROGRAM, CPU, config)
    assert all(v == 0.0 for k, v in result.features.items() if k.startswith(("gpu_", "ptxas_")))
