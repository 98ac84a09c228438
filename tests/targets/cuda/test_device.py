"""CUDA on the worker side without a GPU: which cubins a GPU runs, the fingerprint and the
targets of a machine without one, and a CUDA candidate through the job functions (built,
then refused for measurement rather than crashing)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.targets.cuda.cases import needs_nvcc
from tunehub.compiler.program import load
from tunehub.compiler.space import space_for
from tunehub.schemas.record import RecordStatus
from tunehub.schemas.target import Target
from tunehub.targets.cuda import device as cuda_device
from tunehub.worker import device
from tunehub.worker.backend import worker_backend
from tunehub.worker.jobs import CandidateRequest, build_candidate, measure_candidate

SM90 = Target(kind="cuda", arch="sm_90")
EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
no_gpu = pytest.mark.skipif(bool(cuda_device.gpus()), reason="this machine has a GPU")


@pytest.mark.parametrize(
    ("arch", "gpu", "runs"),
    [
        ("sm_80", "sm_80", True),
        ("sm_80", "sm_86", True),  # same major, newer minor
        ("sm_86", "sm_80", False),
        ("sm_80", "sm_90", False),  # SASS does not cross major versions
        ("sm_90a", "sm_90", True),
        ("sm_90", "sm_90", True),
        ("sm_90a", "sm_100", False),
    ],
)
def test_which_gpus_run_which_cubins(arch: str, gpu: str, runs: bool) -> None:
    assert cuda_device.can_run_cuda(arch, gpu) is runs


@no_gpu
def test_without_a_gpu_the_query_says_why_and_nothing_is_found() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tunehub.targets.cuda.gpu"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    answer = json.loads(done.stdout)
    assert answer["devices"] == [] and answer["error"]
    assert cuda_device.gpus() == ()
    assert worker_backend("cuda").local_targets() == []


@no_gpu
def test_a_fingerprint_without_a_gpu_names_the_toolchain() -> None:
    fingerprint = device.fingerprint(SM90, threads=1)
    assert fingerprint["compiler"].startswith("nvcc ")
    assert "gpu_name" not in fingerprint and fingerprint["cpu_isa"] == device.cpu_isa()


@no_gpu
@needs_nvcc
def test_a_cuda_candidate_builds_and_is_refused_where_no_gpu_runs_it() -> None:
    signature = json.loads((EXAMPLES / "softmax.json").read_text())
    request = CandidateRequest(
        signature, SM90.model_dump(), space_for(load(signature), SM90).default()
    )
    built = build_candidate(request)
    assert built.status is RecordStatus.OK, built.log
    assert built.artifact is not None and built.artifact.startswith(b"\x7fELF")
    assert built.metadata["launch"]["kernels"] and built.features
    assert all(k["registers"] > 0 for k in built.build_stats["kernels"].values())
    measured = measure_candidate(request, built)
    assert measured.status is RecordStatus.RUNTIME_ERROR and measured.measured
    assert "no GPU that runs sm_90 code" in measured.log
