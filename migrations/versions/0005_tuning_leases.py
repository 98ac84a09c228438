"""Tuning leases: the tuner running a tuning owns it until a time it keeps moving forward.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-25

A tuning whose tuner died keeps its `running` status; its lease expiring is how the other
tuners (and submissions) learn it is orphaned, within seconds, and take it over.
Existing tunings keep their rows; their new columns are NULL (no lease: a running one is
taken over at once, which is right, since no tuner of the old release renews a lease).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("tunings") as batch:
        batch.add_column(sa.Column("lease_owner", sa.String(length=128), nullable=True))
        batch.add_column(sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tunings") as batch:
        batch.drop_column("lease_expires_at")
        batch.drop_column("lease_owner")
