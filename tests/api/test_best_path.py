"""Best-kernel lookups served from cached response bytes (`server.api.best_path`): the same
bytes as the route's own rendering, on hits and misses, and a new best followed by every
API process sharing the Redis generation counters."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from pydantic import TypeAdapter
from redis import Redis

from tests.api.api_process import ApiProcess, api_env, tunehub_api
from tests.api.conftest import MakeClient
from tests.api.data import add_record, key_of, make_token, sessions, signature
from tunehub.compiler.space.space import Space
from tunehub.schemas.api import BestView, Scope
from tunehub.schemas.record import RecordStatus
from tunehub.server.db import records
from tunehub.server.db.models import Record
from tunehub.server.db.session import make_engine, migrate, session_factory, session_scope
from tunehub.server.db.workloads import upsert_workload
from tunehub.server.generations import BestGenerations

TARGET = "cpu:x86_64-avx2"
LONG_TTL = "3600"
# How long a process may take to follow a bump (a message, delivered at once on a quiet
# machine; this one is shared).
FOLLOW_S = 10.0


def rendered(client: TestClient, record: Record) -> bytes:
    """What FastAPI itself sends for a route returning this record's `BestView` (asked for
    no device: no fallback)."""
    with session_scope(sessions(client)) as s:
        row = s.get(Record, record.id)
        return TypeAdapter(BestView).dump_json(BestView.model_validate(row), by_alias=True)


def test_hits_and_misses_send_the_routes_own_bytes(make_client: MakeClient) -> None:
    client = make_client(best_cache_ttl_s=3600)
    sig = signature("int4_matmul")  # symbolic: the symbols' variants too
    key = key_of(sig)
    at_64 = add_record(client, sig, symbols={"M": 64}, latency_s=5e-3, artifact=b"k64")
    at_128 = add_record(client, sig, symbols={"M": 128}, latency_s=1e-3, artifact=b"k128")
    path = f"/v1/workloads/{key}/best"
    asks: list[tuple[dict[str, Any], Record]] = [
        ({"target": TARGET}, at_128),
        ({"target": TARGET, "symbol": "M=64"}, at_64),
        ({"target": "cpu", "symbol": ["M=64"]}, at_64),
    ]
    lookup = client.app.state.services.best  # type: ignore[attr-defined]
    for params, record in asks:
        miss = client.get(path, params=params)
        query = miss.request.url.query
        # The fast path has the answer now, as the route rendered it...
        assert client.portal.call(lookup.hit, key, query) == miss.content  # type: ignore[union-attr]
        hit = client.get(path, params=params)
        for response in (miss, hit):
            assert response.status_code == 200
            assert response.headers["content-type"] == "application/json"
            assert response.content == rendered(client, record)
    body = {"task": sig, "target": TARGET, "symbols": {"M": 64}}
    for _ in range(2):
        by_signature = client.post("/v1/workloads/best", json=body)
        assert by_signature.content == rendered(client, at_64)


def test_refusals_and_errors_are_never_served_from_the_cache(make_client: MakeClient) -> None:
    client = make_client(best_cache_ttl_s=3600, auth="token")
    sig = signature()
    key = key_of(sig)
    add_record(client, sig)
    reader = {"Authorization": f"Bearer {make_token(sessions(client), Scope.READ)}"}
    path = f"/v1/workloads/{key}/best"
    params = {"target": TARGET}
    assert client.get(path, params=params, headers=reader).status_code == 200
    assert client.get(path, params=params, headers=reader).status_code == 200  # cached
    assert client.get(path, params=params).status_code == 401
    wrong = {"Authorization": "Bearer not-a-token"}
    assert client.get(path, params=params, headers=wrong).status_code == 401
    assert client.get(path, params={"target": "gpu"}, headers=reader).status_code == 422
    assert client.get(path.replace(key, "f" * 64), params=params, headers=reader).status_code == 404
    # A loopback check in open mode, too: another peer is refused however hot the cache is.
    open_client = make_client(best_cache_ttl_s=3600)
    assert open_client.get(path, params=params).status_code == 200
    remote = make_client(best_cache_ttl_s=3600, client=("192.0.2.7", 5000))
    assert remote.get(path, params=params).status_code == 403


def _add_behind_the_tuners_back(database_url: str, sig: dict[str, Any], latency_s: float) -> int:
    """A verified record stored without bumping its workload's generation."""
    engine = make_engine(database_url)
    try:
        with session_scope(session_factory(engine)) as s:
            key = key_of(sig)
            upsert_workload(s, key=key, name=sig["name"], signature=sig)
            return records.add_record(
                s,
                records.NewRecord(
                    workload_key=key,
                    target=TARGET,
                    symbols={},
                    tuning_id=None,
                    config={"latency": latency_s},
                    config_key=Space.key({"latency": latency_s}),
                    features=[],
                    feature_version=1,
                    status=RecordStatus.OK,
                    latency_s=latency_s,
                    latencies_s=[latency_s],
                    build_time_s=None,
                    max_error=0.0,
                    error_log=None,
                    machine={},
                    artifact_sha256=None,
                ),
            ).id
    finally:
        engine.dispose()


