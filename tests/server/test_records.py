"""Records files: a database exported and imported into another gives the same file, the same
best kernels and the same dispatch tables; importing again adds nothing; a file that does not
hold together stores nothing. The second database is SQLite and, when configured, PostgreSQL."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.orm import Session, sessionmaker

from tests.signatures import row_matmul
from tunehub.compiler.canonical import workload_key
from tunehub.compiler.program import load
from tunehub.compiler.space.space import Space
from tunehub.schemas.record import RecordStatus
from tunehub.schemas.records import ImportSummary
from tunehub.schemas.target import Target
from tunehub.server.best import best_for_device, best_record, dispatch_table
from tunehub.server.db.artifacts import put_artifact
from tunehub.server.db.records import NewRecord, add_record, count_records
from tunehub.server.db.session import make_engine, migrate, session_factory, session_scope
from tunehub.server.db.workloads import get_workload, resolve_workload_key, upsert_workload
from tunehub.server.errors import InvalidRequest
from tunehub.server.records import export_lines, import_records

SIGNATURE: dict[str, Any] = row_matmul("records_matmul", k=16, n=24, max_m=64)
KEY = workload_key(load(SIGNATURE))
H100_PCIE, H100_SXM = "NVIDIA H100 PCIe", "NVIDIA H100 80GB HBM3"


def _machine(device: str) -> dict[str, Any]:
    return {"device": device, "driver": "12.4", "toolkit": "nvcc 12.4", "host": "test"}


def _fill(s: Session) -> None:
    """Two devices of one arch at two symbol values, a failure, and kernels: what a shared
    database holds after two machines tuned the same workload."""
    upsert_workload(s, key=KEY, name="records_matmul", signature=SIGNATURE)
    at = datetime(2026, 11, 25, 10, 0, 0, 123456, tzinfo=UTC)
    rows = [
        (H100_PCIE, {"M": 8}, {"tile": 1}, RecordStatus.OK, 3e-6),
        (H100_PCIE, {"M": 8}, {"tile": 2}, RecordStatus.OK, 2e-6),
        (H100_SXM, {"M": 8}, {"tile": 3}, RecordStatus.OK, 1e-6),
        (H100_SXM, {"M": 64}, {"tile": 1}, RecordStatus.OK, 5e-6),
        (H100_PCIE, {"M": 64}, {"tile": 4}, RecordStatus.COMPILE_ERROR, None),
    ]
    for n, (device, symbols, config, status, latency) in enumerate(rows):
        sha256 = None
        if status is RecordStatus.OK:
            data = f"cubin {n}".encode()
            sha256 = put_artifact(
                s, data=data, kind="cubin", source=f"// kernel {n}", meta={"entry": f"k{n}"}
            )
        add_record(
            s,
            NewRecord(
                workload_key=KEY,
                target="cuda:sm_90",
                symbols=symbols,
                tuning_id=None,
                config=config,
                config_key=Space.key(config),
                features=[0.1 * n, 1.0 / 3.0],
                feature_version=3,
                status=status,
                latency_s=latency,
                latencies_s=[] if latency is None else [latency * 1.01, latency, latency * 0.99],
                build_time_s=0.25,
                max_error=None if latency is None else 1e-7,
                error_log=None if latency is not None else "nvcc: error",
                machine=_machine(device),
                artifact_sha256=sha256,
                created_at=at,
            ),
        )


@pytest.fixture
def source(tmp_path: Path) -> Iterator[sessionmaker[Session]]:
    """A SQLite database holding `_fill`'s records."""
    url = f"sqlite:///{tmp_path / 'source.db'}"
    migrate(url)
    engine = make_engine(url)
    factory = session_factory(engine)
    with session_scope(factory) as s:
        _fill(s)
    yield factory
    engine.dispose()


def _export(sessions: sessionmaker[Session], keys: list[str] | None = None) -> list[str]:
    with session_scope(sessions) as s:
        return list(export_lines(s, keys))


def _best(sessions: sessionmaker[Session], **where: Any) -> tuple[Any, ...]:
    with session_scope(sessions) as s:
        best = best_record(s, workload_key=KEY, target="cuda", **where)
        assert best is not None
        return best.config_key, best.latency_s, best.device, best.artifact_sha256


def _dispatch(sessions: sessionmaker[Session], device: str | None = None) -> list[Any]:
    with session_scope(sessions) as s:
        table = dispatch_table(s, KEY, Target.parse("cuda:sm_90"), device)
        assert table is not None
        return [
            (e.symbols, e.record.config, e.record.latency_s, e.record.device, e.fallback)
            for e in table.entries
        ]


