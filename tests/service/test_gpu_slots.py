"""`tunehub worker --gpus`: a measuring slot per GPU, each a daemon process that sees its GPU
alone, registered apart and measuring under its own device's lock, so that two GPUs measure
at once. The GPUs are a fake list (`TUNEHUB_FAKE_GPUS`) standing for the driver's; the slots,
Redis and the jobs are real."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis import Redis
from rq import Queue
from rq.job import Job, JobStatus

from tests.cli_process import tunehub_argv
from tests.service.slot_jobs import meet
from tunehub.schemas.target import Target
from tunehub.targets.cuda.device import FAKE_GPUS_ENV
from tunehub.worker.queues import Phase, queue_name
from tunehub.worker.registry import WorkerInfo, list_workers, machine_id

ROOT = Path(__file__).resolve().parents[2]
FAKE_GPUS = [
    {"gpu_name": f"Fake GPU {n}", "gpu_arch": "sm_90", "driver_version": "12.4"} for n in (0, 1)
]
MEASURE = queue_name(Phase.MEASURE, Target.parse("cuda:sm_90"))


def _environment() -> dict[str, str]:
    return {**os.environ, FAKE_GPUS_ENV: json.dumps(FAKE_GPUS)}


@pytest.fixture
def slots(redis_url: str, tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """`tunehub worker --gpus all` running; stopped (SIGTERM) afterwards."""
    log = (tmp_path / "slots.log").open("wb")
    process = subprocess.Popen(
        tunehub_argv("worker", "--gpus", "all", "--redis", redis_url, "--name", "node"),
        env=_environment(),
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    yield process
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=90)
    log.close()


def _registered(redis: Redis, count: int, timeout_s: float = 90) -> list[WorkerInfo]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = list_workers(redis)
        if len(found) >= count:
            return found
        time.sleep(0.2)
    raise AssertionError(f"{count} slots never registered")


def test_a_slot_per_gpu_registers_apart(slots: subprocess.Popen[bytes], redis: Redis) -> None:
    found = sorted(_registered(redis, 2), key=lambda w: w.name)
    assert [(w.name, w.slot) for w in found] == [("node-cuda0", "cuda:0"), ("node-cuda1", "cuda:1")]
    assert len({w.pid for w in found} | {slots.pid}) == 3  # two processes besides the parent
    for worker in found:
        assert worker.targets == ["cuda:sm_90"]  # its GPU's targets alone: no CPU queues
        assert MEASURE in worker.queues
        assert worker.fingerprints["cuda:sm_90"]["device"] == f"Fake GPU {worker.slot[-1]}"


def test_slots_measure_in_parallel_each_on_its_own_gpu(
    slots: subprocess.Popen[bytes], redis: Redis
) -> None:
    _registered(redis, 2)
    queue = Queue(MEASURE, connection=redis)
    jobs = [queue.enqueue(meet, "met", 2, 60, job_timeout=120) for _ in range(2)]
    deadline = time.monotonic() + 120
    while not all(job.get_status() in (JobStatus.FINISHED, JobStatus.FAILED) for job in jobs):
        assert time.monotonic() < deadline, "the jobs never ended"
        time.sleep(0.2)
    results = [Job.fetch(job.id, connection=redis).return_value() for job in jobs]
    assert all(result is not None for result in results), [j.get_status() for j in jobs]
    assert sorted((r["visible"], r["unit"], r["gpus"]) for r in results) == [
        ("0", f"{machine_id()}/cuda:0", ["Fake GPU 0"]),
        ("1", f"{machine_id()}/cuda:1", ["Fake GPU 1"]),
    ]


def test_a_signal_stops_every_slot(slots: subprocess.Popen[bytes], redis: Redis) -> None:
    _registered(redis, 2)
    slots.send_signal(signal.SIGTERM)
    assert slots.wait(timeout=90) == 0
    assert list_workers(redis) == []


def test_bad_gpu_lists_are_one_line() -> None:
    wrong = subprocess.run(
        tunehub_argv("worker", "--gpus", "0,7"), env=_environment(), capture_output=True, text=True
    )
    assert wrong.returncode == 2
    assert wrong.stderr == "error: --gpus: no GPU 7 here (its GPUs: 0, 1)\n"
    both = subprocess.run(
        tunehub_argv("worker", "--gpus", "all", "--queues", "x"),
        env=_environment(),
        capture_output=True,
        text=True,
    )
    assert both.returncode == 2 and "leave --queues out" in both.stderr
    none = subprocess.run(
        tunehub_argv("worker", "--gpus", "all"),
        env={**os.environ, FAKE_GPUS_ENV: "[]"},
        capture_output=True,
        text=True,
    )
    assert none.returncode == 2
    assert none.stderr.startswith("error: --gpus: this machine has no GPU")
