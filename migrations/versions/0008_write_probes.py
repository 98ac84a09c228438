"""The `write_probes` table: one row (`readyz`) that `/readyz` rewrites, so that a database
which answers reads but refuses writes (its disk full, read-only) is reported not ready.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02
"""

from collections.abc import Sequence
from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | Sequence[str] | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    table = op.create_table(
        "write_probes",
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_write_probes")),
    )
    op.bulk_insert(table, [{"name": "readyz", "at": datetime.now(UTC)}])


def downgrade() -> None:
    op.drop_table("write_probes")
