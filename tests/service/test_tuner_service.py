"""The tuner as a service: tunings run through the worker daemons and land in the database."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest
from sqlalchemy.orm import Session, sessionmaker

from tests.service.workers import ROOT, Fleet
from tests.signatures import row_matmul
from tunehub.schemas.record import RecordStatus, TuningStatus
from tunehub.schemas.signature import TaskSignature
from tunehub.schemas.target import Target
from tunehub.server.db.artifacts import get_artifact
from tunehub.server.db.records import list_records
from tunehub.server.db.session import session_scope
from tunehub.server.db.tunings import get_tuning
from tunehub.server.settings import Settings
from tunehub.server.tuner import SearchPlan, register_tuning, validate_task
from tunehub.server.tuner.service import run_tuning
from tunehub.worker import device

SIGNATURE = TaskSignature.model_validate(row_matmul("service_matmul", k=16, n=24, max_m=64))
TARGET = Target(kind="cpu", isa=device.cpu_isa())


@pytest.fixture(scope="module")
def workers(module_redis_url: str, module_fleet: Fleet) -> str:
    """Two worker daemons; the Redis URL they listen on."""
    module_fleet.start(module_redis_url, 2)
    return module_redis_url


def queue_tuning(
    sessions: sessionmaker[Session], trials: int, target: Target | None = None, **symbols: int
) -> int:
    target = target or Target(kind="cpu")
    with session_scope(sessions) as s:
        return register_tuning(
            s, validate_task(SIGNATURE, symbols), SearchPlan("random", trials), target=target
        )


def tuning_row(sessions: sessionmaker[Session], tuning_id: int) -> Any:
    with session_scope(sessions) as s:
        return get_tuning(s, tuning_id)


def test_run_tuning_measures_through_the_workers_and_stores_every_record(
    workers: str, database_url: str, sessions: sessionmaker[Session]
) -> None:
    tuning_id = queue_tuning(sessions, trials=6)

    summary = run_tuning(tuning_id, settings=Settings(database_url=database_url, redis_url=workers))

    assert summary.status == TuningStatus.DONE and summary.trials == 6
    assert summary.target == str(TARGET)  # `cpu` completed from the workers' registrations
    assert summary.best is not None and summary.baseline_latency_s is not None
    with session_scope(sessions) as s:
        records = list_records(s, tuning_id=tuning_id, limit=None)
        assert len(records) == 6
        assert all(r.status == RecordStatus.OK for r in records), [r.error_log for r in records]
        assert all(r.machine["cpu_isa"] == TARGET.isa for r in records)
        assert all(r.machine["threads"] == device.cpu_cores() for r in records)
        assert summary.best.artifact_sha256 is not None
        assert get_artifact(s, summary.best.artifact_sha256) is not None
    assert tuning_row(sessions, tuning_id).trials_done == 6


def test_a_tuning_without_workers_for_its_target_fails_with_the_reason(
    workers: str, database_url: str, sessions: sessionmaker[Session]
) -> None:
    tuning_id = queue_tuning(sessions, trials=2, target=Target(kind="cuda", arch="sm_90"))

    with pytest.raises(ValueError, match="no living worker serves cuda:sm_90"):
        run_tuning(tuning_id, settings=Settings(database_url=database_url, redis_url=workers))

    tuning = tuning_row(sessions, tuning_id)
    assert tuning.status == TuningStatus.FAILED
    assert "no living worker serves cuda:sm_90" in tuning.error


def test_the_tuner_daemon_runs_queued_tunings(
    workers: str, database_url: str, sessions: sessionmaker[Session]
) -> None:
    tuning_id = queue_tuning(sessions, trials=3, M=8)

    env = {**os.environ, "TUNEHUB_DATABASE_URL": database_url}
    command = [sys.executable, "-m", "tunehub.server.tuner.service", "--redis", workers, "--burst"]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)

    assert done.returncode == 0, done.stderr[-3000:]
    tuning = tuning_row(sessions, tuning_id)
    assert tuning.status == TuningStatus.DONE, tuning.error
    assert tuning.trials_done == 3
    assert tuning.lease_owner is None  # released
