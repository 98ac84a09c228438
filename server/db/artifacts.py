"""Data access for artifacts: content-addressed bytes (a kernel's files), immutable once
stored, and which workloads' records name them.

The functions flush but never commit: the caller owns the transaction (`session_scope`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from tunehub.server.db.models import Artifact, Record, utcnow
from tunehub.server.db.sql import insert_if_absent


def put_artifact(
    s: Session, *, data: bytes, kind: str, source: str | None, meta: Mapping[str, Any]
) -> str:
    """Store `data` under its sha256 and return that; storing the same bytes again is a no-op
    (the first kind, source and metadata stay: artifacts are immutable)."""
    sha256 = hashlib.sha256(data).hexdigest()
    insert_if_absent(
        s,
        Artifact,
        {
            "sha256": sha256,
            "kind": kind,
            "data": data,
            "source": source,
            "meta": dict(meta),
            "size": len(data),
            "created_at": utcnow(),
        },
    )
    return sha256


def get_artifact(s: Session, sha256: str) -> Artifact | None:
    return s.get(Artifact, sha256)


def artifact_workloads(s: Session, sha256: str, *, limit: int) -> list[str]:
    """The keys of the workloads (at most `limit`) whose records have artifact `sha256`."""
    query = select(Record.workload_key).where(Record.artifact_sha256 == sha256).distinct()
    return list(s.scalars(query.order_by(Record.workload_key).limit(limit)))


def workload_has_artifact(s: Session, key: str, sha256: str) -> bool:
    """Whether a record of workload `key` has artifact `sha256`."""
    query = select(Record.id).where(Record.workload_key == key, Record.artifact_sha256 == sha256)
    return s.scalars(query.limit(1)).first() is not None
