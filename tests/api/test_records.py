"""`POST /v1/records` (an admin's import of a records file), `GET /v1/workloads?prefix=`, and
`?device=` on the best-kernel and dispatch lookups."""

from __future__ import annotations

from pathlib import Path

from tests.api.conftest import MakeClient
from tests.api.data import add_record, key_of, make_token, sessions, signature
from tunehub.compiler.space.space import Space
from tunehub.schemas.api import Scope
from tunehub.schemas.record import RecordStatus
from tunehub.server.db import records
from tunehub.server.db.artifacts import put_artifact
from tunehub.server.db.session import make_engine, migrate, session_factory, session_scope
from tunehub.server.db.workloads import upsert_workload
from tunehub.server.records import export_lines

NDJSON = {"Content-Type": "application/x-ndjson"}


def _file(tmp_path: Path) -> str:
    """A records file of one workload with one kernel, exported from another database."""
    url = f"sqlite:///{tmp_path / 'other.db'}"
    migrate(url)
    engine = make_engine(url)
    try:
        with session_scope(session_factory(engine)) as s:
            sig = signature()
            upsert_workload(s, key=key_of(sig), name=sig["name"], signature=sig)
            sha256 = put_artifact(s, data=b"kernel", kind="so", source=None, meta={})
            records.add_record(
                s,
                records.NewRecord(
                    workload_key=key_of(sig),
                    target="cpu:x86_64-avx2",
                    symbols={},
                    tuning_id=None,
                    config={"a": 1},
                    config_key=Space.key({"a": 1}),
                    features=[],
                    feature_version=1,
                    status=RecordStatus.OK,
                    latency_s=2e-3,
                    latencies_s=[2e-3],
                    build_time_s=None,
                    max_error=0.0,
                    error_log=None,
                    machine={"device": "EPYC"},
                    artifact_sha256=sha256,
                ),
            )
            return "\n".join(export_lines(s)) + "\n"
    finally:
        engine.dispose()


def test_an_admin_imports_a_file_once(make_client: MakeClient, tmp_path: Path) -> None:
    body = _file(tmp_path)
    client = make_client(auth="token")
    for scope in (Scope.READ, Scope.SUBMIT):
        token = make_token(sessions(client), scope)
        headers = {**NDJSON, "Authorization": f"Bearer {token}"}
        assert client.post("/v1/records", content=body, headers=headers).status_code == 403
    admin = {**NDJSON, "Authorization": f"Bearer {make_token(sessions(client), Scope.ADMIN)}"}
    first = client.post("/v1/records", content=body, headers=admin)
    assert first.status_code == 200
    assert first.json() == {"workloads": 1, "artifacts": 1, "records": 1, "duplicates": 0}
    again = client.post("/v1/records", content=body, headers=admin).json()
    assert again == {"workloads": 0, "artifacts": 0, "records": 0, "duplicates": 1}
    key = key_of(signature())
    best = client.get(f"/v1/workloads/{key}/best", params={"target": "cpu"}, headers=admin)
    assert best.status_code == 200 and best.json()["latency_s"] == 2e-3


def test_an_invalid_file_is_a_422_naming_the_line(make_client: MakeClient, tmp_path: Path) -> None:
    client = make_client()
    body = _file(tmp_path)
    lines = body.splitlines()
    broken = "\n".join([lines[0], lines[1][:-1], *lines[2:]])
    response = client.post("/v1/records", content=broken, headers=NDJSON)
    assert response.status_code == 422
    assert response.json()["detail"].startswith("line 2: Invalid JSON")
    empty = client.post("/v1/records", content=b"", headers=NDJSON)
    assert empty.status_code == 422 and "empty records file" in empty.json()["detail"]
    assert client.get("/v1/workloads").json()["items"] == []


def test_workloads_by_key_prefix(make_client: MakeClient) -> None:
    client = make_client()
    add_record(client, signature("matmul_128"))
    add_record(client, signature("gelu"))
    key = key_of(signature("gelu"))
    found = client.get("/v1/workloads", params={"prefix": key[:12]}).json()["items"]
    assert [(w["key"], w["name"]) for w in found] == [(key, "gelu")]
    assert len(client.get("/v1/workloads").json()["items"]) == 2
    assert client.get("/v1/workloads", params={"prefix": "XYZ"}).status_code == 422


def test_best_and_dispatch_prefer_the_callers_device(make_client: MakeClient) -> None:
    client = make_client()
    sig = signature()
    add_record(client, sig, latency_s=1e-3, config={"a": 1}, machine={"device": "fast"})
    add_record(client, sig, latency_s=2e-3, config={"a": 2}, machine={"device": "mine"})
    url = f"/v1/workloads/{key_of(sig)}"
    fastest = client.get(f"{url}/best", params={"target": "cpu"}).json()
    assert (fastest["device"], fastest["fallback"]) == ("fast", None)
    mine = client.get(f"{url}/best", params={"target": "cpu", "device": "mine"}).json()
    assert (mine["device"], mine["fallback"]) == ("mine", None)
    other = client.get(f"{url}/best", params={"target": "cpu", "device": "new GPU"}).json()
    assert other["device"] == "fast"
    assert other["fallback"] == "no record measured on new GPU; best on cpu measured on fast"
    table = client.get(f"{url}/dispatch", params={"target": "cpu", "device": "mine"}).json()
    assert [(e["record"]["device"], e["fallback"]) for e in table["entries"]] == [("mine", None)]
