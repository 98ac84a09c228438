"""RQExecutor with a real redis-server and real worker daemons (separate processes)."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from redis import Redis
from rq.job import Job
from rq.registry import FinishedJobRegistry, StartedJobRegistry

from tests.service.workers import Fleet
from tunehub.compiler.lower import lower
from tunehub.compiler.program import load
from tunehub.compiler.space import space_for
from tunehub.schemas.record import RecordStatus
from tunehub.schemas.target import Target
from tunehub.server.tuner.rq_executor import RQExecutor
from tunehub.worker import device
from tunehub.worker.jobs import CandidateRequest, CandidateResult
from tunehub.worker.queues import Phase, measure_lock_key, queue_name
from tunehub.worker.registry import machine_id

SIGNATURE: dict[str, Any] = {
    "version": 1,
    "name": "small_matmul",
    "inputs": [
        {"name": "A", "shape": [24, 32], "dtype": "float32"},
        {"name": "B", "shape": [32, 16], "dtype": "float32"},
    ],
    "computes": [
        {
            "name": "C",
            "axes": ["i", "j"],
            "shape": [24, 16],
            "dtype": "float32",
            "reduce": {"op": "sum", "axes": {"k": 32}},
            "expr": "A[i, k] * B[k, j]",
        }
    ],
    "outputs": ["C"],
}
PROGRAM = load(SIGNATURE)
TARGET = Target(kind="cpu", isa=device.cpu_isa())
SPACE = space_for(PROGRAM, TARGET)


class Unimportable:
    """Pickled by reference to this test module, which worker processes cannot import: the
    worker fails to load the job, as it would after a version skew."""

    def __repr__(self) -> str:
        return "unimportable"


def configs(n: int) -> list[dict[str, Any]]:
    """The naive config and `n - 1` other distinct valid ones."""
    rng, found = random.Random(1), [SPACE.naive()]
    while len(found) < n:
        config = SPACE.sample(rng)
        if config not in found:
            found.append(config)
    return found


def request(config: dict[str, Any], **changes: Any) -> CandidateRequest:
    fields: dict[str, Any] = {
        "signature": SIGNATURE,
        "target": TARGET.model_dump(),
        "config": config,
        "repeats": 2,
        "min_repeat_s": 0.002,
        **changes,
    }
    return CandidateRequest(**fields)


def assert_built_from(result: CandidateResult, config: dict[str, Any]) -> None:
    """The result is `config`'s: the source it carries is the one `config` lowers to."""
    assert result.source == lower(PROGRAM, TARGET, config).source


@pytest.fixture(scope="module")
def executor(module_redis_url: str, module_fleet: Fleet) -> Iterator[RQExecutor]:
    module_fleet.start(module_redis_url, 2)
    redis = Redis.from_url(module_redis_url)
    yield RQExecutor(redis)
    redis.close()


def test_resolve_completes_a_target_from_the_living_workers(executor: RQExecutor) -> None:
    assert executor.resolve(Target(kind="cpu")) == TARGET
    assert executor.resolve(TARGET) == TARGET
    assert executor.parallelism == 2
    assert executor.measure_threads(TARGET) == device.cpu_cores()
    with pytest.raises(ValueError, match="no living worker serves a cuda target"):
        executor.resolve(Target(kind="cuda"))
    other = next(isa for isa in ("generic", "aarch64-neon") if isa != TARGET.isa)
    with pytest.raises(ValueError, match=f"no living worker serves cpu:{other}"):
        executor.resolve(Target(kind="cpu", isa=other))


def test_resolve_without_workers_says_to_start_one(redis: Redis) -> None:
    with pytest.raises(ValueError, match="tunehub worker"):
        RQExecutor(redis).resolve(Target(kind="cpu"))


def test_a_batch_comes_back_in_order_with_failures_recorded_not_retried(
    executor: RQExecutor,
) -> None:
    good = configs(4)
    invalid = {**SPACE.naive(), next(iter(SPACE.knobs)): "no such value"}
    skewed = {**SPACE.naive(), "extra": Unimportable()}
    requests = [request(c) for c in good] + [request(invalid), request(skewed)]
    retries = executor.retries

    results = executor.run(requests)

    assert len(results) == len(requests)
    for config, result in zip(good, results, strict=False):
        assert result.status is RecordStatus.OK, result.log
        assert result.measured and result.latency_s is not None and result.latency_s > 0
        assert result.machine["cpu_isa"] == TARGET.isa
        assert_built_from(result, config)
    # A wrong config is the candidate's failure: recorded once, never sent again.
    assert results[4].status is RecordStatus.INVALID_CONFIG and results[4].log
    # A job no worker can load is the infrastructure's: sent again, then recorded with why.
    assert results[5].status is RecordStatus.COMPILE_ERROR
    assert "failed on the workers 3 times" in results[5].log
    assert "attempt 3" in results[5].log and "test_rq_executor" in results[5].log
    assert executor.retries - retries == 2


def test_a_killed_worker_loses_no_finished_result(redis_url: str, fleet: Fleet) -> None:
    (victim,) = fleet.start(redis_url, 1)
    redis = Redis.from_url(redis_url)
    executor = RQExecutor(redis)
    chosen = configs(8)
    # Measurements long enough that most are still to come when the victim finishes one.
    requests = [request(c, repeats=3, min_repeat_s=0.05) for c in chosen]
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["results"] = executor.run(requests)
        except BaseException as exc:  # reported by the assertions below
            outcome["error"] = exc

    measure_queue = queue_name(Phase.MEASURE, TARGET)
    finished = FinishedJobRegistry(measure_queue, connection=redis)
    started = StartedJobRegistry(measure_queue, connection=redis)

    def jobs_of(registry: Any, worker: str) -> list[Job]:
        jobs = Job.fetch_many(registry.get_job_ids(), connection=redis)
        return [j for j in jobs if j is not None and j.worker_name == worker]

    def wait_for(condition: Any, what: str) -> Any:
        deadline = time.monotonic() + 120
        while not (value := condition()):
            assert thread.is_alive(), f"the batch ended before {what}: {outcome.get('error')}"
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            time.sleep(0.01)
        return value

    thread = threading.Thread(target=run)
    thread.start()
    try:
        # The victim alone builds everything and measures one candidate. Then the test takes
        # the machine's measure lock (polling faster than workers do, so it wins the next
        # round), the victim's next measurement waits for it, and the victim dies in the
        # middle of that job; a second worker arrives to finish the batch.
        done_by_victim = wait_for(lambda: jobs_of(finished, victim.name), "a finished measurement")
        lock = redis.lock(measure_lock_key(machine_id()), timeout=120, sleep=0.001)
        assert lock.acquire()
        try:
            wait_for(lambda: jobs_of(started, victim.name), "the victim's next measurement")
            (survivor,) = fleet.start(redis_url, 1)
            fleet.kill(victim)
        finally:
            lock.release()
    finally:
        thread.join(timeout=300)
    assert "error" not in outcome, outcome["error"]
    results: list[CandidateResult] = outcome["results"]

    assert [r.status for r in results] == [RecordStatus.OK] * len(chosen), [r.log for r in results]
    for config, result in zip(chosen, results, strict=True):
        assert_built_from(result, config)
    # Only the job in progress was sent again: the victim's builds and its measurement came
    # back as they were (the very same timings), not done again.
    assert executor.retries == 1
    for job in done_by_victim:
        index = chosen.index(job.args[0].config)
        assert results[index].latencies_s == job.return_value().latencies_s
    assert survivor.proc.poll() is None
    redis.close()
