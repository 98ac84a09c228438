"""The dashboard's pages over HTTP: what each shows from a real database and Redis, that it
escapes what it shows, and that it asks for a token when the server has tokens."""

from __future__ import annotations

import re
from typing import Any

from fastapi.testclient import TestClient
from redis import Redis
from rq import Queue
from sqlalchemy import event

from tests.api.conftest import MakeClient
from tests.api.data import add_record, key_of, make_token, sessions, signature
from tests.service.workers import Fleet
from tunehub.compiler.program import load
from tunehub.compiler.space import space_for
from tunehub.compiler.space.space import Space
from tunehub.schemas.api import Scope
from tunehub.schemas.record import RecordStatus, TuningStatus
from tunehub.schemas.target import Target
from tunehub.server.db import records
from tunehub.server.db.session import session_scope
from tunehub.server.db.tunings import create_tuning, update_tuning
from tunehub.server.db.workloads import upsert_workload
from tunehub.server.ui import views
from tunehub.worker.device import cpu_isa

TARGET = "cpu:x86_64-avx2"
HOSTILE = "<script>alert('x')</script>"


def _tuning(client: TestClient, sig: dict[str, Any], more: int = 0) -> int:
    """A running tuning of `sig` with three trials: the naive config (1 ms), a failure whose
    log holds markup, and a faster kernel (200 us); then `more` slower ones."""
    naive = space_for(load(sig), Target.parse(TARGET)).naive()
    with session_scope(sessions(client)) as s:
        key = key_of(sig)
        upsert_workload(s, key=key, name=sig["name"], signature=sig)
        tuning = create_tuning(
            s, workload_key=key, target=TARGET, symbols={}, trials=8 + more, strategy="random"
        )
        trials: list[tuple[dict[str, Any], RecordStatus, float | None, str | None]] = [
            (dict(naive), RecordStatus.OK, 1e-3, None),
            ({"tile": 3}, RecordStatus.COMPILE_ERROR, None, f"error: {HOSTILE}\nline 2"),
            ({"tile": 8}, RecordStatus.OK, 2e-4, None),
            *(({"tile": 16 + i}, RecordStatus.OK, 5e-4, None) for i in range(more)),
        ]
        best = None
        for config, status, latency, log in trials:
            record = records.add_record(
                s,
                records.NewRecord(
                    workload_key=key,
                    target=TARGET,
                    symbols={},
                    tuning_id=tuning.id,
                    config=config,
                    config_key=Space.key(config),
                    features=[1.0],
                    feature_version=1,
                    status=status,
                    latency_s=latency,
                    latencies_s=[] if latency is None else [latency],
                    build_time_s=0.5,
                    max_error=0.0,
                    error_log=log,
                    machine={"host": "test"},
                    artifact_sha256=None,
                ),
            )
            if config == {"tile": 8}:
                best = record
        assert best is not None
        update_tuning(
            s,
            tuning.id,
            status=TuningStatus.RUNNING,
            trials_done=len(trials),
            best_record_id=best.id,
        )
        return tuning.id


