"""The tuning database's tables, as SQLAlchemy 2 typed declarative models.

The schema itself is created and changed only by the Alembic migrations in `migrations/`; a test
checks that the migrations and these models agree. Nothing in tunehub deletes records,
artifacts or cost models, because every measurement keeps paying (as a cache hit, and as
cost-model training data); artifacts and cost models never change. A record changes only when
its kernel is measured again at a tuning's end (`server.tuner.confirmation`): it gains the
repeats, or loses its `ok` status to a wrong answer. Tunings are mutable (progress).
"""

from __future__ import annotations

import enum
import json
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    DateTime,
    Dialect,
    Double,
    Enum,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Text,
    TypeDecorator,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from tunehub.schemas.api import Scope
from tunehub.schemas.record import UNKNOWN_DEVICE, RecordStatus, TuningStatus
from tunehub.schemas.target import TARGET_LENGTH

# Named constraints, so later migrations (SQLite batch mode included) can refer to them by name.
NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

# JSONB on PostgreSQL (indexable, compact); plain JSON text elsewhere.
JSONType = JSON().with_variant(JSONB(), "postgresql")


class UTCDateTime(TypeDecorator[datetime]):
    """A timezone-aware UTC datetime on every backend.

    PostgreSQL keeps the zone (`timestamptz`); SQLite drops it, so values read back there are
    naive and are marked UTC again here. Callers always see aware datetimes.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is not None and value.tzinfo is None:
            raise ValueError("naive datetime: pass an aware one (UTC)")
        return None if value is None else value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def utcnow() -> datetime:
    return datetime.now(UTC)


def _status_type(enum_class: type[enum.StrEnum]) -> Enum:
    # Stored as the enum's *value* in a VARCHAR without a CHECK constraint: readable in SQL, and
    # adding a status later needs no migration.
    return Enum(
        enum_class,
        native_enum=False,
        create_constraint=False,
        length=32,
        values_callable=lambda members: [m.value for m in members],
    )


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class Workload(Base):
    """One canonical task: signatures that differ only in names share it."""

    __tablename__ = "workloads"

    key: Mapped[str] = mapped_column(String(64), primary_key=True)  # sha256 hex
    name: Mapped[str] = mapped_column(String(255))  # the first name it was submitted under
    signature: Mapped[dict[str, Any]] = mapped_column(JSONType)  # canonical form
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class TuningGroup(Base):
    """Several tunings on one trial budget (a model's layers), run by one tuner job. Its status
    and progress are its members' (`Tuning.group_id`), so they cannot disagree."""

    __tablename__ = "tuning_groups"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    target: Mapped[str] = mapped_column(String(TARGET_LENGTH))
    strategy: Mapped[str] = mapped_column(String(64))
    trials_requested: Mapped[int] = mapped_column(Integer)  # the budget all members share
    time_limit_s: Mapped[float | None] = mapped_column(Double)  # wall-clock budget, if any
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class Tuning(Base):
    """One tuning request and its progress: a workload, a target, symbol values and a budget;
    a member of a group also has the group's id and its weight in the group."""

    __tablename__ = "tunings"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    workload_key: Mapped[str] = mapped_column(ForeignKey("workloads.key"))
    target: Mapped[str] = mapped_column(String(TARGET_LENGTH))
    symbols: Mapped[dict[str, Any]] = mapped_column(JSONType)
    symbols_key: Mapped[str] = mapped_column(Text)  # canonical JSON of `symbols`, for lookups
    trials_requested: Mapped[int] = mapped_column(Integer)
    trials_done: Mapped[int] = mapped_column(Integer, default=0)
    time_limit_s: Mapped[float | None] = mapped_column(Double)  # wall-clock budget, if any
    stop_reason: Mapped[str | None] = mapped_column(Text)  # why it stopped before its trials
    strategy: Mapped[str] = mapped_column(String(64))
    status: Mapped[TuningStatus] = mapped_column(
        _status_type(TuningStatus), default=TuningStatus.QUEUED
    )
    error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    # Tunings and records reference each other; `use_alter` breaks the cycle at CREATE time.
    best_record_id: Mapped[int | None] = mapped_column(ForeignKey("records.id", use_alter=True))
    group_id: Mapped[int | None] = mapped_column(ForeignKey("tuning_groups.id"), index=True)
    weight: Mapped[float | None] = mapped_column(Double)  # runs per model call, in its group
    # The tuner running it, and until when it holds it unless it renews (`server.tuner.lease`).
    lease_owner: Mapped[str | None] = mapped_column(String(128))
    lease_expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime())

    __table_args__ = (
        Index("ix_tunings_lookup", "workload_key", "target", "symbols_key", "status"),
        Index("ix_tunings_status", "status"),
    )


