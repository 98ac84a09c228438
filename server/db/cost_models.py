"""Data access for cost models: trained models are appended, the newest one of a target and
feature version is the one in use.

The functions flush but never commit: the caller owns the transaction (`session_scope`).
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from tunehub.schemas.target import Target
from tunehub.server.db.models import StoredCostModel, utcnow


def add_cost_model(
    s: Session, *, target: str | Target, feature_version: int, n_train: int, blob: bytes
) -> StoredCostModel:
    """Append a trained model; older ones stay (a model is never overwritten)."""
    model = StoredCostModel(
        target=str(target),
        feature_version=feature_version,
        n_train=n_train,
        blob=blob,
        created_at=utcnow(),
    )
    s.add(model)
    s.flush()
    return model


def latest_cost_model(
    s: Session, *, target: str | Target, feature_version: int
) -> StoredCostModel | None:
    """The newest model trained for exactly this target and feature version."""
    query = (
        select(StoredCostModel)
        .where(
            StoredCostModel.target == str(target),
            StoredCostModel.feature_version == feature_version,
        )
        .order_by(StoredCostModel.id.desc())
        .limit(1)
    )
    return s.scalars(query).first()
