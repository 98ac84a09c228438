"""No request may make the server answer 5xx: garbage gets a 4xx with a one-line detail.

A hand-written table of the usual suspects (wrong JSON types, huge numbers, unknown targets,
malformed ids and hashes, negative paging, oversized bodies), then random JSON documents and
query strings from Hypothesis against the routes that take them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.api.conftest import LOCAL_CLIENT
from tests.api.data import signature
from tests.conftest import DATABASES, empty_database
from tests.service.redis_server import RedisServer, redis_server_binary
from tunehub.server.app import create_app
from tunehub.server.settings import Settings

KEY = "ab" * 32
SIG = signature()


def _with(**changes: Any) -> dict[str, Any]:
    return {"task": SIG, "target": "cpu", "trials": 2, **changes}


def _task(**changes: Any) -> dict[str, Any]:
    return _with(task={**SIG, **changes})


BAD_JSON_BODIES: list[Any] = [
    None,
    [],
    "a string",
    42,
    {},
    _with(trials="2"),
    _with(trials=True),
    _with(trials=2.5),
    _with(trials=0),
    _with(trials=-1),
    _with(trials=10**100),
    _with(trials=1e308),
    _with(target="gpu"),
    _with(target="cuda:sm_9000x"),
    _with(target="cpu:pentium"),
    _with(target={"kind": "tpu"}),
    _with(target={"kind": "cuda", "isa": "x86_64"}),
    _with(target=["cpu"]),
    _with(target=None),
    _with(symbols={"M": "64"}),
    _with(symbols={"M": 10**40}),
    _with(symbols=[1, 2]),
    _with(symbols={f"S{i}": 1 for i in range(100)}),
    _with(strategy=7),
    _with(extra_field=1),
    _with(task="matmul"),
    _with(task=None),
    _task(version=3),
    _task(inputs=[]),
    _task(inputs=[{"name": "A", "shape": [10**30, 10**30], "dtype": "float32"}]),
    _task(inputs=[{"name": "A", "shape": [-1], "dtype": "float32"}]),
    _task(inputs=[{"name": "A", "shape": [4], "dtype": "float128"}]),
    _task(symbols={"M": {"min": 1, "max": 10**30}}),
    _task(symbols={"M": {"min": 5, "max": 1}}),
    _task(computes=[{**SIG["computes"][0], "expr": "A[i, k] ** " * 500 + "1"}]),
    _task(computes=[{**SIG["computes"][0], "expr": "(" * 2000 + "1" + ")" * 2000}]),
    _task(computes=[{**SIG["computes"][0], "expr": "__import__('os').system('true')"}]),
    _task(outputs=["nope"]),
    _task(name=""),
]


def _group(task: Any, **changes: Any) -> dict[str, Any]:
    """A tuning group whose second task is `task`."""
    return {"tasks": [{"task": SIG}, task], "target": "cpu", "trials": 2, **changes}


BAD_GROUP_BODIES: list[Any] = [
    *(
        _group({"task": body["task"]})
        for body in BAD_JSON_BODIES
        if isinstance(body, dict) and body.get("task", SIG) is not SIG
    ),
    *(_group({"task": SIG, "weight": weight}) for weight in (0, -1, 10**7, "2", None)),
    _group({"task": SIG, "symbols": {"M": "64"}}),
    _group({"task": SIG, "symbols": [1]}),
    _group({"task": SIG, "extra_field": 1}),
    _group({"task": SIG}),  # the same task twice
    _group(None),
    _group([]),
    _group("matmul"),
    _group({"task": SIG, "symbols": {"N": 1}}, trials=10**100),
    _group({"task": SIG, "symbols": {"N": 1}}, target="gpu"),
    _group({"task": SIG, "symbols": {"N": 1}}, strategy=["model"]),
    {"tasks": None, "target": "cpu", "trials": 2},
    {"tasks": {"task": SIG}, "target": "cpu", "trials": 2},
    {"tasks": [{"task": SIG}] * 1000, "target": "cpu", "trials": 2},
]

RAW_BODIES: list[bytes] = [
    b"",
    b"{",
    b"not json",
    b"\xff\xfe\x00garbage",
    b"[" * 100_000 + b"]" * 100_000,
    b'{"trials": 1' + b"0" * 5000 + b"}",
    b'{"task": NaN, "target": Infinity, "trials": -Infinity}',
]

BAD_GETS: list[tuple[str, dict[str, Any]]] = [
    ("/v1/tunings/0", {}),
    ("/v1/tunings/-1", {}),
    ("/v1/tunings/abc", {}),
    ("/v1/tunings/1.5", {}),
    (f"/v1/tunings/{10**30}", {}),
    ("/v1/tunings", {"limit": 0}),
    ("/v1/tunings", {"limit": -5}),
    ("/v1/tunings", {"limit": 10**9}),
    ("/v1/tunings", {"offset": -1}),
    ("/v1/tunings", {"offset": 10**30}),
    ("/v1/tunings", {"limit": "many"}),
    ("/v1/tunings", {"status": "sleeping"}),
    ("/v1/tunings", {"workload_key": "zz"}),
    (f"/v1/workloads/{KEY}/best", {}),
    (f"/v1/workloads/{KEY}/best", {"target": "gpu"}),
    (f"/v1/workloads/{KEY}/best", {"target": "cpu:" + "x" * 1000}),
    (f"/v1/workloads/{KEY}/best", {"target": "cpu", "symbol": "M"}),
    (f"/v1/workloads/{KEY}/best", {"target": "cpu", "symbol": "M=²"}),
    (f"/v1/workloads/{KEY}/best", {"target": "cpu", "symbol": "M=" + "9" * 40}),
    (f"/v1/workloads/{KEY}/best", {"target": "cpu", "symbol": ["M=1"] * 20}),
    ("/v1/workloads/not-a-key/best", {"target": "cpu"}),
    (f"/v1/workloads/{KEY}/records", {"status": "great"}),
    (f"/v1/workloads/{KEY}/records", {"offset": -3}),
    (f"/v1/workloads/{KEY}/records", {"target": ":"}),
    (f"/v1/workloads/{KEY}/dispatch", {}),
    (f"/v1/workloads/{KEY}/dispatch", {"target": "gpu"}),
    ("/v1/workloads/not-a-key/dispatch", {"target": "cpu"}),
    ("/v1/tuning-groups/0", {}),
    ("/v1/tuning-groups/abc", {}),
    (f"/v1/tuning-groups/{10**30}", {}),
    ("/v1/tuning-groups", {"limit": 0}),
    ("/v1/tuning-groups", {"offset": -1}),
    ("/v1/tuning-groups", {"status": "sleeping"}),
    ("/v1/artifacts/nothex", {}),
    ("/v1/artifacts/" + "g" * 64, {}),
    ("/v1/artifacts/" + "a" * 10_000, {}),
    ("/v1/artifacts/%00", {}),
    ("/v1/nothing", {}),
    ("/" + "x" * 5000, {}),
]


def _assert_client_error(response: Any, what: object) -> None:
    assert 400 <= response.status_code < 500, (what, response.status_code, response.text)
    detail = response.json()["detail"]
    assert isinstance(detail, str) and detail and "\n" not in detail, (what, detail)


@pytest.fixture(scope="module", params=DATABASES)
def garbage_client(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TestClient]:
    """One server for the whole module, per database: garbage is refused before anything is
    stored, so the tests cannot disturb each other, and a server per test (a redis-server, a
    database, migrations) cost ten times the requests."""
    if redis_server_binary() is None:
        pytest.skip("redis-server is not on PATH")
    folder = tmp_path_factory.mktemp("garbage")
    with (
        contextmanager(empty_database)(request.param, folder) as database_url,
        RedisServer(folder / "redis") as redis,
    ):
        settings = Settings(
            home=folder / "home",
            database_url=database_url,
            redis_url=redis.url,
            max_body_bytes=64 * 1024,
        )
        app = create_app(settings)
        with TestClient(app, client=LOCAL_CLIENT, raise_server_exceptions=False) as client:
            yield client


@pytest.mark.parametrize("body", BAD_JSON_BODIES, ids=range(len(BAD_JSON_BODIES)))
def test_bad_json_bodies(garbage_client: TestClient, body: Any) -> None:
    for path in ("/v1/tunings", "/v1/workloads/best"):
        _assert_client_error(garbage_client.post(path, json=body), (path, body))


@pytest.mark.parametrize("body", BAD_GROUP_BODIES, ids=range(len(BAD_GROUP_BODIES)))
def test_bad_group_bodies(garbage_client: TestClient, body: Any) -> None:
    response = garbage_client.post("/v1/tuning-groups", json=body)
    _assert_client_error(response, body)


@pytest.mark.parametrize("raw", RAW_BODIES, ids=range(len(RAW_BODIES)))
def test_bad_raw_bodies(garbage_client: TestClient, raw: bytes) -> None:
    for content_type in ("application/json", "text/plain", "application/x-www-form-urlencoded"):
        headers = {"Content-Type": content_type}
        response = garbage_client.post("/v1/tunings", content=raw, headers=headers)
        _assert_client_error(response, (content_type, raw[:40]))


@pytest.mark.parametrize(("path", "params"), BAD_GETS, ids=range(len(BAD_GETS)))
def test_bad_paths_and_queries(
    garbage_client: TestClient, path: str, params: dict[str, Any]
) -> None:
    _assert_client_error(garbage_client.get(path, params=params), (path, params))


def test_bodies_over_the_limit_are_413(garbage_client: TestClient) -> None:
    big = json.dumps(_task(name="x" * 100_000))
    response = garbage_client.post(
        "/v1/tunings", content=big, headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 413
    assert response.json() == {"detail": "the request body is over the limit of 65536 bytes"}

    def chunks() -> Any:  # no Content-Length: counted while it streams
        for _ in range(100):
            yield b" " * 1024

    streamed = garbage_client.post("/v1/tunings", content=chunks())
    assert streamed.status_code == 413


def test_wrong_methods_are_405(garbage_client: TestClient) -> None:
    _assert_client_error(garbage_client.delete("/v1/tunings"), "DELETE /v1/tunings")
    _assert_client_error(garbage_client.put(f"/v1/workloads/{KEY}/best"), "PUT best")
    _assert_client_error(garbage_client.get("/v1/tunings/1/cancel"), "GET cancel")


JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)
REQUESTISH = st.fixed_dictionaries(
    {},
    optional={
        "task": JSON | st.just(SIG),
        "target": JSON,
        "trials": JSON,
        "symbols": JSON,
        "strategy": JSON,
    },
)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(body=REQUESTISH | JSON)
def test_random_bodies_never_5xx(garbage_client: TestClient, body: Any) -> None:
    for path in ("/v1/tunings", "/v1/workloads/best"):
        response = garbage_client.post(path, json=body)
        assert response.status_code < 500, (path, body, response.text)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    # Any printable text (httpx itself refuses control characters in a URL).
    segment=st.text(st.characters(exclude_categories=("Cc", "Cs")), min_size=1, max_size=70).filter(
        lambda t: "/" not in t and t not in (".", "..")
    ),
    params=st.dictionaries(
        st.sampled_from(["limit", "offset", "status", "target", "symbol", "workload_key"]),
        st.text(max_size=30),
        max_size=4,
    ),
)
def test_random_paths_and_queries_never_5xx(
    garbage_client: TestClient, segment: str, params: dict[str, str]
) -> None:
    for template in (
        "/v1/tunings/{}",
        "/v1/workloads/{}/best",
        "/v1/workloads/{}/records",
        "/v1/artifacts/{}",
        "/v1/artifacts/{}/meta",
        "/v1/tunings",
    ):
        path = template.format(segment)
        response = garbage_client.get(path, params=params)
        assert response.status_code < 500, (path, params, response.text)
