"""Initial schema: workloads, tunings, records, artifacts, cost models.

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TUNING_STATUSES = ("queued", "running", "done", "failed", "cancelled")
RECORD_STATUSES = (
    "ok",
    "invalid_config",
    "compile_error",
    "compile_timeout",
    "runtime_error",
    "run_timeout",
    "wrong_answer",
)


def _json() -> sa.JSON:
    return sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def _status(name: str, values: Sequence[str]) -> sa.Enum:
    return sa.Enum(*values, name=name, native_enum=False, length=32)


def _created_at() -> sa.Column[object]:
    return sa.Column("created_at", sa.DateTime(timezone=True), nullable=False)


def _sqlite() -> bool:
    return op.get_context().dialect.name == "sqlite"


def _best_record_fk() -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint(
        ["best_record_id"], ["records.id"], name=op.f("fk_tunings_best_record_id_records")
    )


def upgrade() -> None:
    op.create_table(
        "workloads",
        sa.Column("key", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("signature", _json(), nullable=False),
        _created_at(),
        sa.PrimaryKeyConstraint("key", name=op.f("pk_workloads")),
    )
    op.create_table(
        "artifacts",
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.Column("source", sa.Text(), nullable=True),
        sa.Column("meta", _json(), nullable=False),
        sa.Column("size", sa.Integer(), nullable=False),
        _created_at(),
        sa.PrimaryKeyConstraint("sha256", name=op.f("pk_artifacts")),
    )
    op.create_table(
        "cost_models",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("target", sa.String(length=64), nullable=False),
        sa.Column("feature_version", sa.Integer(), nullable=False),
        sa.Column("n_train", sa.Integer(), nullable=False),
        sa.Column("blob", sa.LargeBinary(), nullable=False),
        _created_at(),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_cost_models")),
    )
    op.create_index("ix_cost_models_lookup", "cost_models", ["target", "feature_version"])
    # Tunings and records reference each other. SQLite accepts a reference to a table still to
    # come (and cannot add one later without copying the table); PostgreSQL gets an ALTER.
    op.create_table(
        "tunings",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("workload_key", sa.String(length=64), nullable=False),
        sa.Column("target", sa.String(length=64), nullable=False),
        sa.Column("symbols", _json(), nullable=False),
        sa.Column("symbols_key", sa.Text(), nullable=False),
        sa.Column("trials_requested", sa.Integer(), nullable=False),
        sa.Column("trials_done", sa.Integer(), nullable=False),
        sa.Column("strategy", sa.String(length=64), nullable=False),
        sa.Column("status", _status("tuningstatus", TUNING_STATUSES), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        _created_at(),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("best_record_id", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(
            ["workload_key"], ["workloads.key"], name=op.f("fk_tunings_workload_key_workloads")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tunings")),
        *([_best_record_fk()] if _sqlite() else []),
    )
    op.create_index(
        "ix_tunings_lookup", "tunings", ["workload_key", "target", "symbols_key", "status"]
    )
    op.create_index("ix_tunings_status", "tunings", ["status"])
    op.create_table(
        "records",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("workload_key", sa.String(length=64), nullable=False),
        sa.Column("target", sa.String(length=64), nullable=False),
        sa.Column("symbols_key", sa.Text(), nullable=False),
        sa.Column("tuning_id", sa.Integer(), nullable=True),
        sa.Column("config", _json(), nullable=False),
        sa.Column("config_key", sa.Text(), nullable=False),
        sa.Column("features", _json(), nullable=False),
        sa.Column("feature_version", sa.Integer(), nullable=False),
        sa.Column("status", _status("recordstatus", RECORD_STATUSES), nullable=False),
        sa.Column("latency_s", sa.Double(), nullable=True),
        sa.Column("latencies_s", _json(), nullable=False),
        sa.Column("build_time_s", sa.Double(), nullable=True),
        sa.Column("max_error", sa.Double(), nullable=True),
        sa.Column("error_log", sa.Text(), nullable=True),
        sa.Column("machine", _json(), nullable=False),
        sa.Column("artifact_sha256", sa.String(length=64), nullable=True),
        _created_at(),
        sa.ForeignKeyConstraint(
            ["artifact_sha256"],
            ["artifacts.sha256"],
            name=op.f("fk_records_artifact_sha256_artifacts"),
        ),
        sa.ForeignKeyConstraint(
            ["tuning_id"], ["tunings.id"], name=op.f("fk_records_tuning_id_tunings")
        ),
        sa.ForeignKeyConstraint(
            ["workload_key"], ["workloads.key"], name=op.f("fk_records_workload_key_workloads")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_records")),
    )
    op.create_index(
        "ix_records_best",
        "records",
        ["workload_key", "target", "symbols_key", "status", "latency_s"],
    )
    op.create_index(
        "ix_records_config", "records", ["workload_key", "target", "symbols_key", "config_key"]
    )
    op.create_index(op.f("ix_records_tuning_id"), "records", ["tuning_id"])
    if not _sqlite():
        op.create_foreign_key(
            op.f("fk_tunings_best_record_id_records"),
            "tunings",
            "records",
            ["best_record_id"],
            ["id"],
        )


def downgrade() -> None:
    if not _sqlite():  # SQLite drops the constraint with the table
        op.drop_constraint(op.f("fk_tunings_best_record_id_records"), "tunings", type_="foreignkey")
    op.drop_table("records")
    op.drop_table("tunings")
    op.drop_table("cost_models")
    op.drop_table("artifacts")
    op.drop_table("workloads")
