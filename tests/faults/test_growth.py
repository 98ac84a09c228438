"""Nothing grows without bound: resubmitting a tuned workload adds no tuning row; the RQ
results of a tuning leave Redis once the tuner stored them; SIGKILLed workers leave RQ's
registry."""

from __future__ import annotations

import signal

import pytest
from fastapi.testclient import TestClient
from redis import Redis
from rq import Queue, SimpleWorker
from rq.worker_registration import REDIS_WORKER_KEYS
from sqlalchemy.orm import Session, sessionmaker

from tests.api.data import add_record, sessions, signature
from tests.faults.conftest import Redises, Service, submit, wait_for
from tests.faults.test_tuner_killed import finished
from tunehub.schemas.target import Target
from tunehub.server.db.session import session_scope
from tunehub.server.db.tunings import list_tunings
from tunehub.worker.queues import Phase, queue_name
from tunehub.worker.registry import Registration, prune_rq_workers

RESUBMISSIONS = 12
TRIALS = 8


def test_resubmitting_a_tuned_workload_adds_no_tuning(client: TestClient) -> None:
    for latency in (1e-3, 2e-3):
        add_record(client, signature(), latency_s=latency, config={"latency": latency})
    request = {"task": signature(), "target": "cpu:x86_64-avx2", "trials": 2}
    answers = [client.post("/v1/tunings", json=request) for _ in range(RESUBMISSIONS)]
    assert {a.status_code for a in answers} == {200}
    assert {a.json()["outcome"] for a in answers} == {"cached"}
    assert len({a.json()["id"] for a in answers}) == 1
    assert answers[-1].json()["best"]["latency_s"] == 1e-3
    with session_scope(sessions(client)) as s:
        assert len(list_tunings(s)) == 1
    # A smaller budget is answered by the same done tuning; a larger one is a new tuning.
    smaller = client.post("/v1/tunings", json={**request, "trials": 1}).json()
    assert (smaller["outcome"], smaller["id"]) == ("cached", answers[0].json()["id"])


# Redis is what this is about: one database is enough.
@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_tunings_rq_results_leave_redis_once_stored(
    service: Service, sessions: sessionmaker[Session]
) -> None:
    service.start_all()
    (worker,) = [daemon for daemon in service.daemons if daemon.name == "w1"]
    view = finished(service, submit(service.api_url, TRIALS)["id"])
    assert (view["status"], view["trials_done"]) == ("done", TRIALS)
    with Redis.from_url(service.redis.url) as redis:
        jobs = [k for k in redis.scan_iter("rq:job:*")]
        results = [k for k in redis.scan_iter("rq:results:*")]
        assert (jobs, results) == ([], [])
        # SIGKILLed, the worker stays in RQ's registry until the tuner's pass prunes it.
        worker.kill(signal.SIGKILL)
        assert redis.smembers(REDIS_WORKER_KEYS)
        wait_for(lambda: prune_rq_workers(redis) == ["w1"], "the dead worker's pruning", 30)
        assert redis.smembers(REDIS_WORKER_KEYS) == set()


def test_only_dead_workers_of_tunehubs_queues_are_pruned(redis_server: Redises) -> None:
    with Redis.from_url(redis_server.url) as redis:
        queue = Queue(queue_name(Phase.BUILD, Target(kind="cpu", isa="x86_64")), connection=redis)
        living, dead = (
            SimpleWorker([queue], name="living", connection=redis),
            SimpleWorker([queue], name="dead", connection=redis),
        )
        foreign = SimpleWorker([Queue("other", connection=redis)], name="x", connection=redis)
        for rq_worker in (living, dead, foreign):
            rq_worker.register_birth()
        fields = {"name": "living", "host": "h", "pid": "1", "machine": "m", "queues": "[]"}
        fields |= {"targets": "[]", "threads": "1", "fingerprints": "{}", "started_at": "0"}
        Registration(redis, fields).write()
        assert prune_rq_workers(redis) == ["dead"]
        names = {k.decode() for k in redis.smembers(REDIS_WORKER_KEYS)}
        assert names == {living.key, foreign.key}
        assert not redis.exists(dead.key)
        assert not redis.smembers(f"rq:workers:{queue.name}") - {living.key.encode()}
