"""The data-access layer against real databases (a SQLite file, and PostgreSQL when given)."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator
from datetime import UTC
from typing import Any

import pytest
from sqlalchemy import event, func, select, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from tunehub.compiler.space.space import Space
from tunehub.schemas.record import RecordStatus, TuningStatus
from tunehub.schemas.target import Target
from tunehub.server.best import best_record
from tunehub.server.db.artifacts import get_artifact, put_artifact
from tunehub.server.db.cost_models import add_cost_model, latest_cost_model
from tunehub.server.db.counts import count_records_by_status, count_tunings_by_status
from tunehub.server.db.groups import create_group, get_group, group_members
from tunehub.server.db.models import Artifact, Record
from tunehub.server.db.records import (
    NewRecord,
    add_record,
    count_records,
    list_records,
    measured_config_keys,
)
from tunehub.server.db.session import make_engine, migrate, session_factory, session_scope
from tunehub.server.db.sql import canonical_json
from tunehub.server.db.tunings import (
    create_tuning,
    find_active_tuning,
    get_tuning,
    list_tunings,
    move_tunings,
    update_tuning,
)
from tunehub.server.db.workloads import get_workload, list_workloads, upsert_workload
from tunehub.server.errors import Conflict
from tunehub.server.submit import cancel_group, cancel_tuning
from tunehub.server.tuner.tuner import STARTABLE

WORKLOAD = "ab" * 32
OTHER_WORKLOAD = "cd" * 32
MACHINE = {"cpu": "test", "cores": 4}


@pytest.fixture
def factory(database_url: str) -> Iterator[sessionmaker[Session]]:
    migrate(database_url)
    engine = make_engine(database_url)
    try:
        factory = session_factory(engine)
        with session_scope(factory) as s:
            upsert_workload(s, key=WORKLOAD, name="matmul", signature={"version": 1})
            upsert_workload(s, key=OTHER_WORKLOAD, name="softmax", signature={"v": 1})
        yield factory
    finally:
        engine.dispose()


def _record(s: Session, **overrides: Any) -> Record:
    fields: dict[str, Any] = {
        "workload_key": WORKLOAD,
        "target": "cpu:x86_64-avx2",
        "symbols": {},
        "tuning_id": None,
        "config": {"tile": 8, "vec": True},
        "features": [1.0, 2.0],
        "feature_version": 1,
        "status": RecordStatus.OK,
        "latency_s": 1e-3,
        "latencies_s": [1e-3, 1.1e-3],
        "build_time_s": 0.5,
        "max_error": 0.0,
        "error_log": None,
        "machine": MACHINE,
        "artifact_sha256": None,
    }
    fields.update(overrides)
    return add_record(s, NewRecord(**fields, config_key=Space.key(fields["config"])))


def test_workload_upsert_keeps_the_first_version(factory: sessionmaker[Session]) -> None:
    with session_scope(factory) as s:
        again = upsert_workload(s, key=WORKLOAD, name="renamed", signature={"x": 2})
        assert (again.name, again.signature) == ("matmul", {"version": 1})
    with session_scope(factory) as s:
        assert [w.key for w in list_workloads(s)] in (
            [WORKLOAD, OTHER_WORKLOAD],
            [OTHER_WORKLOAD, WORKLOAD],
        )
        workload = get_workload(s, WORKLOAD)
        assert workload is not None
        assert workload.created_at.tzinfo is not None
        assert get_workload(s, "0" * 64) is None


def test_tuning_lifecycle(factory: sessionmaker[Session]) -> None:
    with session_scope(factory) as s:
        tuning = create_tuning(
            s,
            workload_key=WORKLOAD,
            target=Target.parse("cuda:sm_90"),
            symbols={"N": 64, "M": 32},
            trials=100,
            strategy="evolutionary",
        )
        tuning_id = tuning.id
    with session_scope(factory) as s:
        loaded = get_tuning(s, tuning_id)
        assert loaded is not None
        assert (loaded.status, loaded.trials_done, loaded.trials_requested) == (
            TuningStatus.QUEUED,
            0,
            100,
        )
        assert loaded.target == "cuda:sm_90"
        assert loaded.symbols == {"M": 32, "N": 64}
        assert loaded.symbols_key == '{"M":32,"N":64}'
        assert loaded.started_at is None and loaded.finished_at is None
        found = find_active_tuning(
            s, workload_key=WORKLOAD, target="cuda:sm_90", symbols={"M": 32, "N": 64}
        )
        assert found is not None and found.id == tuning_id
        assert (
            find_active_tuning(
                s, workload_key=WORKLOAD, target="cuda:sm_80", symbols={"M": 32, "N": 64}
            )
            is None
        )
        assert find_active_tuning(s, workload_key=WORKLOAD, target="cuda:sm_90", symbols={}) is None

    with session_scope(factory) as s:
        running = update_tuning(s, tuning_id, status=TuningStatus.RUNNING, trials_done=10)
        assert running.started_at is not None and running.finished_at is None
        started_at = running.started_at
        record = _record(s, target="cuda:sm_90", symbols={"M": 32, "N": 64}, tuning_id=tuning_id)
        update_tuning(s, tuning_id, best_record_id=record.id, trials_done=20)

    with session_scope(factory) as s:
        done = update_tuning(s, tuning_id, status=TuningStatus.DONE)
        assert done.started_at == started_at
        assert done.finished_at is not None and done.finished_at.tzinfo == UTC
        assert done.finished_at >= started_at
        assert (done.trials_done, done.best_record_id, done.error) == (20, record.id, None)
        assert (
            find_active_tuning(
                s, workload_key=WORKLOAD, target="cuda:sm_90", symbols={"M": 32, "N": 64}
            )
            is None
        )

    with session_scope(factory) as s:
        failed = update_tuning(s, tuning_id, status=TuningStatus.FAILED, error="boom")
        assert failed.error == "boom"
        with pytest.raises(LookupError):
            update_tuning(s, 10**6, status=TuningStatus.DONE)


def test_list_tunings_filters_and_pages(factory: sessionmaker[Session]) -> None:
    with session_scope(factory) as s:
        ids = [
            create_tuning(
                s, workload_key=key, target="cpu", symbols={}, trials=8, strategy="random"
            ).id
            for key in (WORKLOAD, OTHER_WORKLOAD, WORKLOAD)
        ]
        update_tuning(s, ids[0], status=TuningStatus.RUNNING)
    with session_scope(factory) as s:
        assert [t.id for t in list_tunings(s, limit=10, offset=0)] == ids[::-1]
        assert [t.id for t in list_tunings(s, limit=1, offset=1)] == [ids[1]]
        by_workload = list_tunings(s, limit=10, offset=0, workload_key=WORKLOAD)
        assert [t.id for t in by_workload] == [ids[2], ids[0]]
        running = list_tunings(s, limit=10, offset=0, status=TuningStatus.RUNNING)
        assert [t.id for t in running] == [ids[0]]


def test_record_round_trip(factory: sessionmaker[Session]) -> None:
    config: dict[str, int | str | bool] = {"vec": True, "tile": 8, "order": "ijk"}
    with session_scope(factory) as s:
        sha = put_artifact(s, data=b"\x7fELF", kind="so", source="int f;", meta={"a": 1})
        record_id = _record(
            s,
            symbols={"M": 16},
            config=config,
            latencies_s=[2e-3, 1e-3, 3e-3],
            latency_s=2e-3,
            artifact_sha256=sha,
        ).id
    with session_scope(factory) as s:
        record = s.get(Record, record_id)
        assert record is not None
        assert record.config == config
        assert record.config_key == Space.key(config) == canonical_json(config)
        assert record.symbols == {"M": 16}
        assert record.status is RecordStatus.OK
        assert (record.latency_s, record.latencies_s) == (2e-3, [2e-3, 1e-3, 3e-3])
        assert record.features == [1.0, 2.0]
        assert record.machine == MACHINE
        assert record.artifact_sha256 == sha
        assert record.created_at.tzinfo == UTC
        # Stored as the enum's value, readable in plain SQL.
        assert s.scalar(text("SELECT status FROM records")) == "ok"


def test_add_record_rejects_what_cannot_be_stored(factory: sessionmaker[Session]) -> None:
    with session_scope(factory) as s, pytest.raises(ValueError, match="complete target"):
        _record(s, target="cpu")
    with session_scope(factory) as s, pytest.raises(ValueError, match="latency"):
        _record(s, latency_s=None)
    # Foreign keys are enforced (on SQLite too): no record of an unknown workload.
    with pytest.raises(IntegrityError), session_scope(factory) as s:
        _record(s, workload_key="ef" * 32)
    with session_scope(factory) as s:
        assert count_records(s) == 0


def test_session_scope_rolls_back_on_error(factory: sessionmaker[Session]) -> None:
    with pytest.raises(RuntimeError), session_scope(factory) as s:
        _record(s)
        raise RuntimeError("the tuner crashed mid-batch")
    with session_scope(factory) as s:
        assert count_records(s) == 0


def test_artifacts_are_content_addressed_and_immutable(factory: sessionmaker[Session]) -> None:
    with session_scope(factory) as s:
        first = put_artifact(s, data=b"cubin", kind="cubin", source="src", meta={"v": 1})
    with session_scope(factory) as s:
        again = put_artifact(s, data=b"cubin", kind="ptx", source=None, meta={"v": 2})
        other = put_artifact(s, data=b"other", kind="ptx", source=None, meta={})
    assert first == again != other
    assert first == hashlib.sha256(b"cubin").hexdigest()
    with session_scope(factory) as s:
        artifact = get_artifact(s, first)
        assert artifact is not None
        assert (artifact.data, artifact.kind, artifact.source, artifact.meta, artifact.size) == (
            b"cubin",
            "cubin",
            "src",
            {"v": 1},
            5,
        )
        assert s.scalar(select(func.count()).select_from(Artifact)) == 2
        assert get_artifact(s, "0" * 64) is None


def test_best_record_ignores_wrong_and_failed_results(factory: sessionmaker[Session]) -> None:
    with session_scope(factory) as s:
        _record(s, config={"t": 1}, latency_s=3e-3)
        best = _record(s, config={"t": 2}, latency_s=2e-3).id
        # Faster, but not ok: never the best.
        _record(s, config={"t": 3}, status=RecordStatus.WRONG_ANSWER, latency_s=1e-4)
        _record(s, config={"t": 4}, status=RecordStatus.RUNTIME_ERROR, latency_s=1e-5)
        _record(s, config={"t": 5}, status=RecordStatus.COMPILE_ERROR, latency_s=None)
        # Faster, ok, but another workload / symbol values.
        _record(s, workload_key=OTHER_WORKLOAD, config={"t": 6}, latency_s=1e-6)
        _record(s, symbols={"M": 1}, config={"t": 7}, latency_s=1e-6)
    with session_scope(factory) as s:
        found = best_record(s, workload_key=WORKLOAD, target="cpu:x86_64-avx2", symbols={})
        assert found is not None and found.id == best
        wrong = list_records(s, workload_key=WORKLOAD, status=RecordStatus.WRONG_ANSWER)
        assert [r.config for r in wrong] == [{"t": 3}]
        assert count_records(s, workload_key=WORKLOAD) == 6
        assert count_records(s, workload_key=WORKLOAD, symbols={}) == 5
        assert best_record(s, workload_key=WORKLOAD, target="cuda") is None


def test_best_record_with_incomplete_target(factory: sessionmaker[Session]) -> None:
    with session_scope(factory) as s:
        _record(s, target="cuda:sm_80", config={"t": 1}, latency_s=2e-3)
        sm90 = _record(s, target="cuda:sm_90", config={"t": 1}, latency_s=1e-3).id
        cpu = _record(s, target="cpu:x86_64-avx512", config={"t": 1}, latency_s=1e-4).id
        # A kind that merely starts with "cuda" is not cuda.
        _record(s, target="cudax:sm_90", config={"t": 1}, latency_s=1e-9)
    with session_scope(factory) as s:

        def best(target: str | Target) -> int | None:
            record = best_record(s, workload_key=WORKLOAD, target=target)
            return None if record is None else record.id

        assert best("cuda") == sm90
        assert best(Target(kind="cuda")) == sm90
        assert best("cuda:sm_80") != sm90
        assert best("cpu") == cpu
        assert best("cpu:x86_64-avx2") is None
        assert count_records(s, workload_key=WORKLOAD, target="cuda") == 2


def test_measured_config_keys_include_failures(factory: sessionmaker[Session]) -> None:
    with session_scope(factory) as s:
        _record(s, config={"b": 1, "a": 2})
        _record(s, config={"b": 1, "a": 2})  # a re-measurement is a second record
        _record(s, config={"a": 3}, status=RecordStatus.COMPILE_TIMEOUT, latency_s=None)
        _record(s, config={"a": 4}, target="cpu:x86_64-avx512")
        _record(s, config={"a": 5}, symbols={"M": 8})
    with session_scope(factory) as s:
        keys = measured_config_keys(s, workload_key=WORKLOAD, target="cpu:x86_64-avx2", symbols={})
        assert keys == {Space.key({"a": 2, "b": 1}), Space.key({"a": 3})}
        assert len(list_records(s, workload_key=WORKLOAD, limit=None)) == 5
        page = list_records(s, workload_key=WORKLOAD, limit=2, offset=1)
        assert [r.config for r in page] == [{"a": 2, "b": 1}, {"a": 3}]
        same = list_records(s, workload_key=WORKLOAD, config_key=Space.key({"a": 2, "b": 1}))
        assert len(same) == 2


def test_records_of_a_tuning_and_feature_version(factory: sessionmaker[Session]) -> None:
    with session_scope(factory) as s:
        tuning = create_tuning(
            s, workload_key=WORKLOAD, target="cpu", symbols={}, trials=4, strategy="random"
        )
        _record(s, tuning_id=tuning.id, feature_version=2)
        _record(s, feature_version=1)
    with session_scope(factory) as s:
        assert count_records(s, tuning_id=tuning.id) == 1
        assert [r.feature_version for r in list_records(s, feature_version=2)] == [2]


def test_cost_models_are_appended(factory: sessionmaker[Session]) -> None:
    with session_scope(factory) as s:
        assert latest_cost_model(s, target="cpu:x86_64", feature_version=1) is None
        add_cost_model(s, target="cpu:x86_64", feature_version=1, n_train=10, blob=b"m1")
        add_cost_model(s, target="cpu:x86_64", feature_version=1, n_train=20, blob=b"m2")
        add_cost_model(s, target="cpu:x86_64", feature_version=2, n_train=5, blob=b"m3")
    with session_scope(factory) as s:
        latest = latest_cost_model(s, target="cpu:x86_64", feature_version=1)
        assert latest is not None and (latest.n_train, latest.blob) == (20, b"m2")


def test_concurrent_writers(database_url: str) -> None:
    """Two writers with their own engines (as two processes would have) never see "database is
    locked": WAL and the busy timeout make SQLite writers wait their turn."""
    migrate(database_url)
    engine = make_engine(database_url)
    with session_scope(session_factory(engine)) as s:
        upsert_workload(s, key=WORKLOAD, name="matmul", signature={})
        tuning_id = create_tuning(
            s, workload_key=WORKLOAD, target="cpu", symbols={}, trials=80, strategy="random"
        ).id
    engine.dispose()
    per_thread = 40
    errors: list[BaseException] = []
    barrier = threading.Barrier(2, timeout=60)

    def write(worker: int) -> None:
        engine = make_engine(database_url)
        factory = session_factory(engine)
        try:
            barrier.wait()
            for i in range(per_thread):
                with session_scope(factory) as s:
                    # A read before the first write: the transaction must not go stale.
                    best_record(s, workload_key=WORKLOAD, target="cpu")
                    update_tuning(s, tuning_id, trials_done=i)
                    sha = put_artifact(s, data=b"shared", kind="so", source=None, meta={})
                    _record(s, config={"w": worker, "i": i}, artifact_sha256=sha)
        except BaseException as error:
            errors.append(error)
        finally:
            engine.dispose()

    threads = [threading.Thread(target=write, args=(worker,)) for worker in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []

    engine = make_engine(database_url)
    try:
        with session_scope(session_factory(engine)) as s:
            assert count_records(s, workload_key=WORKLOAD) == 2 * per_thread
            assert s.scalar(select(func.count()).select_from(Artifact)) == 1
    finally:
        engine.dispose()


def _tuning(factory: sessionmaker[Session], status: TuningStatus) -> int:
    with session_scope(factory) as s:
        tuning_id = create_tuning(
            s, workload_key=WORKLOAD, target="cpu", symbols={}, trials=8, strategy="random"
        ).id
        update_tuning(s, tuning_id, status=status)
    return tuning_id


def _status(factory: sessionmaker[Session], tuning_id: int) -> TuningStatus:
    with session_scope(factory) as s:
        tuning = get_tuning(s, tuning_id)
        assert tuning is not None
        return tuning.status


def test_a_cancel_that_reads_before_the_tuner_finishes_does_not_overwrite_done(
    factory: sessionmaker[Session],
) -> None:
    """The API reads a running tuning, its tuner marks it done, then the API cancels: the
    tuning stays done and the cancel is a Conflict."""
    tuning_id = _tuning(factory, TuningStatus.RUNNING)
    with session_scope(factory) as api:
        tuning = get_tuning(api, tuning_id)
        assert tuning is not None and tuning.status == TuningStatus.RUNNING
        with session_scope(factory) as tuner:
            assert move_tunings(tuner, [tuning_id], TuningStatus.DONE) == 1
        with pytest.raises(Conflict, match="already ended \\(done\\)"):
            cancel_tuning(api, tuning)
    assert _status(factory, tuning_id) == TuningStatus.DONE


def test_a_group_cancel_keeps_the_members_finished_meanwhile(
    factory: sessionmaker[Session],
) -> None:
    with session_scope(factory) as s:
        group_id = create_group(s, target="cpu", strategy="random", trials=8).id
        ids = [
            create_tuning(
                s,
                workload_key=key,
                target="cpu",
                symbols={},
                trials=8,
                strategy="random",
                group_id=group_id,
            ).id
            for key in (WORKLOAD, OTHER_WORKLOAD)
        ]
        move_tunings(s, ids, TuningStatus.RUNNING)
    with session_scope(factory) as api:
        group = get_group(api, group_id)
        assert group is not None
        group_members(api, [group_id])  # the members, read while both run
        with session_scope(factory) as tuner:
            move_tunings(tuner, [ids[0]], TuningStatus.DONE)
        cancel_group(api, group)
    assert [_status(factory, i) for i in ids] == [TuningStatus.DONE, TuningStatus.CANCELLED]
    with session_scope(factory) as api:
        group = get_group(api, group_id)
        assert group is not None
        with session_scope(factory) as tuner:
            move_tunings(tuner, [ids[1]], TuningStatus.DONE)  # already cancelled
        with pytest.raises(Conflict, match="already ended"):
            cancel_group(api, group)


def test_a_tuner_does_not_finish_or_restart_a_tuning_cancelled_meanwhile(
    factory: sessionmaker[Session],
) -> None:
    """The tuner's transitions (running, done, failed) are conditional too: a tuning the API
    cancelled after the tuner last read it stays cancelled."""
    tuning_id = _tuning(factory, TuningStatus.RUNNING)
    with session_scope(factory) as tuner:
        tuning = get_tuning(tuner, tuning_id)
        assert tuning is not None and tuning.status == TuningStatus.RUNNING
        with session_scope(factory) as api:
            api_tuning = get_tuning(api, tuning_id)
            assert api_tuning is not None
            cancel_tuning(api, api_tuning)
        assert move_tunings(tuner, [tuning_id], TuningStatus.DONE) == 0
        assert move_tunings(tuner, [tuning_id], TuningStatus.FAILED, error="x") == 0
        restarted = move_tunings(tuner, [tuning_id], TuningStatus.RUNNING, only_from=STARTABLE)
        assert restarted == 0
    assert _status(factory, tuning_id) == TuningStatus.CANCELLED


def test_move_tunings_sets_the_times(factory: sessionmaker[Session]) -> None:
    tuning_id = _tuning(factory, TuningStatus.QUEUED)
    with session_scope(factory) as s:
        assert move_tunings(s, [tuning_id], TuningStatus.RUNNING) == 1
    with session_scope(factory) as s:
        running = get_tuning(s, tuning_id)
        assert running is not None and running.started_at is not None
        assert running.finished_at is None
        started_at = running.started_at
        assert move_tunings(s, [tuning_id], TuningStatus.FAILED, error="boom") == 1
    with session_scope(factory) as s:
        failed = get_tuning(s, tuning_id)
        assert failed is not None and (failed.status, failed.error) == (TuningStatus.FAILED, "boom")
        assert failed.finished_at is not None and failed.started_at == started_at
        # Resumed: from a finished status, when asked to; it keeps its first start.
        assert move_tunings(s, [tuning_id], TuningStatus.RUNNING) == 0
        resumed = move_tunings(
            s, [tuning_id], TuningStatus.RUNNING, only_from=[TuningStatus.FAILED]
        )
        assert resumed == 1
    with session_scope(factory) as s:
        again = get_tuning(s, tuning_id)
        assert again is not None and again.finished_at is None
        assert again.started_at == started_at
        assert move_tunings(s, [], TuningStatus.DONE) == 0


def test_counts_by_status_read_indexes_not_tables(database_url: str) -> None:
    """`/metrics` counts tunings and records by status at every scrape: on PostgreSQL both
    counts are index-only scans (`ix_tunings_status`, `ix_records_status`), never a scan of
    the tables, whose rows (features, timings, errors) are far wider than a status."""
    if not database_url.startswith("postgresql"):
        pytest.skip("query plans are PostgreSQL's")
    migrate(database_url)
    engine = make_engine(database_url)
    statements: list[tuple[str, Any]] = []
    try:
        with engine.begin() as connection:
            for statement in _MANY_ROWS:
                connection.execute(text(statement), {"workload": WORKLOAD, "n": 20_000})
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
            connection.execute(text("VACUUM ANALYZE tunings, records"))

        def capture(_c: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
            statements.append((statement, parameters))

        event.listen(engine, "before_cursor_execute", capture)
        with session_scope(session_factory(engine)) as s:
            assert count_tunings_by_status(s) == {TuningStatus.DONE: 20_000}
            assert count_records_by_status(s) == {
                RecordStatus.OK: 10_000,
                RecordStatus.WRONG_ANSWER: 10_000,
            }
        event.remove(engine, "before_cursor_execute", capture)
        counts = [(q, p) for q, p in statements if "count(" in q]
        assert len(counts) == 2
        with engine.connect() as connection:
            plans = [
                "\n".join(connection.execute(text(f"EXPLAIN {q}"), p or {}).scalars())
                for q, p in counts
            ]
    finally:
        engine.dispose()
    for plan, index in zip(plans, ("ix_tunings_status", "ix_records_status"), strict=True):
        assert f"Index Only Scan using {index}" in plan, plan
        assert "Seq Scan" not in plan, plan


# A workload with as many tunings as records, half of the records wrong answers.
_MANY_ROWS = [
    "INSERT INTO workloads (key, name, signature, created_at) VALUES (:workload, 'w', '{}', now())",
    "INSERT INTO tunings (workload_key, target, symbols, symbols_key, trials_requested, "
    "trials_done, strategy, status, created_at) SELECT :workload, 'cpu', '{}', '{}', 1, 1, "
    "'random', 'done', now() FROM generate_series(1, :n)",
    "INSERT INTO records (workload_key, target, symbols_key, config, config_key, features, "
    "feature_version, status, latencies_s, machine, created_at) SELECT :workload, "
    "'cpu:generic', '{}', '{}', i::text, '[]', 1, "
    "CASE WHEN i % 2 = 0 THEN 'ok' ELSE 'wrong_answer' END, '[]', '{}', now() "
    "FROM generate_series(1, :n) AS i",
]
