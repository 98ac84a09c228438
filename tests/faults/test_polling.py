"""Status polling at load: the tunings' views and the dashboard's pages are served from the
answer the route gave last (`server.api.status_path`), and still follow every change: a
stored batch at once (the generations' channel), a write through this API at once, anything
else within the TTL; never to a caller the route would refuse."""

from __future__ import annotations

import asyncio
import gzip
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from redis import Redis

from tests.api.conftest import MakeClient
from tests.api.data import make_token, sessions, signature
from tests.faults.conftest import Service, submit, wait_for
from tunehub.schemas.api import Scope
from tunehub.server.api.status_path import GZIP_MIN_BYTES, StatusFastPath
from tunehub.server.db.session import session_scope
from tunehub.server.db.tunings import update_tuning
from tunehub.server.generations import BestGenerations

POLLERS = 50
TRIALS = 8


def _tuning(client: TestClient) -> dict[str, Any]:
    body = {"task": signature(), "target": "cpu:x86_64-avx2", "trials": 4}
    response = client.post("/v1/tunings", json=body)
    assert response.status_code == 202, response.text
    answer: dict[str, Any] = response.json()
    return answer


def _trials_done(client: TestClient, tuning_id: int) -> int:
    view = client.get(f"/v1/tunings/{tuning_id}")
    assert view.status_code == 200, view.text
    done: int = view.json()["trials_done"]
    return done


def _kept(client: TestClient, tuning_id: int) -> None:
    """Keep the tuning's answer once the app follows the channel (its subscription, when it
    begins, makes every answer stale: bumps may have been missed before it)."""
    assert _trials_done(client, tuning_id) == 0
    generations = client.app.state.services.best.generations  # type: ignore[attr-defined]
    wait_for(lambda: generations.live, "the subscription to the channel", 10)
    assert _trials_done(client, tuning_id) == 0


def test_a_stored_batch_drops_the_kept_answers_at_once(
    make_client: MakeClient, redis_url: str
) -> None:
    client = make_client(status_cache_ttl_s=3600)  # only the channel can make it current
    tuning = _tuning(client)
    _kept(client, tuning["id"])
    page = client.get("/ui").text
    with session_scope(sessions(client)) as s:
        update_tuning(s, tuning["id"], trials_done=3)
    assert _trials_done(client, tuning["id"]) == 0  # kept: nothing told it
    with Redis.from_url(redis_url) as redis:
        BestGenerations(redis).bump(tuning["workload_key"])
    wait_for(lambda: _trials_done(client, tuning["id"]) == 3, "the bump to arrive", 10)
    assert client.get("/ui").text != page


def test_a_write_through_the_api_drops_the_kept_answers(make_client: MakeClient) -> None:
    client = make_client(status_cache_ttl_s=3600)
    tuning = _tuning(client)
    assert client.get(f"/v1/tunings/{tuning['id']}").json()["status"] == "queued"
    assert client.post(f"/v1/tunings/{tuning['id']}/cancel").status_code == 200
    assert client.get(f"/v1/tunings/{tuning['id']}").json()["status"] == "cancelled"
    listed = client.get("/v1/tunings?status=cancelled").json()["items"]
    assert [t["id"] for t in listed] == [tuning["id"]]


def test_a_best_lookup_by_signature_keeps_the_answers(make_client: MakeClient) -> None:
    client = make_client(status_cache_ttl_s=3600)
    tuning = _tuning(client)
    _kept(client, tuning["id"])
    with session_scope(sessions(client)) as s:
        update_tuning(s, tuning["id"], trials_done=1)
    client.post("/v1/workloads/best", json={"task": signature(), "target": "cpu"})
    assert _trials_done(client, tuning["id"]) == 0  # a read: still kept


def test_anything_else_is_seen_within_the_ttl(make_client: MakeClient) -> None:
    client = make_client(status_cache_ttl_s=0.2)
    tuning = _tuning(client)
    assert _trials_done(client, tuning["id"]) == 0
    with session_scope(sessions(client)) as s:
        update_tuning(s, tuning["id"], trials_done=2)
    wait_for(lambda: _trials_done(client, tuning["id"]) == 2, "the TTL to run out", 10)


