"""Concurrent submissions of one workload all join one tuning; a 503 comes only when a
dependency is down, and says when to retry; a failed tuning submitted again resumes."""

from __future__ import annotations

import asyncio

import httpx
from sqlalchemy.orm import Session, sessionmaker

from tests.faults.conftest import TASK, Service
from tunehub.schemas.record import TuningStatus
from tunehub.server.db.session import session_scope
from tunehub.server.db.tunings import list_tunings, move_tunings, update_tuning

CONCURRENT = 200


async def _post_all(url: str, count: int) -> list[httpx.Response]:
    request = {"task": TASK, "target": "cpu", "trials": 8, "strategy": "random"}
    limits = httpx.Limits(max_connections=count)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as http:
        return list(
            await asyncio.gather(*(http.post("/v1/tunings", json=request) for _ in range(count)))
        )


def test_concurrent_submissions_of_one_workload_join_one_tuning(
    service: Service, sessions: sessionmaker[Session]
) -> None:
    service.api()
    service.wait_api()

    responses = asyncio.run(_post_all(service.api_url, CONCURRENT))

    assert [r.status_code for r in responses if r.status_code >= 500] == []
    assert {r.status_code for r in responses} == {202}
    ids = {r.json()["id"] for r in responses}
    assert len(ids) == 1
    assert sorted(r.json()["outcome"] for r in responses).count("created") == 1
    with session_scope(sessions) as s:
        assert len(list_tunings(s)) == 1


def test_a_submission_while_redis_is_down_is_503_with_retry_after(service: Service) -> None:
    service.api()
    service.wait_api()
    service.redis.kill()
    request = {"task": TASK, "target": "cpu", "trials": 8}
    response = httpx.post(f"{service.api_url}/v1/tunings", json=request, timeout=30)
    assert response.status_code == 503
    assert int(response.headers["Retry-After"]) > 0
    assert "Redis" in response.json()["detail"]
    service.redis.start()
    assert httpx.post(f"{service.api_url}/v1/tunings", json=request, timeout=30).status_code == 202


def test_resubmitting_a_failed_tuning_resumes_it_with_its_records(
    service: Service, sessions: sessionmaker[Session]
) -> None:
    service.api()
    service.wait_api()
    request = {"task": TASK, "target": "cpu:generic", "trials": 48, "strategy": "random"}
    first = httpx.post(f"{service.api_url}/v1/tunings", json=request, timeout=30).json()
    with session_scope(sessions) as s:
        update_tuning(s, first["id"], trials_done=8)
        move_tunings(s, [first["id"]], TuningStatus.FAILED, error="the tuner died")

    again = httpx.post(f"{service.api_url}/v1/tunings", json=request, timeout=30).json()

    assert (again["id"], again["outcome"], again["status"]) == (first["id"], "created", "queued")
    assert (again["trials_done"], again["trials_total"], again["error"]) == (8, 48, None)
