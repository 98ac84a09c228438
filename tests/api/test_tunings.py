"""`/v1/tunings`: submit (queue, join, answer from the database), follow, list, cancel."""

from __future__ import annotations

from fastapi.testclient import TestClient

from tests.api.conftest import MakeClient
from tests.api.data import add_record, key_of, sessions, signature
from tests.service.workers import Fleet
from tunehub.schemas.api import Submission, TuningView
from tunehub.schemas.record import RecordStatus
from tunehub.server.db.session import session_scope
from tunehub.server.db.tunings import update_tuning
from tunehub.worker.device import cpu_isa


def _submit(client: TestClient, **body: object) -> Submission:
    request = {"task": signature(), "target": "cpu", "trials": 4, **body}
    response = client.post("/v1/tunings", json=request)
    assert response.status_code in (200, 202), response.text
    return Submission.model_validate(response.json())


def test_a_submission_is_queued_for_the_tuner(client: TestClient) -> None:
    response = client.post(
        "/v1/tunings", json={"task": signature(), "target": "cpu:x86_64-avx2", "trials": 4}
    )
    assert response.status_code == 202
    submitted = Submission.model_validate(response.json())
    assert submitted.outcome == "created"
    assert submitted.workload_key == key_of(signature())
    assert (submitted.status, submitted.trials_done, submitted.trials_total) == ("queued", 0, 4)
    assert submitted.target == "cpu:x86_64-avx2"
    # The committed row is the tuners' queue: nothing else to find in Redis.


def test_an_incomplete_target_stays_incomplete_without_living_workers(client: TestClient) -> None:
    submitted = _submit(client, target={"kind": "cpu"})
    assert submitted.target == "cpu"  # the tuner completes it when it starts


def test_an_incomplete_target_is_completed_from_the_living_workers(
    client: TestClient, redis_url: str, fleet: Fleet
) -> None:
    fleet.start(redis_url, 1)
    submitted = _submit(client, target="cpu")
    assert submitted.target == f"cpu:{cpu_isa()}"


def test_the_same_request_joins_the_active_tuning(client: TestClient) -> None:
    first = _submit(client, symbols={})
    # Names differ, the workload does not; `trials` does not matter for joining.
    renamed = signature()
    renamed["name"] = "another_name"
    second = _submit(client, task=renamed, trials=9)
    assert second.outcome == "joined"
    assert second.id == first.id
    other_target = _submit(client, target="cpu:x86_64")
    assert other_target.outcome == "created"
    assert other_target.id != first.id


def test_a_workload_tuned_deep_enough_is_answered_from_the_database(client: TestClient) -> None:
    sig = signature()
    best = add_record(client, sig, target="cpu:x86_64-avx2", latency_s=2e-3)
    add_record(
        client, sig, target="cpu:x86_64-avx2", latency_s=None, status=RecordStatus.WRONG_ANSWER
    )
    add_record(client, sig, target="cpu:x86_64-avx2", latency_s=5e-3)
    response = client.post(
        "/v1/tunings", json={"task": sig, "target": "cpu:x86_64-avx2", "trials": 3}
    )
    assert response.status_code == 200
    cached = Submission.model_validate(response.json())
    assert (cached.outcome, cached.status, cached.trials_done) == ("cached", "done", 0)
    assert cached.best is not None and cached.best.id == best.id
    # One more trial than measured: a real tuning.
    deeper = client.post(
        "/v1/tunings", json={"task": sig, "target": "cpu:x86_64-avx2", "trials": 4}
    )
    assert deeper.status_code == 202
    assert deeper.json()["outcome"] == "created"


def test_get_follows_a_tuning_with_its_best_so_far(client: TestClient) -> None:
    submitted = _submit(client, target="cpu:x86_64-avx2")
    record = add_record(client, signature(), target="cpu:x86_64-avx2")
    with session_scope(sessions(client)) as s:
        update_tuning(s, submitted.id, trials_done=1, best_record_id=record.id)
    view = TuningView.model_validate(client.get(f"/v1/tunings/{submitted.id}").json())
    assert (view.trials_done, view.trials_total) == (1, 4)
    assert view.best is not None
    assert view.best.id == record.id and view.best.artifact_sha256 is None
    assert client.get("/v1/tunings/999").status_code == 404
    assert client.get("/v1/tunings/999").json() == {"detail": "no tuning 999"}