def test_the_pages_show_tunings_records_and_workloads(client: TestClient) -> None:
    sig = signature()
    tuning_id = _tuning(client, sig)

    listing = client.get("/ui")
    assert listing.status_code == 200
    assert listing.headers["content-type"].startswith("text/html")
    assert f'href="/ui/tunings/{tuning_id}"' in listing.text
    for shown in ("3 / 8", "running", "200 µs", sig["name"], TARGET, 'data-live="/ui/tunings/live'):
        assert shown in listing.text, shown
    live = client.get("/ui/tunings/live")
    assert live.status_code == 200
    assert "3 / 8" in live.text and "<html" not in live.text

    page = client.get(f"/ui/tunings/{tuning_id}")
    assert page.status_code == 200
    # Both curves have a best so far at each of the three trials (the naive one came first).
    assert re.findall(r'data-points="(\d+)"', page.text) == ["3", "3"]
    assert "against wall time" in page.text
    assert "naive 1 ms" in page.text  # the baseline's line
    assert "5x faster now" in page.text
    assert "compile_error" in page.text and "tile=8" in page.text
    # The failure's log is shown, escaped.
    assert "error: &lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;" in page.text
    assert HOSTILE not in page.text
    fragment = client.get(f"/ui/tunings/{tuning_id}/live")
    assert fragment.status_code == 200
    assert "data-final" not in fragment.text  # running: the page keeps refreshing

    workloads = client.get("/ui/workloads")
    assert workloads.status_code == 200
    key = key_of(sig)
    assert f'href="/ui/workloads/{key}"' in workloads.text
    assert "200 µs" in workloads.text

    workload = client.get(f"/ui/workloads/{key}")
    assert workload.status_code == 200
    assert f"<h2>{TARGET}</h2>" in workload.text
    assert "tile=8" in workload.text  # the best kernel and its dispatch entry
    assert f'href="/ui/tunings/{tuning_id}"' in workload.text

    assert client.get("/ui/tunings/999").status_code == 404
    assert client.get("/ui/workloads/" + "0" * 64).status_code == 404
    assert client.get("/ui?offset=-1").status_code == 422
    assert client.get("/ui/static/dashboard.css").status_code == 200
    assert client.get("/ui/static/dashboard.js").status_code == 200


def test_a_finished_tuning_stops_refreshing(client: TestClient) -> None:
    tuning_id = _tuning(client, signature())
    with session_scope(sessions(client)) as s:
        update_tuning(s, tuning_id, status=TuningStatus.DONE)
    fragment = client.get(f"/ui/tunings/{tuning_id}/live")
    assert "data-final" in fragment.text


def test_empty_pages_say_how_to_start(client: TestClient) -> None:
    assert "No tunings yet" in client.get("/ui").text
    assert "No workloads yet" in client.get("/ui/workloads").text
    assert "No worker is alive" in client.get("/ui/workers").text


def test_workers_page_shows_heartbeats_and_queue_depths(
    client: TestClient, redis_url: str, fleet: Fleet
) -> None:
    (process,) = fleet.start(redis_url, 1)
    Queue("tunehub:tuner", connection=Redis.from_url(redis_url)).enqueue("builtins.len", [1])
    page = client.get("/ui/workers")
    assert page.status_code == 200
    assert process.name in page.text
    assert f"cpu:{cpu_isa()}" in page.text
    assert " ago" in page.text
    row = re.search(r"<code>tunehub:tuner</code></td><td class=\"num\">(\d+)</td>", page.text)
    assert row is not None and row[1] == "1"
    assert process.name in client.get("/ui/workers/live").text


def test_without_redis_the_workers_page_says_so(make_client: MakeClient) -> None:
    page = make_client(redis_url=None).get("/ui/workers")
    assert page.status_code == 200
    assert "has no Redis" in page.text


def test_the_workers_page_shows_the_tuners_queue(client: TestClient) -> None:
    """The tuners' queue is the database: its queued and running tunings, whether or not a
    tuner is alive to take them."""
    _tuning(client, signature("matmul_128"))
    with session_scope(sessions(client)) as s:
        create_tuning(
            s,
            workload_key=key_of(signature("matmul_128")),
            target=TARGET,
            symbols={},
            trials=4,
            strategy="random",
        )
    page = client.get("/ui/workers/live").text
    row = re.search(
        r"<code>tunings</code></td><td class=\"num\">(\d+)</td><td class=\"num\">(\d+)", page
    )
    assert row is not None and (row[1], row[2]) == ("1", "1")
    assert "none alive" in page


