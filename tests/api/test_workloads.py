"""`/v1/workloads`: best kernels by key and by signature, and paged, filtered records."""

from __future__ import annotations

from fastapi.testclient import TestClient

from tests.api.conftest import MakeClient
from tests.api.data import add_record, key_of, signature
from tunehub.schemas.api import RecordView
from tunehub.schemas.record import RecordStatus


def test_best_is_the_fastest_verified_record_with_its_artifact(client: TestClient) -> None:
    sig = signature()
    key = key_of(sig)
    add_record(client, sig, latency_s=3e-3, artifact=b"slow")
    # Faster, but wrong: never the best.
    add_record(client, sig, latency_s=1e-4, status=RecordStatus.WRONG_ANSWER)
    fast = add_record(client, sig, latency_s=2e-3, artifact=b"fast")
    add_record(client, sig, target="cpu:x86_64", latency_s=1e-3, artifact=b"other isa")
    response = client.get(f"/v1/workloads/{key}/best", params={"target": "cpu:x86_64-avx2"})
    assert response.status_code == 200
    best = RecordView.model_validate(response.json())
    assert best.id == fast.id
    assert best.status == "ok" and best.latency_s == 2e-3
    assert best.artifact_sha256 == fast.artifact_sha256 is not None
    # An incomplete target means any ISA of its kind.
    anywhere = client.get(f"/v1/workloads/{key}/best", params={"target": "cpu"}).json()
    assert anywhere["target"] == "cpu:x86_64"


def test_best_by_signature_finds_the_same_record(client: TestClient) -> None:
    sig = signature()
    record = add_record(client, sig)
    renamed = {**sig, "name": "renamed"}  # the same workload under another name
    response = client.post(
        "/v1/workloads/best",
        json={"task": renamed, "target": {"kind": "cpu", "isa": "x86_64-avx2"}},
    )
    assert response.status_code == 200
    assert response.json()["id"] == record.id


def test_best_without_a_kernel_says_why(client: TestClient) -> None:
    sig = signature()
    key = key_of(sig)
    unknown = client.get(f"/v1/workloads/{key}/best", params={"target": "cpu"})
    assert unknown.status_code == 404
    assert unknown.json() == {"detail": f"no workload {key}"}
    add_record(client, sig, status=RecordStatus.COMPILE_ERROR, latency_s=None)
    failed_only = client.get(f"/v1/workloads/{key}/best", params={"target": "cuda:sm_90"})
    assert failed_only.status_code == 404
    assert failed_only.json() == {
        "detail": f"no verified kernel of workload {key} for cuda:sm_90 yet"
    }
    by_signature = client.post("/v1/workloads/best", json={"task": sig, "target": "cpu"})
    assert by_signature.status_code == 404


def test_best_follows_the_symbols_rule_of_tuning_requests(client: TestClient) -> None:
    sig = signature("int4_matmul")  # symbolic: M in [1, 4096]
    key = key_of(sig)
    # Symbols left out are tuned at 64: a record for M=64 answers `symbols={}` and `M=64`.
    at_64 = add_record(client, sig, symbols={"M": 64}, latency_s=5e-3)
    at_128 = add_record(client, sig, symbols={"M": 128}, latency_s=1e-3)
    query = {"target": "cpu:x86_64-avx2"}
    assert client.get(f"/v1/workloads/{key}/best", params=query).json()["id"] == at_128.id
    given = client.get(f"/v1/workloads/{key}/best", params={**query, "symbol": "M=64"})
    assert given.json()["id"] == at_64.id
    body = {"task": sig, "target": "cpu:x86_64-avx2", "symbols": {}}
    assert client.post("/v1/workloads/best", json=body).json()["id"] == at_64.id
    out_of_range = client.get(f"/v1/workloads/{key}/best", params={**query, "symbol": "M=0"})
    assert out_of_range.status_code == 422
    assert out_of_range.json()["detail"].startswith("symbols: symbol M=0 is outside its range")


def test_a_found_best_is_cached_and_a_missing_one_is_not(make_client: MakeClient) -> None:
    client = make_client(best_cache_ttl_s=3600)
    sig = signature()
    key = key_of(sig)
    url = f"/v1/workloads/{key}/best"
    params = {"target": "cpu:x86_64-avx2"}
    assert client.get(url, params=params).status_code == 404
    first = add_record(client, sig, latency_s=2e-3)
    assert client.get(url, params=params).json()["id"] == first.id  # the miss was not kept
    add_record(client, sig, latency_s=1e-3)
    assert client.get(url, params=params).json()["id"] == first.id  # cached
    uncached = make_client(best_cache_ttl_s=0)
    assert uncached.get(url, params=params).json()["id"] != first.id


def test_records_are_paged_and_filtered(client: TestClient) -> None:
    sig = signature()
    key = key_of(sig)
    ids = [add_record(client, sig, latency_s=i * 1e-3 + 1e-3).id for i in range(3)]
    wrong = add_record(client, sig, status=RecordStatus.WRONG_ANSWER, latency_s=None).id
    other = add_record(client, sig, target="cpu:x86_64").id
    url = f"/v1/workloads/{key}/records"
    page = client.get(url, params={"limit": 2}).json()
    assert [r["id"] for r in page["items"]] == ids[:2]
    assert page["next_offset"] == 2
    rest = client.get(url, params={"limit": 2, "offset": 4}).json()
    assert [r["id"] for r in rest["items"]] == [other]
    assert rest["next_offset"] is None
    failed = client.get(url, params={"status": "wrong_answer"}).json()["items"]
    assert [r["id"] for r in failed] == [wrong]
    assert failed[0]["error_log"] == "it failed"
    by_isa = client.get(url, params={"target": "cpu:x86_64"}).json()["items"]
    assert [r["id"] for r in by_isa] == [other]
    by_kind = client.get(url, params={"target": "cpu"}).json()["items"]
    assert len(by_kind) == 5
    by_symbols = client.get(url, params={"symbol": "M=3"}).json()["items"]
    assert by_symbols == []
    assert client.get(f"/v1/workloads/{'0' * 64}/records").status_code == 404
