"""`/v1/workers` from the registry of real worker daemons; `/readyz` and `/metrics`."""

from __future__ import annotations

from fastapi.testclient import TestClient

from tests.api.conftest import MakeClient
from tests.api.data import add_record, signature
from tests.service.redis_server import free_port
from tests.service.workers import Fleet
from tunehub.schemas.api import WorkerView
from tunehub.worker.device import cpu_isa


def test_workers_lists_the_living_daemons(client: TestClient, redis_url: str, fleet: Fleet) -> None:
    assert client.get("/v1/workers").json() == []
    (process,) = fleet.start(redis_url, 1)
    (worker,) = [WorkerView.model_validate(w) for w in client.get("/v1/workers").json()]
    target = f"cpu:{cpu_isa()}"
    assert worker.name == process.name
    assert worker.targets == [target]
    assert worker.queues == [f"tunehub:build:{target}", f"tunehub:measure:{target}"]
    assert worker.fingerprints[target]
    assert worker.last_heartbeat >= worker.started_at
    fleet.stop_all()
    assert client.get("/v1/workers").json() == []


def test_without_redis_there_are_no_workers(make_client: MakeClient) -> None:
    assert make_client(redis_url=None).get("/v1/workers").json() == []


def test_ready_needs_the_database_and_redis(make_client: MakeClient) -> None:
    assert make_client().get("/readyz").json() == {"ready": True, "database": "ok", "redis": "ok"}
    no_redis = make_client(redis_url=None).get("/readyz")
    assert no_redis.json() == {"ready": True, "database": "ok", "redis": "disabled"}
    down = make_client(redis_url=f"redis://127.0.0.1:{free_port()}/0")
    response = down.get("/readyz")
    assert response.status_code == 503
    body = response.json()
    assert body["ready"] is False and body["database"] == "ok"
    assert body["redis"].startswith("error:")
    assert down.get("/healthz").json() == {"status": "ok"}
    # A request that needs the missing Redis is 503 too, with a reason, never a traceback.
    submit = down.post("/v1/tunings", json={"task": signature(), "target": "cpu", "trials": 1})
    assert submit.status_code == 503
    assert submit.json()["detail"].startswith("Redis is unavailable")


def test_metrics_count_requests_by_route_and_rows_by_status(client: TestClient) -> None:
    sig = signature()
    add_record(client, sig)
    client.get("/v1/tunings/1")
    client.get("/v1/tunings/2")
    client.get("/no/such/path")
    client.post("/v1/tunings", json={"task": sig, "target": "cpu", "trials": 1})
    text = client.get("/metrics").text
    lines = set(text.splitlines())
    assert (
        'tunehub_http_requests_total{method="GET",route="/v1/tunings/{tuning_id}",status="404"} 2.0'
        in lines
    )
    assert 'tunehub_http_requests_total{method="GET",route="unmatched",status="404"} 1.0' in lines
    assert (
        'tunehub_http_requests_total{method="POST",route="/v1/tunings",status="200"} 1.0' in lines
    )
    assert any(
        line.startswith(
            'tunehub_http_request_duration_seconds_count{method="GET",route="/v1/tunings/{tuning_id}"}'
        )
        for line in lines
    )
    assert 'tunehub_tunings{status="done"} 1.0' in lines  # the cached answer
    assert 'tunehub_tunings{status="queued"} 0.0' in lines
    assert 'tunehub_records{status="ok"} 1.0' in lines
    assert "tunehub_database_up 1.0" in lines