def test_list_pages_and_filters(client: TestClient) -> None:
    ids = [
        _submit(client, target=target).id
        for target in ("cpu:x86_64", "cpu:x86_64-avx2", "cpu:x86_64-avx512", "cpu:generic")
    ]
    client.post(f"/v1/tunings/{ids[0]}/cancel")
    first = client.get("/v1/tunings", params={"limit": 3}).json()
    assert [t["id"] for t in first["items"]] == ids[::-1][:3]
    assert first["next_offset"] == 3
    rest = client.get("/v1/tunings", params={"limit": 3, "offset": 3}).json()
    assert [t["id"] for t in rest["items"]] == [ids[0]]
    assert rest["next_offset"] is None
    cancelled = client.get("/v1/tunings", params={"status": "cancelled"}).json()
    assert [t["id"] for t in cancelled["items"]] == [ids[0]]
    by_workload = client.get("/v1/tunings", params={"workload_key": key_of(signature())}).json()
    assert len(by_workload["items"]) == 4
    other = client.get("/v1/tunings", params={"workload_key": "0" * 64}).json()
    assert other["items"] == []


def test_cancel_ends_an_active_tuning_once(client: TestClient) -> None:
    submitted = _submit(client)
    response = client.post(f"/v1/tunings/{submitted.id}/cancel")
    assert response.status_code == 200
    assert response.json()["status"] == "cancelled"
    again = client.post(f"/v1/tunings/{submitted.id}/cancel")
    assert again.status_code == 409
    assert again.json() == {"detail": f"tuning {submitted.id} has already ended (cancelled)"}
    # A cancelled tuning is not joined: the next request queues a new one.
    assert _submit(client).outcome == "created"


def test_trials_over_the_servers_cap_are_refused(make_client: MakeClient) -> None:
    client = make_client(max_trials=10)
    response = client.post("/v1/tunings", json={"task": signature(), "target": "cpu", "trials": 11})
    assert response.status_code == 422
    assert response.json() == {"detail": "trials: 11 is over this server's limit of 10"}


def test_invalid_signatures_and_symbols_are_422_with_one_line(client: TestClient) -> None:
    bad = signature()
    bad["computes"][0]["expr"] = "A[i, k] * Q[k, j]"
    response = client.post("/v1/tunings", json={"task": bad, "target": "cpu", "trials": 4})
    assert response.status_code == 422
    detail = response.json()["detail"]
    assert "Q" in detail and "\n" not in detail
    symbolic = signature("int4_matmul")
    response = client.post(
        "/v1/tunings",
        json={"task": symbolic, "target": "cpu", "trials": 4, "symbols": {"Z": 3}},
    )
    assert response.status_code == 422
    assert response.json()["detail"].startswith("symbols: unknown symbol Z")
    response = client.post(
        "/v1/tunings",
        json={"task": signature(), "target": "cpu", "trials": 4, "strategy": "magic"},
    )
    assert response.status_code == 422
    assert response.json()["detail"].startswith("strategy: unknown strategy 'magic'")


def test_without_redis_only_answers_from_the_database(make_client: MakeClient) -> None:
    client = make_client(redis_url=None)
    sig = signature()
    response = client.post("/v1/tunings", json={"task": sig, "target": "cpu", "trials": 1})
    assert response.status_code == 503
    assert "no Redis" in response.json()["detail"]
    add_record(client, sig)
    response = client.post("/v1/tunings", json={"task": sig, "target": "cpu", "trials": 1})
    assert response.status_code == 200
    assert response.json()["outcome"] == "cached"


def test_a_time_limit_is_kept_and_checked(client: TestClient) -> None:
    submitted = _submit(client, time_limit_s=90)
    assert (submitted.time_limit_s, submitted.stop_reason) == (90, None)
    assert client.get(f"/v1/tunings/{submitted.id}").json()["time_limit_s"] == 90
    for bad in (0, -1, 8 * 24 * 3600, "soon"):
        body = {"task": signature(), "target": "cpu", "trials": 4, "time_limit_s": bad}
        response = client.post("/v1/tunings", json=body)
        assert response.status_code == 422, bad
        assert "time_limit_s" in response.json()["detail"]
