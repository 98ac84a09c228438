"""An index on `records.status`, so that `/metrics` counts records by status without reading
the table (an index-only scan on PostgreSQL).

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-22
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index(op.f("ix_records_status"), "records", ["status"])


def downgrade() -> None:
    op.drop_index(op.f("ix_records_status"), table_name="records")
