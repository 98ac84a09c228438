"""Control characters from clients are refused at the boundary with 422 and a message, alike on
SQLite and PostgreSQL (which cannot store NUL at all); a value the database refuses anyway is a
4xx, never a 500."""

from __future__ import annotations

import json
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text
from sqlalchemy.exc import DataError

from tests.api.conftest import MakeClient
from tests.api.data import key_of, signature
from tunehub.schemas.records import HeaderLine

# NUL; other C0 controls; DEL; a C1 control; a right-to-left override; a byte-order mark.
HOSTILE = ["a\x00b", "a\x01b", "a\nb", "a\x7fb", "a\x85b", "a\u202eb", "a\ufeffb"]


def _named(name: str) -> dict[str, Any]:
    task = signature()
    task["name"] = name
    return task


@pytest.mark.parametrize("name", HOSTILE)
def test_a_task_name_with_a_control_character_is_422(client: TestClient, name: str) -> None:
    response = client.post("/v1/tunings", json={"task": _named(name), "target": "cpu", "trials": 4})
    assert response.status_code == 422, response.text
    detail = response.json()["detail"]
    assert "task.name" in detail
    assert f"U+{ord(name[1]):04X} at position 1" in detail


def test_a_group_task_name_with_nul_is_422(client: TestClient) -> None:
    body = {"tasks": [{"task": _named("a\x00b")}], "target": "cpu", "trials": 4}
    response = client.post("/v1/tuning-groups", json=body)
    assert response.status_code == 422, response.text
    assert "tasks[0].task.name" in response.json()["detail"]


@pytest.mark.parametrize(("end", "status"), [("\x00", 422), ("\x1b", 422), ("\n", 202)])
def test_an_expression_may_hold_line_breaks_only(client: TestClient, end: str, status: int) -> None:
    task = signature()
    task["computes"][0]["expr"] = task["computes"][0]["expr"] + end
    response = client.post("/v1/tunings", json={"task": task, "target": "cpu", "trials": 4})
    assert response.status_code == status, response.text
    if status == 422:
        assert "computes[0].expr" in response.json()["detail"]


def test_a_device_with_nul_is_422_in_the_body_and_the_query(client: TestClient) -> None:
    body = {"task": signature(), "target": "cpu", "device": "a\x00b"}
    posted = client.post("/v1/workloads/best", json=body)
    assert posted.status_code == 422, posted.text
    assert "device" in posted.json()["detail"]
    key = key_of(signature())
    queried = client.get(f"/v1/workloads/{key}/best?target=cpu&device=a%00b")
    assert queried.status_code == 422, queried.text
    assert "device" in queried.json()["detail"]
    # The connection still serves the next request.
    assert client.get("/healthz").status_code == 200


def test_a_symbol_name_with_a_control_character_is_422(client: TestClient) -> None:
    body = {"task": signature(), "target": "cpu", "trials": 4, "symbols": {"M\x00": 4}}
    response = client.post("/v1/tunings", json=body)
    assert response.status_code == 422, response.text


def test_an_imported_workload_with_nul_in_its_signature_is_422(client: TestClient) -> None:
    task = signature()
    task["x\x00"] = 1
    lines = [
        HeaderLine().model_dump_json(),
        json.dumps(
            {"type": "workload", "key": key_of(signature()), "name": "a", "signature": task}
        ),
    ]
    response = client.post(
        "/v1/records", content="\n".join(lines), headers={"Content-Type": "application/x-ndjson"}
    )
    assert response.status_code == 422, response.text
    assert "U+0000" in response.json()["detail"]


def test_a_value_the_database_refuses_is_422_not_500(make_client: MakeClient) -> None:
    client = make_client()

    @client.app.get("/refused")  # type: ignore[attr-defined]
    def refused() -> None:
        engine = get_services_of(client).engine
        with engine.connect() as connection:
            if engine.dialect.name == "postgresql":  # the driver's own DataError
                connection.execute(text("SELECT CAST(:v AS text)"), {"v": "a\x00b"})
            raise DataError("SELECT", {}, ValueError("not storable"))

    response = client.get("/refused")
    assert response.status_code == 422, response.text
    assert "cannot store" in response.json()["detail"]
    assert client.get("/healthz").status_code == 200


def get_services_of(client: TestClient) -> Any:
    return client.app.state.services  # type: ignore[attr-defined]