def test_with_tokens_the_pages_need_a_token(make_client: MakeClient) -> None:
    client = make_client(auth="token")
    secret = make_token(sessions(client), Scope.READ)
    revoked = make_token(sessions(client), Scope.READ, revoked=True)

    for path in ("/ui", "/ui/tunings/live", "/ui/workloads", "/ui/workers", "/ui/tunings/1"):
        refused = client.get(path)
        assert refused.status_code == 401, path
        assert 'action="/ui/login"' in refused.text  # the login form
    client.cookies.set("tunehub_token", revoked)
    refused = client.get("/ui")
    assert refused.status_code == 401 and "invalid or revoked" in refused.text
    client.cookies.clear()

    assert client.get("/ui/login").status_code == 200
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    bad = client.post("/ui/login", content=f"token={revoked}&next=/ui/workers", headers=form)
    assert bad.status_code == 401 and "invalid or revoked" in bad.text
    good = client.post(
        "/ui/login",
        content=f"token={secret}&next=/ui/workers",
        headers=form,
        follow_redirects=False,
    )
    assert good.status_code == 303
    assert good.headers["location"] == "/ui/workers"
    cookie = good.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/ui" in cookie
    assert client.get("/ui").status_code == 200  # the client keeps the cookie
    assert client.get("/ui/workers").status_code == 200

    # Elsewhere than the dashboard is no place to be sent after logging in.
    away = client.post(
        "/ui/login",
        content=f"token={secret}&next=https://example.com/",
        headers=form,
        follow_redirects=False,
    )
    assert away.headers["location"] == "/ui"

    client.post("/ui/logout")
    assert client.get("/ui").status_code == 401
    # A bearer header works as it does on /v1; the cookie does not open /v1.
    assert client.get("/ui", headers={"Authorization": f"Bearer {secret}"}).status_code == 200
    client.cookies.set("tunehub_token", secret)
    assert client.get("/v1/tunings").status_code == 401


def test_an_open_server_shows_the_pages_only_locally(make_client: MakeClient) -> None:
    local = make_client()
    assert local.get("/ui").status_code == 200
    assert local.get("/ui/login", follow_redirects=False).status_code == 303
    remote = make_client(client=("10.1.2.3", 4000))
    refused = remote.get("/ui")
    assert refused.status_code == 403
    assert "auth=open" in refused.json()["detail"]


def _statements(client: TestClient, path: str) -> int:
    """How many SQL statements answering `path` runs."""
    statements: list[str] = []
    engine = sessions(client).kw["bind"]

    def count(*args: Any) -> None:
        statements.append(args[2])

    event.listen(engine, "before_cursor_execute", count)
    try:
        assert client.get(path).status_code == 200
    finally:
        event.remove(engine, "before_cursor_execute", count)
    return len(statements)


def test_a_page_runs_as_many_queries_for_many_rows_as_for_few(make_client: MakeClient) -> None:
    client = make_client(status_cache_ttl_s=0)  # the route's own queries, not a kept answer
    names = ["matmul_128", "softmax", "gelu", "layernorm", "rmsnorm", "column_sum"]
    tuning_id = _tuning(client, signature(names[0]))
    add_record(client, signature(names[1]))
    few = {path: _statements(client, path) for path in ("/ui", "/ui/workloads")}
    few_records = _statements(client, f"/ui/tunings/{tuning_id}")
    for name in names[2:]:
        _tuning(client, signature(name))
        add_record(client, signature(name), target="cpu:x86_64-avx512")
    many_records = _tuning(client, signature(names[0]), more=20)
    assert {path: _statements(client, path) for path in few} == few
    assert _statements(client, f"/ui/tunings/{many_records}") == few_records


def test_a_long_tuning_shows_its_newest_records_numbered_and_every_trial_charted(
    client: TestClient,
) -> None:
    tuning_id = _tuning(client, signature(), more=views.RECORDS_SHOWN)
    page = client.get(f"/ui/tunings/{tuning_id}").text
    total = views.RECORDS_SHOWN + 3
    assert f"({total}, newest {views.RECORDS_SHOWN} shown)" in page
    trials = [int(n) for n in re.findall(r'<td class="when">(\d+) <span', page)]
    assert trials == list(range(total, 3, -1))  # newest first, the first three left out
    assert re.findall(r'data-points="(\d+)"', page) == [str(total)] * 2
    assert page.count('<circle class="sample"') == 2 * (total - 1)  # the failure has no dot
    assert re.search(r"compile_error</span> 1\b", page)