class Record(Base):
    """One measured (or failed) candidate, with everything needed to reuse it: its config, its
    cost-model features, its timings, the machine it ran on and its compiled artifact."""

    __tablename__ = "records"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    workload_key: Mapped[str] = mapped_column(ForeignKey("workloads.key"))
    target: Mapped[str] = mapped_column(String(TARGET_LENGTH))  # always complete, e.g. `cuda:sm_90`
    symbols_key: Mapped[str] = mapped_column(Text)
    tuning_id: Mapped[int | None] = mapped_column(ForeignKey("tunings.id"), index=True)
    config: Mapped[dict[str, Any]] = mapped_column(JSONType)
    config_key: Mapped[str] = mapped_column(Text)  # `Space.key(config)`, for dedup
    features: Mapped[list[float]] = mapped_column(JSONType)
    feature_version: Mapped[int] = mapped_column(Integer)
    status: Mapped[RecordStatus] = mapped_column(_status_type(RecordStatus))
    # The median of its measurement's repeats; the least median where it was measured again
    # (`db.records.add_timings`). `latencies_s`: every timed repeat, in order.
    latency_s: Mapped[float | None] = mapped_column(Double)
    latencies_s: Mapped[list[float]] = mapped_column(JSONType)
    build_time_s: Mapped[float | None] = mapped_column(Double)
    max_error: Mapped[float | None] = mapped_column(Double)
    error_log: Mapped[str | None] = mapped_column(Text)
    machine: Mapped[dict[str, Any]] = mapped_column(JSONType)  # the device fingerprint
    # The device model it ran on (a GPU's or CPU's name; `unknown` for records older than the
    # field), its driver (GPUs) and toolkit (nvcc, gcc): what a lookup prefers to match.
    device: Mapped[str] = mapped_column(String(255), server_default=UNKNOWN_DEVICE)
    driver: Mapped[str | None] = mapped_column(String(64))
    toolkit: Mapped[str | None] = mapped_column(String(64))
    artifact_sha256: Mapped[str | None] = mapped_column(ForeignKey("artifacts.sha256"))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)

    __table_args__ = (
        Index("ix_records_best", "workload_key", "target", "symbols_key", "status", "latency_s"),
        Index(
            "ix_records_device",
            "workload_key",
            "target",
            "device",
            "symbols_key",
            "status",
            "latency_s",
        ),
        Index("ix_records_config", "workload_key", "target", "symbols_key", "config_key"),
        # `/metrics` counts records by status: an index-only scan of this, not of the table.
        Index("ix_records_status", "status"),
        # The workloads an artifact is the kernel of (`server.kernels`).
        Index("ix_records_artifact", "artifact_sha256"),
    )

    @property
    def symbols(self) -> dict[str, Any]:
        """The symbol values this record was measured for (decoded from `symbols_key`)."""
        decoded: dict[str, Any] = json.loads(self.symbols_key)
        return decoded


class Artifact(Base):
    """A compiled kernel (or its source), addressed by the sha256 of its bytes; immutable."""

    __tablename__ = "artifacts"

    sha256: Mapped[str] = mapped_column(String(64), primary_key=True)
    kind: Mapped[str] = mapped_column(String(16))  # 'so', 'cubin', 'ptx', ...
    data: Mapped[bytes] = mapped_column(LargeBinary)
    source: Mapped[str | None] = mapped_column(Text)
    meta: Mapped[dict[str, Any]] = mapped_column(JSONType)  # the kernel's metadata.json
    size: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class StoredCostModel(Base):
    """A trained cost model as the database keeps it (the bytes its `save` wrote), for one
    target and feature version; the newest one wins."""

    __tablename__ = "cost_models"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    target: Mapped[str] = mapped_column(String(TARGET_LENGTH))
    feature_version: Mapped[int] = mapped_column(Integer)
    n_train: Mapped[int] = mapped_column(Integer)
    blob: Mapped[bytes] = mapped_column(LargeBinary)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)

    __table_args__ = (Index("ix_cost_models_lookup", "target", "feature_version"),)


class ApiToken(Base):
    """An API token. Only the sha256 of its secret is kept: the secret is shown once, when the
    token is created, and a stolen database grants nothing. Revoked tokens stay, for audit."""

    __tablename__ = "api_tokens"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(128))
    secret_sha256: Mapped[str] = mapped_column(String(64), unique=True)
    scope: Mapped[Scope] = mapped_column(_status_type(Scope))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime())


# The one row `server.health.WriteProbe` rewrites (created by migration 0008).
WRITE_PROBE_NAME = "readyz"


class WriteProbeRow(Base):
    """A row `/readyz` rewrites to learn whether the database takes writes (a full disk or a
    read-only database still answers reads)."""

    __tablename__ = "write_probes"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    at: Mapped[datetime] = mapped_column(UTCDateTime())
