"""Tuning groups: several tunings on one trial budget; tunings get a group and a weight.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22

Existing tunings keep their rows; their new columns are NULL (not in a group).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "tuning_groups",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("target", sa.String(length=64), nullable=False),
        sa.Column("strategy", sa.String(length=64), nullable=False),
        sa.Column("trials_requested", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tuning_groups")),
    )
    # Batch mode: SQLite cannot add a foreign key to a table in place, so it copies the table.
    with op.batch_alter_table("tunings") as batch:
        batch.add_column(sa.Column("group_id", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("weight", sa.Double(), nullable=True))
        batch.create_foreign_key(
            op.f("fk_tunings_group_id_tuning_groups"), "tuning_groups", ["group_id"], ["id"]
        )
        batch.create_index(op.f("ix_tunings_group_id"), ["group_id"])


def downgrade() -> None:
    with op.batch_alter_table("tunings") as batch:
        batch.drop_index(op.f("ix_tunings_group_id"))
        batch.drop_constraint(op.f("fk_tunings_group_id_tuning_groups"), type_="foreignkey")
        batch.drop_column("weight")
        batch.drop_column("group_id")
    op.drop_table("tuning_groups")
