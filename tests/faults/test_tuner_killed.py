"""A tuner SIGKILLed in the middle of a tuning (its child with it): the tuning is taken over by
the living tuner within seconds, or resumed when submitted again, never joined while dead; and
the dead tuner's name is free again at once."""

from __future__ import annotations

import time

import httpx
from sqlalchemy.orm import Session, sessionmaker

from tests.faults.conftest import Service, submit, wait_for
from tunehub.schemas.record import TuningStatus
from tunehub.server.db.records import list_records
from tunehub.server.db.session import session_scope
from tunehub.server.db.tunings import get_tuning
from tunehub.server.tuner.lease import LEASE_TTL_S

TRIALS = 12


def lease_owner(sessions: sessionmaker[Session], tuning_id: int) -> str | None:
    with session_scope(sessions) as s:
        tuning = get_tuning(s, tuning_id)
        assert tuning is not None
        return tuning.lease_owner


def finished(service: Service, tuning_id: int) -> dict:
    def ended() -> dict | None:
        view = httpx.get(f"{service.api_url}/v1/tunings/{tuning_id}", timeout=10).json()
        return view if view["status"] not in ("queued", "running") else None

    view: dict = wait_for(ended, "the tuning to end", timeout_s=120)
    return view


def check_records(sessions: sessionmaker[Session], tuning_id: int, before: set[int]) -> None:
    with session_scope(sessions) as s:
        records = list_records(s, tuning_id=tuning_id, limit=None)
    assert len(records) == TRIALS
    assert len({r.config_key for r in records}) == TRIALS  # no config measured twice
    assert before <= {r.id for r in records}


def test_a_living_tuner_takes_over_from_a_killed_one(
    service: Service, sessions: sessionmaker[Session]
) -> None:
    service.api()
    tuners = {name: service.tuner(name) for name in ("tuner-a", "tuner-b")}
    service.worker("w1")
    service.wait_api()
    service.wait_registered("tuner-a", "tuner-b", "w1")
    tuning_id = submit(service.api_url, TRIALS)["id"]
    owner = wait_for(lambda: lease_owner(sessions, tuning_id), "a tuner to claim it")
    wait_for(
        lambda: httpx.get(f"{service.api_url}/v1/tunings/{tuning_id}").json()["trials_done"],
        "the first batch",
    )
    with session_scope(sessions) as s:
        before = {r.id for r in list_records(s, tuning_id=tuning_id)}

    victim = owner.split("/")[0]
    tuners[victim].kill()
    survivor = next(name for name in tuners if name != victim)
    taken = wait_for(
        lambda: (o := lease_owner(sessions, tuning_id)) and o.startswith(survivor),
        "the survivor to take it over",
        timeout_s=4 * LEASE_TTL_S,
    )
    assert taken

    view = finished(service, tuning_id)
    assert view["status"] == TuningStatus.DONE, view["error"]
    assert view["trials_done"] == TRIALS
    check_records(sessions, tuning_id, before)
    # Its name is free again within seconds.
    started = time.monotonic()
    service.tuner(victim)
    service.wait_registered(victim)
    assert tuners[survivor].alive()
    assert time.monotonic() - started < 30


def test_a_resubmission_queues_a_dead_tuning_again_and_a_new_tuner_resumes_it(
    service: Service, sessions: sessionmaker[Session]
) -> None:
    service.api()
    tuner = service.tuner("only-tuner")
    service.worker("w1")
    service.wait_api()
    service.wait_registered("only-tuner", "w1")
    tuning_id = submit(service.api_url, TRIALS)["id"]
    wait_for(
        lambda: httpx.get(f"{service.api_url}/v1/tunings/{tuning_id}").json()["trials_done"],
        "the first batch",
    )
    tuner.kill()
    time.sleep(LEASE_TTL_S + 1)  # its lease has run out; nobody runs the tuning

    again = submit(service.api_url, TRIALS)
    assert (again["id"], again["outcome"], again["status"]) == (tuning_id, "joined", "queued")
    service.tuner("only-tuner")  # the same name, at once
    view = finished(service, tuning_id)
    assert view["status"] == TuningStatus.DONE, view["error"]
    check_records(sessions, tuning_id, set())