def test_a_kept_answer_is_never_served_to_a_caller_the_route_refuses(
    make_client: MakeClient,
) -> None:
    client = make_client(auth="token", status_cache_ttl_s=3600)
    submitter = {"Authorization": f"Bearer {make_token(sessions(client), Scope.SUBMIT)}"}
    body = {"task": signature(), "target": "cpu:x86_64-avx2", "trials": 4}
    tuning_id = client.post("/v1/tunings", json=body, headers=submitter).json()["id"]
    path = f"/v1/tunings/{tuning_id}"
    assert client.get(path, headers=submitter).status_code == 200  # now kept
    assert client.get(path).status_code == 401
    assert client.get(path, headers={"Authorization": "Bearer bogus"}).status_code == 401
    assert client.get(path, headers={"Cookie": "tunehub_token=bogus"}).status_code == 401
    assert client.get("/ui", headers=submitter).status_code == 200
    assert client.get("/ui").status_code == 401


async def _poll(url: str, until_done: bool) -> list[dict[str, Any]]:
    """Views of one tuning as `POLLERS` clients poll it, each on its own connection, until
    it is done."""

    async def poller() -> list[dict[str, Any]]:
        seen = []
        async with httpx.AsyncClient(timeout=30) as http:
            while True:
                response = await http.get(url)
                assert response.status_code == 200, response.text
                seen.append(response.json())
                if not until_done or seen[-1]["status"] == "done":
                    return seen

    return [
        view
        for views in await asyncio.gather(*(poller() for _ in range(POLLERS)))
        for view in views
    ]


# The cache is the API's own: one database is enough.
@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_fifty_pollers_follow_a_live_tuning_to_its_end(service: Service) -> None:
    service.start_all()
    tuning_id = submit(service.api_url, TRIALS)["id"]
    views = asyncio.run(_poll(f"{service.api_url}/v1/tunings/{tuning_id}", until_done=True))
    assert views[-1]["trials_done"] == TRIALS
    assert {v["status"] for v in views} <= {"queued", "running", "done"}
    progress = [v["trials_done"] for v in views]
    assert min(progress) < TRIALS == max(progress)  # they saw it run, not only its end


def test_requests_meanwhile_get_the_stale_answer_while_it_is_read_again(
    client: TestClient,
) -> None:
    """A stand-in for the route that answers with how many times it was called, the second
    time only when the test lets it."""
    calls: list[str] = []
    release = asyncio.Event()

    async def route(scope: Any, receive: Any, send: Any) -> None:
        calls.append(scope["path"])
        if len(calls) == 2:
            await release.wait()
        body = str(len(calls)).encode()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": body})

    services = client.app.state.services  # type: ignore[attr-defined]
    fast = StatusFastPath(route, services, ttl_s=3600, generations=None)

    async def get() -> bytes:
        sent: list[Any] = []

        async def send(message: Any) -> None:
            sent.append(message)

        scope = {"type": "http", "method": "GET", "path": "/v1/tunings", "query_string": b""}
        await fast({**scope, "headers": []}, _nothing, send)
        body: bytes = sent[-1]["body"]
        return body

    async def polls() -> None:
        assert (await get(), await get()) == (b"1", b"1")  # kept
        fast.drop()  # a batch stored: stale
        reading = asyncio.create_task(get())
        while len(calls) < 2:
            await asyncio.sleep(0)
        assert await get() == b"1"  # meanwhile, the stale answer
        release.set()
        assert (await reading, await get()) == (b"2", b"2")
        fast.forget()  # a write through this API: nothing stale is served
        assert await get() == b"3"

    asyncio.run(polls())


async def _nothing() -> dict[str, Any]:
    return {"type": "http.disconnect"}


def test_a_large_kept_answer_goes_gzipped_to_who_accepts_gzip(make_client: MakeClient) -> None:
    client = make_client(status_cache_ttl_s=3600)
    tuning_id = _tuning(client)["id"]
    _kept(client, tuning_id)
    path = f"/ui/tunings/{tuning_id}"
    first = client.get(path, headers={"accept-encoding": "identity"})
    assert first.status_code == 200 and len(first.content) >= GZIP_MIN_BYTES
    for accepted in ("gzip", "br;q=1.0, gzip;q=0.5", "*"):
        with client.stream("GET", path, headers={"accept-encoding": accepted}) as kept:
            raw = b"".join(kept.iter_raw())
        assert kept.headers["content-encoding"] == "gzip", accepted
        assert kept.headers["vary"] == "Accept-Encoding"
        assert int(kept.headers["content-length"]) == len(raw) < len(first.content) / 2
        assert gzip.decompress(raw) == first.content
    for refused in ("identity", "gzip;q=0", "deflate"):
        plain = client.get(path, headers={"accept-encoding": refused})
        assert "content-encoding" not in plain.headers, refused
        assert plain.content == first.content
    # A small answer (a tuning's JSON view) goes as it is.
    small = client.get(f"/v1/tunings/{tuning_id}", headers={"accept-encoding": "gzip"})
    assert "content-encoding" not in small.headers
