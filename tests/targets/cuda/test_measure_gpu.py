"""The GPU runner on a real GPU: the hand-written candidates of `cases` (right, wrong,
out of bounds, faulting, hanging), timing, the fingerprint, and the whole job path for a
lowered example. Skipped where no GPU is visible (the query runs in a child process).

Run on a GPU machine with `pytest -m gpu tests/targets/cuda/test_measure_gpu.py`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.targets.cuda import cases
from tunehub.compiler.kernel import Kernel
from tunehub.compiler.program import load
from tunehub.compiler.space import space_for
from tunehub.schemas.record import RecordStatus
from tunehub.schemas.target import Target
from tunehub.targets.cuda import device as cuda_device
from tunehub.targets.cuda.build import CudaBuilder
from tunehub.targets.cuda.runner import CudaRunner
from tunehub.worker import device
from tunehub.worker.backend import worker_backend
from tunehub.worker.jobs import CandidateRequest, run_candidate
from tunehub.worker.measure.case import Case, CaseCache
from tunehub.worker.measure.runner import MeasureResult

GPUS = cuda_device.gpus()
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not GPUS, reason="no CUDA GPU visible"),
]
EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


@pytest.fixture(scope="module")
def target() -> Target:
    return Target(kind="cuda", arch=GPUS[0]["gpu_arch"])


@pytest.fixture(scope="module")
def case(tmp_path_factory: pytest.TempPathFactory) -> Case:
    return cases.case(CaseCache(tmp_path_factory.mktemp("cache")), n=1 << 20)


@pytest.fixture(scope="module")
def runner() -> Iterator[CudaRunner]:
    runner = CudaRunner()
    yield runner
    runner.close()


def measure(
    runner: CudaRunner, case: Case, kernel: Kernel, target: Target, timeout_s: float = 30
) -> MeasureResult:
    built = CudaBuilder().build(kernel, target, timeout_s=300)
    assert built.artifact is not None, built.log
    metadata = kernel.metadata()
    return runner.run(
        built.artifact, metadata, case, timeout_s=timeout_s, repeats=5, min_repeat_s=0.005
    )


@pytest.mark.parametrize("kernel", cases.CORRECT_ONES)
def test_correct_candidates_are_timed(
    runner: CudaRunner, case: Case, kernel: Kernel, target: Target
) -> None:
    result = measure(runner, case, kernel, target)
    assert result.status is RecordStatus.OK, result.log
    assert len(result.latencies_s) == 5
    # 12 MB moved: well over a microsecond, well under 10 ms on any GPU of the last decade.
    assert result.latency_s is not None and 1e-6 < result.latency_s < 1e-2
    assert result.max_error is not None and result.max_error < 1e-6


@pytest.mark.parametrize(
    ("kernel", "status", "log"),
    [
        (cases.WRONG, RecordStatus.WRONG_ANSWER, "elements differ"),
        (cases.MISSES_LAST, RecordStatus.WRONG_ANSWER, "1 of 1048576 elements differ"),
        (cases.PAST_THE_END, RecordStatus.RUNTIME_ERROR, "guard bytes"),
        (cases.INTO_INPUT, RecordStatus.RUNTIME_ERROR, "into its input 'a'"),
        (cases.FAULTS, RecordStatus.RUNTIME_ERROR, "CUDA_ERROR_ILLEGAL_ADDRESS"),
        (cases.TOO_MANY_THREADS, RecordStatus.RUNTIME_ERROR, "CUDA_ERROR_INVALID_VALUE"),
    ],
    ids=["wrong", "misses-last", "past-the-end", "into-input", "faults", "too-many-threads"],
)
def test_failures_are_recorded_and_the_runner_carries_on(
    runner: CudaRunner,
    case: Case,
    kernel: Kernel,
    status: RecordStatus,
    log: str,
    target: Target,
) -> None:
    result = measure(runner, case, kernel, target)
    assert result.status is status, result.log
    assert log in result.log
    assert measure(runner, case, cases.CORRECT, target).status is RecordStatus.OK


def test_a_hanging_kernel_is_killed_at_the_deadline(
    runner: CudaRunner, case: Case, target: Target
) -> None:
    result = measure(runner, case, cases.HANGS, target, timeout_s=3)
    assert result.status is RecordStatus.RUN_TIMEOUT
    assert "during the first (checked) run" in result.log
    assert measure(runner, case, cases.CORRECT, target).status is RecordStatus.OK


def test_the_fingerprint_names_the_gpu(target: Target) -> None:
    fingerprint = device.fingerprint(target, threads=1)
    assert fingerprint["gpu_name"] and fingerprint["gpu_sm_count"] > 0
    assert fingerprint["gpu_memory_bytes"] > 1 << 30
    assert fingerprint["driver_version"] and fingerprint["compiler"].startswith("nvcc ")
    assert Target(kind="cuda", arch=target.arch) in worker_backend("cuda").local_targets()


@pytest.mark.parametrize("example", ["matmul_512", "softmax", "int4_matmul"])
def test_a_lowered_example_runs_through_the_job_path(example: str, target: Target) -> None:
    signature = json.loads((EXAMPLES / f"{example}.json").read_text())
    program = load(signature)
    space = space_for(program, target)
    symbols = {s.name: 64 for s in program.symbols}
    for config in (space.default(), space.naive()):
        request = CandidateRequest(signature, target.model_dump(), config, symbols)
        result = run_candidate(request)
        assert result.status is RecordStatus.OK, result.log
        assert result.latency_s is not None and result.latency_s > 0
        assert result.machine["gpu_arch"] == target.arch
        assert result.build_stats["kernels"]
