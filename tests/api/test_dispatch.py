"""`GET /v1/workloads/{key}/dispatch`: the best kernel of every tuned symbol assignment, as a
dispatch table whose `select` picks one for any value in the symbols' ranges."""

from __future__ import annotations

from fastapi.testclient import TestClient
from sqlalchemy import event

from tests.api.data import add_record, key_of, sessions, signature
from tunehub.schemas.dispatch import DispatchTable
from tunehub.schemas.record import RecordStatus
from tunehub.schemas.target import Target
from tunehub.server.best import dispatch_table
from tunehub.server.db.session import session_scope

INT4 = signature("int4_matmul")


def _table(client: TestClient, key: str, target: str) -> DispatchTable:
    response = client.get(f"/v1/workloads/{key}/dispatch", params={"target": target})
    assert response.status_code == 200, response.text
    return DispatchTable.model_validate(response.json())


def test_a_symbolic_workload_gets_the_best_kernel_of_each_tuned_value(client: TestClient) -> None:
    small = add_record(client, INT4, symbols={"M": 8}, latency_s=2e-5)
    add_record(client, INT4, symbols={"M": 8}, latency_s=3e-5)
    add_record(client, INT4, symbols={"M": 8}, latency_s=1e-6, status=RecordStatus.WRONG_ANSWER)
    large = add_record(client, INT4, symbols={"M": 512}, latency_s=4e-4)
    add_record(client, INT4, symbols={"M": 512}, latency_s=5e-4)
    add_record(client, INT4, symbols={"M": 2048}, latency_s=None, status=RecordStatus.RUN_TIMEOUT)
    add_record(client, INT4, target="cuda:sm_90", symbols={"M": 1}, latency_s=1e-7)

    table = _table(client, key_of(INT4), "cpu")
    assert (table.workload_key, table.target) == (key_of(INT4), "cpu")
    assert {name: (r.min, r.max) for name, r in table.ranges.items()} == {"M": (1, 4096)}
    assert [(e.symbols, e.record.id) for e in table.entries] == [
        ({"M": 8}, small.id),
        ({"M": 512}, large.id),
    ]
    assert table.select({"M": 1}).record.id == small.id
    assert table.select({"M": 60}).record.id == small.id  # nearer 8 than 512 on a log scale
    assert table.select({"M": 70}).record.id == large.id
    assert table.select({"M": 4096}).record.id == large.id
    # A complete target names exactly its records.
    assert [e.symbols for e in _table(client, key_of(INT4), "cuda:sm_90").entries] == [{"M": 1}]


def test_the_table_is_one_query(client: TestClient) -> None:
    for m in (1, 8, 32, 128):
        add_record(client, INT4, symbols={"M": m}, latency_s=1e-5 * m)
    factory = sessions(client)
    statements: list[str] = []
    engine = factory.kw["bind"]
    event.listen(engine, "before_cursor_execute", lambda *args: statements.append(args[2]))
    with session_scope(factory) as s:
        table = dispatch_table(s, key_of(INT4), Target.parse("cpu"))
    assert table is not None and len(table.entries) == 4
    records = [sql for sql in statements if "FROM records" in sql]
    assert len(records) == 1, statements


def test_a_workload_without_symbols_has_one_entry(client: TestClient) -> None:
    matmul = signature()
    add_record(client, matmul, latency_s=3e-3)
    best = add_record(client, matmul, latency_s=1e-3)
    table = _table(client, key_of(matmul), "cpu:x86_64-avx2")
    assert table.ranges == {}
    assert [(e.symbols, e.record.id) for e in table.entries] == [({}, best.id)]
    assert table.select({}).record.id == best.id


def test_nothing_to_dispatch_is_404_with_the_reason(client: TestClient) -> None:
    unknown = client.get(f"/v1/workloads/{'ab' * 32}/dispatch", params={"target": "cpu"})
    assert (unknown.status_code, unknown.json()) == (404, {"detail": f"no workload {'ab' * 32}"})
    add_record(client, INT4, symbols={"M": 8}, latency_s=None, status=RecordStatus.COMPILE_ERROR)
    key = key_of(INT4)
    untuned = client.get(f"/v1/workloads/{key}/dispatch", params={"target": "cpu"})
    assert untuned.status_code == 404
    assert untuned.json() == {"detail": f"no verified kernel of workload {key} for cpu yet"}
    assert client.get(f"/v1/workloads/{key}/dispatch").status_code == 422  # target is required
    bad = client.get(f"/v1/workloads/{key}/dispatch", params={"target": "tpu"})
    assert bad.status_code == 422
