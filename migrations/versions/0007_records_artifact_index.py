"""An index on `records.artifact_sha256`: the workloads an artifact is the kernel of, read
whenever its metadata is served without a workload (`server.kernels`).

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0007"
down_revision: str | Sequence[str] | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index(op.f("ix_records_artifact"), "records", ["artifact_sha256"])


def downgrade() -> None:
    op.drop_index(op.f("ix_records_artifact"), table_name="records")