def test_export_import_round_trips_exactly(
    source: sessionmaker[Session], sessions: sessionmaker[Session]
) -> None:
    lines = _export(source)
    assert json.loads(lines[0]) == {"type": "header", "format": "tunehub-records", "version": 1}
    assert [json.loads(line)["type"] for line in lines[1:]] == [
        "workload",
        *["artifact"] * 4,
        *["record"] * 5,
    ]
    summary = import_records(sessions, lines)
    assert summary == ImportSummary(workloads=1, artifacts=4, records=5, duplicates=0)
    assert _export(sessions) == lines
    assert _best(sessions) == _best(source)
    assert _best(sessions, symbols={"M": 64}) == _best(source, symbols={"M": 64})
    assert _dispatch(sessions) == _dispatch(source)
    assert _dispatch(sessions, H100_PCIE) == _dispatch(source, H100_PCIE)


def test_importing_twice_adds_nothing(
    source: sessionmaker[Session], sessions: sessionmaker[Session]
) -> None:
    lines = _export(source)
    import_records(sessions, lines)
    again = import_records(sessions, lines + lines[1:])  # files concatenate
    assert again == ImportSummary(workloads=0, artifacts=0, records=0, duplicates=10)
    with session_scope(sessions) as s:
        assert count_records(s) == 5


def test_export_of_one_workload_by_key(
    source: sessionmaker[Session], sessions: sessionmaker[Session]
) -> None:
    assert _export(source, [KEY]) == _export(source)
    assert len(_export(source, ["0" * 64])) == 1  # the header alone
    with session_scope(source) as s:
        assert resolve_workload_key(s, KEY[:12]) == KEY
        assert resolve_workload_key(s, KEY.upper()) == KEY
        with pytest.raises(LookupError, match="no workload has a key starting with 'g'"):
            resolve_workload_key(s, "g")
        with pytest.raises(LookupError, match="unknown workload"):
            resolve_workload_key(s, "0" * 64)
        other = row_matmul("records_other", k=8, n=8, max_m=8)
        upsert_workload(s, key=workload_key(load(other)), name="other", signature=other)
        with pytest.raises(LookupError, match=r"is ambiguous .*: give more of it"):
            resolve_workload_key(s, "")


def _tampered(lines: list[str], kind: str, **changes: Any) -> list[str]:
    """`lines` with the first line of `kind` changed."""
    out = list(lines)
    for n, line in enumerate(out):
        value = json.loads(line)
        if value["type"] == kind:
            out[n] = json.dumps({**value, **changes})
            break
    return out


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda lines: lines[1:], "line 1: not a records file"),
        (lambda lines: [lines[0].replace('"version":1', '"version":2'), *lines[1:]], "version 2"),
        (lambda lines: ["{", *lines[1:]], "line 1: Invalid JSON"),
        (
            lambda lines: _tampered(lines, "artifact", data=base64.b64encode(b"evil").decode()),
            "its bytes hash to another sha256",
        ),
        (
            lambda lines: _tampered(lines, "workload", key="ab" * 32),
            "its signature's key is",
        ),
        (
            lambda lines: [lines[0], *[line for line in lines if '"type":"record"' in line]],
            "the workload is neither in the file before it nor stored",
        ),
        (lambda lines: _tampered(lines, "record", device="other"), "its device is not the one"),
        (lambda lines: _tampered(lines, "record", target="cuda"), "complete target"),
        (lambda lines: _tampered(lines, "record", created_at="2026-11-25T10:00:00"), "timezone"),
    ],
)
def test_a_file_that_does_not_hold_together_stores_nothing(
    source: sessionmaker[Session], sessions: sessionmaker[Session], change: Any, message: str
) -> None:
    with pytest.raises(InvalidRequest, match=message):
        import_records(sessions, change(_export(source)))
    with session_scope(sessions) as s:
        assert count_records(s) == 0
        assert get_workload(s, KEY) is None


def test_lookups_prefer_the_callers_device_and_say_when_they_fall_back(
    source: sessionmaker[Session],
) -> None:
    with session_scope(source) as s:
        fastest = best_for_device(s, workload_key=KEY, target="cuda", symbols={"M": 8})
        assert fastest.record is not None and fastest.record.device == H100_SXM
        assert fastest.fallback is None
        own = best_for_device(
            s, workload_key=KEY, target="cuda", symbols={"M": 8}, device=H100_PCIE
        )
        assert own.record is not None and own.record.device == H100_PCIE
        assert own.record.latency_s == 2e-6 and own.fallback is None
        other = best_for_device(
            s, workload_key=KEY, target="cuda", symbols={"M": 64}, device=H100_PCIE
        )
        assert other.record is not None and other.record.device == H100_SXM
        assert other.fallback == (
            f"no record measured on {H100_PCIE}; best on cuda measured on {H100_SXM}"
        )
    entries = _dispatch(source, H100_PCIE)
    assert [(e[0], e[3], e[4] is None) for e in entries] == [
        ({"M": 8}, H100_PCIE, True),
        ({"M": 64}, H100_SXM, False),
    ]
    assert [e[3] for e in _dispatch(source)] == [H100_SXM, H100_SXM]
