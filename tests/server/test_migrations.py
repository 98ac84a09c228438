"""The Alembic migrations build exactly the schema the models describe, and can be undone."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, MetaData, inspect, text

from tunehub.compiler.space.space import Space
from tunehub.schemas.record import RecordStatus
from tunehub.schemas.target import CPU_FEATURES
from tunehub.server.best import best_for_device
from tunehub.server.db.groups import create_group
from tunehub.server.db.models import Base
from tunehub.server.db.records import NewRecord, add_record
from tunehub.server.db.session import (
    alembic_config,
    make_engine,
    migrate,
    session_factory,
    session_scope,
)
from tunehub.server.db.sql import canonical_json
from tunehub.server.db.tunings import create_tuning, update_tuning
from tunehub.server.db.workloads import upsert_workload

TABLES = {
    "workloads",
    "tunings",
    "records",
    "artifacts",
    "cost_models",
    "api_tokens",
    "tuning_groups",
    "write_probes",
}


def _tables(engine: Engine) -> set[str]:
    with engine.connect() as connection:
        return set(inspect(connection).get_table_names()) - {"alembic_version"}


def _schema_diff(engine: Engine, metadata: MetaData) -> list[Any]:
    with engine.connect() as connection:
        return list(compare_metadata(MigrationContext.configure(connection), metadata))


# What revisions 0006 to 0009 add; the tests of older revisions expect it missing.
_TARGET_LENGTH = "target length"  # 0009: every table's target column at 255 characters
_ADDED_BY_0008 = {"write_probes", _TARGET_LENGTH}
_ADDED_BY_0007 = {"ix_records_artifact", *_ADDED_BY_0008}
_ADDED_BY_0006 = {
    "device",
    "driver",
    "toolkit",
    "ix_records_device",
    "time_limit_s",
    "stop_reason",
    *_ADDED_BY_0007,
}


def _current_revision(engine: Engine) -> str | None:
    with engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def test_upgrade_from_empty_creates_every_table(database_url: str) -> None:
    engine = make_engine(database_url)
    try:
        assert _tables(engine) == set()
        migrate(database_url)
        assert _tables(engine) == TABLES
        assert (
            _current_revision(engine)
            == ScriptDirectory.from_config(alembic_config(database_url)).get_current_head()
        )
    finally:
        engine.dispose()


def test_migrated_schema_matches_the_models(database_url: str) -> None:
    migrate(database_url)
    engine = make_engine(database_url)
    try:
        assert _schema_diff(engine, Base.metadata) == []
        # The comparison is not vacuous: against no models, every table is reported extra.
        extra = _schema_diff(engine, MetaData())
        assert {diff[1].name for diff in extra if diff[0] == "remove_table"} == TABLES
    finally:
        engine.dispose()


def test_downgrade_to_base_and_upgrade_again(database_url: str) -> None:
    migrate(database_url)
    command.downgrade(alembic_config(database_url), "base")
    engine = make_engine(database_url)
    try:
        assert _tables(engine) == set()
        assert _current_revision(engine) is None
        migrate(database_url)
        assert _tables(engine) == TABLES
        assert _schema_diff(engine, Base.metadata) == []
    finally:
        engine.dispose()


def test_downgrade_with_data_in_place(database_url: str) -> None:
    """Tunings and records reference each other, group members their group; undoing the
    schema must still work."""
    migrate(database_url)
    engine = make_engine(database_url)
    try:
        with session_scope(session_factory(engine)) as s:
            upsert_workload(s, key="ab" * 32, name="w", signature={})
            group = create_group(s, target="cpu", strategy="random", trials=1)
            tuning = create_tuning(
                s,
                workload_key="ab" * 32,
                target="cpu",
                symbols={},
                trials=1,
                strategy="random",
                group_id=group.id,
                weight=2.0,
            )
            record = add_record(
                s,
                NewRecord(
                    workload_key="ab" * 32,
                    target="cpu:generic",
                    symbols={},
                    tuning_id=tuning.id,
                    config={},
                    config_key=Space.key({}),
                    features=[],
                    feature_version=1,
                    status=RecordStatus.OK,
                    latency_s=1.0,
                    latencies_s=[1.0],
                    build_time_s=None,
                    max_error=None,
                    error_log=None,
                    machine={},
                    artifact_sha256=None,
                ),
            )
            update_tuning(s, tuning.id, best_record_id=record.id)
    finally:
        engine.dispose()
    command.downgrade(alembic_config(database_url), "base")
    engine = make_engine(database_url)
    try:
        assert _tables(engine) == set()
    finally:
        engine.dispose()


# A tuning and its record as revision 0002 stored them, before tuning groups existed.
_AT = "2026-11-01 00:00:00+00:00"
_ROWS_0002 = [
    "INSERT INTO workloads (key, name, signature, created_at) VALUES ('k', 'w', '{}', :at)",
    "INSERT INTO tunings (id, workload_key, target, symbols, symbols_key, trials_requested, "
    "trials_done, strategy, status, error, created_at) "
    "VALUES (7, 'k', 'cpu', :symbols, :symbols_key, 4, 4, 'random', 'done', NULL, :at)",
    "INSERT INTO records (id, workload_key, target, symbols_key, tuning_id, config, config_key, "
    "features, feature_version, status, latency_s, latencies_s, machine, created_at) VALUES "
    "(3, 'k', 'cpu:generic', :symbols_key, 7, '{}', '{}', '[]', 1, 'ok', 0.5, '[0.5]', '{}', :at)",
    "UPDATE tunings SET best_record_id = 3 WHERE id = 7",
]
_TUNING_0002 = (
    "SELECT id, workload_key, symbols_key, trials_done, status, best_record_id FROM tunings"
)


def _insert_rows_0002(engine: Engine, symbols: dict[str, int]) -> None:
    """Store `_ROWS_0002` with these symbol values, keyed as the store keys them."""
    values = {
        "at": _AT,
        "symbols": json.dumps(symbols),
        "symbols_key": canonical_json(symbols),
    }
    with engine.begin() as connection:
        for statement in _ROWS_0002:
            connection.execute(text(statement), values)


def test_tuning_groups_keep_existing_rows_up_and_down(database_url: str) -> None:
    """0003 adds `tuning_groups` and a nullable `tunings.group_id`/`weight`: rows stored
    before it keep every value (and get NULLs), and undoing it keeps them too."""
    migrate(database_url, "0002")
    engine = make_engine(database_url)
    try:
        _insert_rows_0002(engine, {"M": 8})
        with engine.connect() as connection:
            before = connection.execute(text(_TUNING_0002)).all()
        migrate(database_url, "0003")
        with engine.connect() as connection:
            assert connection.execute(text(_TUNING_0002)).all() == before
            added = connection.execute(text("SELECT group_id, weight FROM tunings")).all()
            assert [tuple(row) for row in added] == [(None, None)]
            assert connection.execute(text("SELECT count(*) FROM records")).scalar() == 1
        # Only what 0004, 0005 and 0006 add later is missing.
        assert _missing(engine) == {"ix_records_status", *_LEASE_COLUMNS, *_ADDED_BY_0006}
        command.downgrade(alembic_config(database_url), "0002")
        with engine.connect() as connection:
            assert connection.execute(text(_TUNING_0002)).all() == before
            assert "group_id" not in {c["name"] for c in inspect(connection).get_columns("tunings")}
        assert "tuning_groups" not in _tables(engine)
    finally:
        engine.dispose()


_LEASE_COLUMNS = {"lease_owner", "lease_expires_at"}


def _missing(engine: Engine) -> set[str]:
    """The names of the tables, indexes and columns the models have and the database lacks
    (nothing else may differ)."""
    names = set()
    for diff in _schema_diff(engine, Base.metadata):
        if isinstance(diff, list):  # a column's changes
            assert [(d[0], d[3]) for d in diff] == [("modify_type", "target")], diff
            names.add(_TARGET_LENGTH)
        elif diff[0] in ("add_table", "add_index"):
            names.add(diff[1].name)
        else:
            assert diff[0] == "add_column", diff
            names.add(diff[3].name)
    return names


def test_tuning_leases_keep_existing_rows_up_and_down(database_url: str) -> None:
    """0005 adds the nullable lease columns to `tunings`: rows stored before keep every value
    (a lease of NULL: claimable when active), and undoing it keeps them too."""
    migrate(database_url, "0004")
    engine = make_engine(database_url)
    try:
        _insert_rows_0002(engine, {"M": 8})
        with engine.connect() as connection:
            before = connection.execute(text(_TUNING_0002)).all()
        migrate(database_url, "0005")
        with engine.connect() as connection:
            assert connection.execute(text(_TUNING_0002)).all() == before
            leases = connection.execute(text("SELECT lease_owner, lease_expires_at FROM tunings"))
            assert [tuple(row) for row in leases] == [(None, None)]
        assert _missing(engine) == _ADDED_BY_0006
        command.downgrade(alembic_config(database_url), "0004")
        with engine.connect() as connection:
            assert connection.execute(text(_TUNING_0002)).all() == before
            columns = {c["name"] for c in inspect(connection).get_columns("tunings")}
            assert not columns & _LEASE_COLUMNS
    finally:
        engine.dispose()


def _record_indexes(engine: Engine) -> set[str]:
    with engine.connect() as connection:
        return {index["name"] or "" for index in inspect(connection).get_indexes("records")}


def test_records_status_index_up_and_down(database_url: str) -> None:
    """0004 adds `ix_records_status` (for `/metrics`) to a table with rows; undoing it drops
    only that index."""
    migrate(database_url, "0003")
    engine = make_engine(database_url)
    try:
        _insert_rows_0002(engine, {})
        before = _record_indexes(engine)
        assert "ix_records_status" not in before
        migrate(database_url, "0004")
        assert _record_indexes(engine) == before | {"ix_records_status"}
        assert _missing(engine) == _LEASE_COLUMNS | _ADDED_BY_0006
        command.downgrade(alembic_config(database_url), "0003")
        assert _record_indexes(engine) == before
        with engine.connect() as connection:
            assert connection.execute(text("SELECT count(*) FROM records")).scalar() == 1
    finally:
        engine.dispose()


def test_record_devices_carry_old_records_over_up_and_down(database_url: str) -> None:
    """0006 gives every record a device (`unknown` for those stored before it), a driver and a
    toolkit, and tunings and groups a time limit; undoing it keeps the rows."""
    migrate(database_url, "0004")
    engine = make_engine(database_url)
    try:
        _insert_rows_0002(engine, {})
        with engine.connect() as connection:
            before = connection.execute(text(_TUNING_0002)).all()
        migrate(database_url, "0006")
        assert _missing(engine) == _ADDED_BY_0007
        with engine.connect() as connection:
            devices = connection.execute(text("SELECT device, driver, toolkit FROM records"))
            assert [tuple(row) for row in devices] == [("unknown", None, None)]
            limits = connection.execute(text("SELECT time_limit_s, stop_reason FROM tunings"))
            assert [tuple(row) for row in limits] == [(None, None)]
            assert connection.execute(text(_TUNING_0002)).all() == before
        with session_scope(session_factory(engine)) as s:
            old = best_for_device(s, workload_key="k", target="cpu", device="EPYC")
            assert old.record is not None and old.record.device == "unknown"
            assert old.fallback is not None and "measured on unknown" in old.fallback
        command.downgrade(alembic_config(database_url), "0004")
        with engine.connect() as connection:
            assert connection.execute(text(_TUNING_0002)).all() == before
            columns = {c["name"] for c in inspect(connection).get_columns("records")}
            assert "device" not in columns
    finally:
        engine.dispose()


def test_records_artifact_index_up_and_down(database_url: str) -> None:
    """0007 adds `ix_records_artifact` (the workloads of an artifact) to a table with rows;
    undoing it drops only that index."""
    migrate(database_url, "0006")
    engine = make_engine(database_url)
    try:
        _insert_rows_0002(engine, {})
        before = _record_indexes(engine)
        migrate(database_url, "0007")
        assert _record_indexes(engine) == before | {"ix_records_artifact"}
        assert _missing(engine) == _ADDED_BY_0008
        command.downgrade(alembic_config(database_url), "0006")
        assert _record_indexes(engine) == before
        with engine.connect() as connection:
            assert connection.execute(text("SELECT count(*) FROM records")).scalar() == 1
    finally:
        engine.dispose()


def test_migrate_twice_is_a_no_op_and_ignores_the_working_directory(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # no `migrations/` here: it is found through the package
    migrate(database_url)
    migrate(database_url)
    engine = make_engine(database_url)
    try:
        assert _tables(engine) == TABLES
    finally:
        engine.dispose()


def test_sqlite_default_location_is_created(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'fresh' / 'home' / 'tunehub.db'}"
    migrate(url)  # the migration's own engine needs the directory make_engine creates
    assert (tmp_path / "fresh" / "home" / "tunehub.db").exists()


def test_write_probes_up_and_down(database_url: str) -> None:
    """0008 adds `write_probes` with the one row `/readyz` rewrites; undoing it drops it."""
    migrate(database_url, "0008")
    engine = make_engine(database_url)
    try:
        assert _missing(engine) == {_TARGET_LENGTH}
        with engine.connect() as connection:
            names = connection.execute(text("SELECT name FROM write_probes")).scalars().all()
        assert names == ["readyz"]
        command.downgrade(alembic_config(database_url), "0007")
        assert _missing(engine) == _ADDED_BY_0008
    finally:
        engine.dispose()


def test_longer_targets_up_and_down(database_url: str) -> None:
    """0009 widens every `target` column to 255 characters: rows stored before keep their
    values, a target naming every CPU engine (89 characters) is then stored, and undoing it,
    once that target is gone, keeps the other rows."""
    long_target = "cpu:x86_64-avx512+" + "+".join(CPU_FEATURES)
    assert len(long_target) > 64
    migrate(database_url, "0008")
    engine = make_engine(database_url)
    try:
        _insert_rows_0002(engine, {})
        with engine.connect() as connection:
            before = connection.execute(text(_TUNING_0002)).all()
        migrate(database_url, "0009")
        assert _schema_diff(engine, Base.metadata) == []
        with session_scope(session_factory(engine)) as s:
            upsert_workload(s, key="cd" * 32, name="w", signature={})
            tuning = create_tuning(
                s,
                workload_key="cd" * 32,
                target=long_target,
                symbols={},
                trials=1,
                strategy="random",
            )
            long_id = tuning.id
        with engine.begin() as connection:
            stored = connection.execute(
                text("SELECT target FROM tunings WHERE id = :id"), {"id": long_id}
            ).scalar()
            assert stored == long_target
            connection.execute(text("DELETE FROM tunings WHERE id = :id"), {"id": long_id})
        command.downgrade(alembic_config(database_url), "0008")
        assert _missing(engine) == {_TARGET_LENGTH}
        with engine.connect() as connection:
            assert connection.execute(text(_TUNING_0002)).all() == before
    finally:
        engine.dispose()
