"""Device-aware records and time budgets: every record names the device model it ran on (GPU
or CPU), with its driver and toolkit; tunings and groups may carry a wall-clock limit.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-25

Existing records are carried over with device `unknown` (their fingerprints predate the
device fields) and no driver or toolkit; existing tunings and groups have no time limit.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("records") as batch:
        batch.add_column(
            sa.Column("device", sa.String(length=255), nullable=False, server_default="unknown")
        )
        batch.add_column(sa.Column("driver", sa.String(length=64), nullable=True))
        batch.add_column(sa.Column("toolkit", sa.String(length=64), nullable=True))
        batch.create_index(
            op.f("ix_records_device"),
            ["workload_key", "target", "device", "symbols_key", "status", "latency_s"],
        )
    with op.batch_alter_table("tunings") as batch:
        batch.add_column(sa.Column("time_limit_s", sa.Double(), nullable=True))
        batch.add_column(sa.Column("stop_reason", sa.Text(), nullable=True))
    with op.batch_alter_table("tuning_groups") as batch:
        batch.add_column(sa.Column("time_limit_s", sa.Double(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tuning_groups") as batch:
        batch.drop_column("time_limit_s")
    with op.batch_alter_table("tunings") as batch:
        batch.drop_column("stop_reason")
        batch.drop_column("time_limit_s")
    with op.batch_alter_table("records") as batch:
        batch.drop_index(op.f("ix_records_device"))
        batch.drop_column("toolkit")
        batch.drop_column("driver")
        batch.drop_column("device")
