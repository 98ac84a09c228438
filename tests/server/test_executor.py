"""`LocalExecutor` with `cuda` targets: which GPU of this machine a target resolves to (GPUs
faked: the list `targets.cuda.device.gpus` reports), and, on a GPU machine, a short real tuning
(`pytest -m gpu tests/server/test_executor.py`)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from tunehub.schemas.record import RecordStatus
from tunehub.schemas.signature import TaskSignature
from tunehub.schemas.target import Target
from tunehub.server.db.records import list_records
from tunehub.server.db.session import make_engine, migrate, session_factory, session_scope
from tunehub.server.tuner import LocalExecutor, SearchPlan, Tuner, register_tuning, validate_task
from tunehub.targets.cuda import device

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
GPUS = device.gpus()


def with_gpus(monkeypatch: pytest.MonkeyPatch, *archs: str) -> None:
    found: tuple[dict[str, Any], ...] = tuple({"gpu_name": "GPU", "gpu_arch": a} for a in archs)
    monkeypatch.setattr(device, "gpus", lambda: found)


def test_a_cuda_target_without_a_gpu_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    with_gpus(monkeypatch)
    with pytest.raises(ValueError, match=r"this machine has no CUDA GPU .*cuda needs one"):
        LocalExecutor(workers=1).resolve(Target(kind="cuda"))


def test_an_arch_no_gpu_here_runs_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    with_gpus(monkeypatch, "sm_80")
    with pytest.raises(ValueError, match=r"no GPU of this machine runs sm_90 code .*sm_80"):
        LocalExecutor(workers=1).resolve(Target(kind="cuda", arch="sm_90"))


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_cuda_resolves_to_the_local_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    with_gpus(monkeypatch, "sm_90", "sm_80")
    executor = LocalExecutor(workers=1)
    assert executor.resolve(Target(kind="cuda")) == Target(kind="cuda", arch="sm_90")
    assert executor.resolve(Target(kind="cuda", arch="sm_80")) == Target(kind="cuda", arch="sm_80")


@pytest.mark.gpu
@pytest.mark.skipif(not GPUS, reason="no CUDA GPU visible")
def test_a_short_tuning_on_the_local_gpu(database_url: str) -> None:
    signature = TaskSignature.model_validate(json.loads((EXAMPLES / "softmax.json").read_text()))
    migrate(database_url)
    engine = make_engine(database_url)
    sessions = session_factory(engine)
    try:
        with LocalExecutor() as executor:
            target = executor.resolve(Target(kind="cuda"))
            assert target.arch == GPUS[0]["gpu_arch"]
            with session_scope(sessions) as s:
                tuning_id = register_tuning(
                    s, validate_task(signature, {}), SearchPlan("random", 8), target=target
                )
            summary = Tuner(sessions, executor, seed=0).run(tuning_id)
        assert summary.trials == 8 and summary.best is not None, summary.failures
        assert summary.baseline_latency_s is not None and summary.best.latency_s > 0
        with session_scope(sessions) as s:
            ok = list_records(s, workload_key=summary.workload_key, status=RecordStatus.OK)
            assert ok and all(r.machine["gpu_arch"] == target.arch for r in ok)
    finally:
        engine.dispose()
