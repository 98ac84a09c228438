"""Targets up to 255 characters: a CPU ISA that names its dot-product and matrix engines
(`cpu:x86_64-avx512+avx_vnni+...+amx_int8`, 89 characters on a Sapphire Rapids Xeon) did not
fit the 64 that every `target` column had, so such a machine could store nothing.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | Sequence[str] | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLES = ("tuning_groups", "tunings", "records", "cost_models")


def _resize(length: int, was: int) -> None:
    for table in TABLES:
        with op.batch_alter_table(table) as batch:
            batch.alter_column(
                "target",
                type_=sa.String(length),
                existing_type=sa.String(was),
                existing_nullable=False,
            )


def upgrade() -> None:
    _resize(255, 64)


def downgrade() -> None:
    """Back to 64 characters: a longer target stored meanwhile must go first (PostgreSQL
    refuses to cut it; SQLite keeps it, as it ignores lengths)."""
    _resize(64, 255)