def _best_ids(url: str, key: str, times: int) -> set[int]:
    """The ids answered to `times` lookups, each on a connection of its own (so that every
    worker process of a server gets some)."""
    ids = set()
    for _ in range(times):
        with httpx.Client(base_url=url) as http:
            response = http.get(f"/v1/workloads/{key}/best", params={"target": TARGET})
            assert response.status_code == 200, response.text
            ids.add(response.json()["id"])
    return ids


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_new_best_is_served_by_every_api_process(
    tmp_path: Path, database_url: str, redis_url: str, workers: str
) -> None:
    migrate(database_url)
    env = api_env(tmp_path / "home", database_url, redis_url, best_cache_ttl_s=LONG_TTL)
    sig = signature()
    key = key_of(sig)
    slow = _add_behind_the_tuners_back(database_url, sig, 1e-2)
    ports = [ApiProcess.free_port(), ApiProcess.free_port()]
    apis = [
        ApiProcess(tunehub_api(port, "--workers", workers), env, tmp_path / f"api{i}.log", port)
        for i, port in enumerate(ports)
    ]
    try:
        for api in apis:
            api.start()
        for api in apis:
            assert _best_ids(api.url, key, 10) == {slow}
        # Stored without a bump: every process still answers from its cache (with uvicorn's
        # workers, which of them took the connections above is the kernel's choice)...
        faster = _add_behind_the_tuners_back(database_url, sig, 1e-3)
        if workers == "1":
            for api in apis:
                assert _best_ids(api.url, key, 10) == {slow}
        # ...until the generation moves, as the tuner moves it after each batch: then every
        # process follows (as soon as Redis delivers the bump's message to it).
        with Redis.from_url(redis_url) as redis:
            BestGenerations(redis).bump(key)
        for api in apis:
            deadline = time.monotonic() + FOLLOW_S
            while _best_ids(api.url, key, 1) != {faster} and time.monotonic() < deadline:
                time.sleep(0.05)
            assert _best_ids(api.url, key, 10) == {faster}
    finally:
        for api in apis:
            api.stop()


def test_an_answer_past_its_ttl_is_served_while_it_is_read_again(
    make_client: MakeClient, database_url: str
) -> None:
    """A TTL ending under load costs one lookup, not every request's trip through the route:
    the old answer is served meanwhile, and the new one follows."""
    client = make_client(best_cache_ttl_s=0.2)
    sig = signature()
    key = key_of(sig)
    path, params = f"/v1/workloads/{key}/best", {"target": TARGET}
    slow = add_record(client, sig, latency_s=1e-2)
    assert client.get(path, params=params).json()["id"] == slow.id
    faster = _add_behind_the_tuners_back(database_url, sig, 1e-3)  # no bump: only the TTL
    time.sleep(0.3)
    seen = []
    deadline = time.monotonic() + 30
    while faster not in seen and time.monotonic() < deadline:
        response = client.get(path, params=params)
        assert response.status_code == 200
        seen.append(response.json()["id"])
    assert seen[-1] == faster
    assert set(seen) <= {slow.id, faster}
