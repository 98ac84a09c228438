"""Redis SIGKILLed and started again (empty) in the middle of a tuning: every daemon rides it
out, `/readyz` says not-ready meanwhile, and the tuning finishes with exactly its trials."""

from __future__ import annotations

import time

import httpx
from sqlalchemy.orm import Session, sessionmaker

from tests.faults.conftest import Service, submit, wait_for
from tunehub.schemas.record import TuningStatus
from tunehub.server.db.records import list_records
from tunehub.server.db.session import session_scope

TRIALS = 12  # a batch of eight, then four


def test_a_redis_restart_mid_tuning_costs_no_daemon_and_no_trial(
    service: Service, sessions: sessionmaker[Session]
) -> None:
    daemons = [service.api(), service.tuner("tuner-1"), service.worker("w1"), service.worker("w2")]
    service.wait_api()
    service.wait_registered("tuner-1", "w1", "w2")
    tuning_id = submit(service.api_url, TRIALS)["id"]

    def tuning() -> dict:
        return httpx.get(f"{service.api_url}/v1/tunings/{tuning_id}", timeout=10).json()

    wait_for(lambda: tuning()["trials_done"] > 0, "the first batch")
    with session_scope(sessions) as s:
        before = {r.id: r.config_key for r in list_records(s, tuning_id=tuning_id)}

    service.redis.kill()
    time.sleep(1)
    ready = httpx.get(f"{service.api_url}/readyz", timeout=10)
    assert ready.status_code == 503 and ready.json()["redis"].startswith("error")
    time.sleep(3)  # long enough for every daemon to notice
    service.redis.start()

    done = wait_for(lambda: (t := tuning())["status"] in ("done", "failed") and t, "the tuning")
    assert done["status"] == TuningStatus.DONE, done["error"]
    assert done["trials_done"] == TRIALS
    with session_scope(sessions) as s:
        records = list_records(s, tuning_id=tuning_id, limit=None)
    assert len(records) == TRIALS
    assert len({r.config_key for r in records}) == TRIALS  # no config measured twice
    assert all(before[r.id] == r.config_key for r in records if r.id in before)
    assert set(before) <= {r.id for r in records}  # nothing stored was lost
    assert httpx.get(f"{service.api_url}/readyz", timeout=10).status_code == 200
    for daemon in daemons:
        assert daemon.alive(), f"{daemon.name} died:\n{daemon.text()[-3000:]}"
        # One line when Redis went, one when it came back, per loop: not one per retry.
        assert daemon.text().count("is unavailable") <= 6, daemon.text()[-3000:]
    # The daemons registered again: a new tuning runs without anyone restarting anything.
    service.wait_registered("tuner-1", "w1", "w2")
