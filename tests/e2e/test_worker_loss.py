"""A worker daemon killed in the middle of a tuning costs no finished result: the tuning
completes on the worker that is left."""

from __future__ import annotations

import json
import time
from typing import Any

from redis import Redis
from rq.job import Job
from rq.registry import StartedJobRegistry

from tests.e2e.conftest import Service, example
from tunehub.client.sdk import Client
from tunehub.schemas.record import RecordStatus, TuningStatus
from tunehub.schemas.target import Target
from tunehub.worker.queues import Phase, queue_name
from tunehub.worker.registry import list_workers

TRIALS = 24  # three batches of eight on two workers
TIMEOUT_S = 240


def busy_workers(redis: Redis, target: Target) -> set[str]:
    """Names of the workers that hold a build or measure job right now."""
    names = set()
    for stage in Phase:
        registry = StartedJobRegistry(queue_name(stage, target), connection=redis)
        for job in Job.fetch_many(registry.get_job_ids(), connection=redis):
            if job is not None and job.worker_name:
                names.add(job.worker_name)
    return names


def wait_for(condition: Any, what: str) -> Any:
    deadline = time.monotonic() + TIMEOUT_S
    while not (value := condition()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)
    return value


def test_a_worker_killed_mid_tuning_loses_no_finished_result(
    service: Service, client: Client
) -> None:
    task = json.loads(example("matmul_512").read_text())
    redis = Redis.from_url(service.redis_url)
    victim, survivor = [p for p in service.fleet.processes if p.proc.poll() is None][:2]
    try:
        submitted = client.submit(task, trials=TRIALS)
        assert submitted.outcome == "created"
        # After the first batch is stored, kill the victim while it holds a job.
        first = wait_for(
            lambda: (t := client.get(submitted.id)).trials_done > 0 and t, "the first batch"
        )
        before = {r.id: r for r in client.records(first.workload_key)}
        assert first.trials_done <= len(before) < TRIALS
        target = Target.parse(first.target)
        wait_for(lambda: victim.name in busy_workers(redis, target), "the victim to hold a job")
        service.fleet.kill(victim)

        tuning = client.wait(submitted.id, timeout_s=TIMEOUT_S)
        assert tuning.status == TuningStatus.DONE, tuning.error
        assert tuning.trials_done == TRIALS
        after = {r.id: r for r in client.records(tuning.workload_key)}
        assert len(after) == TRIALS
        # Everything stored before the kill is still there, as it was but for the repeats a
        # contender gains when the tuning measures it again at its end (`confirmation`).
        timings = {"latency_s", "latencies_s", "max_error"}
        for i, record in before.items():
            kept = after[i]
            assert kept.model_dump(exclude=timings) == record.model_dump(exclude=timings)
            assert kept.latencies_s[: len(record.latencies_s)] == record.latencies_s
            assert kept.latency_s is not None and record.latency_s is not None
            assert kept.latency_s <= record.latency_s
        # The lost job was sent again, not recorded as the candidate's failure.
        assert all(r.status == RecordStatus.OK for r in after.values()), [
            r.error_log for r in after.values() if r.status != RecordStatus.OK
        ]
        assert survivor.proc.poll() is None
        assert victim.name not in {w.name for w in list_workers(redis)}
    finally:
        # The other end-to-end tests expect two workers.
        service.fleet.start(service.redis_url, 1)
        redis.close()
