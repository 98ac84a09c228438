"""API tokens: hashed secrets with a scope (read, submit, admin).

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-23
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SCOPES = ("read", "submit", "admin")


def upgrade() -> None:
    op.create_table(
        "api_tokens",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("secret_sha256", sa.String(length=64), nullable=False),
        sa.Column(
            "scope", sa.Enum(*SCOPES, name="scope", native_enum=False, length=32), nullable=False
        ),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_tokens")),
        sa.UniqueConstraint("secret_sha256", name=op.f("uq_api_tokens_secret_sha256")),
    )


def downgrade() -> None:
    op.drop_table("api_tokens")
