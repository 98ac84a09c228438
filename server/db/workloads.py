"""Data access for workloads: a task signature stored once under its key, the hash of its
canonical form (`compiler.canonical.workload_key`, computed by whoever stores one).

The functions flush but never commit: the caller owns the transaction (`session_scope`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from tunehub.server.db.models import Workload, utcnow
from tunehub.server.db.sql import insert_if_absent

KEY_LENGTH = 64  # a workload key: sha256 hex


def upsert_workload(s: Session, *, key: str, name: str, signature: Mapping[str, Any]) -> Workload:
    """The workload `key`, created on first sight. A known workload keeps its first name and
    signature: the key is a hash of the canonical signature, so they cannot differ."""
    values = {"key": key, "name": name, "signature": dict(signature), "created_at": utcnow()}
    insert_if_absent(s, Workload, values)
    return s.get_one(Workload, key)


def get_workload(s: Session, key: str) -> Workload | None:
    return s.get(Workload, key)


def workload_symbols(s: Session, key: str, values: Mapping[str, int]) -> dict[str, int]:
    """`values` (every symbol, in declaration order, under some submitter's names) under the
    names workload `key` keeps, its first signature's: signatures that differ only in names
    are one workload, and their symbols correspond by position, as in the workload key.
    As given for a workload not stored yet."""
    workload = get_workload(s, key)
    if workload is None:
        return dict(values)
    names = list(workload.signature.get("symbols", {}))
    return dict(zip(names, values.values(), strict=True))


def workloads_with_prefix(s: Session, prefix: str, *, limit: int | None = 2) -> list[str]:
    """The keys of (at most `limit`, None: all) workloads whose key starts with `prefix`."""
    return [w.key for w in list_workloads(s, limit=limit, prefix=prefix)]


def resolve_workload_key(s: Session, text: str) -> str:
    """The one stored workload whose key is `text` or starts with it (the 12 characters `best`
    prints are enough); LookupError saying why not (none, or several: give more)."""
    keys = workloads_with_prefix(s, text, limit=3)
    if not keys and len(text) == KEY_LENGTH:
        raise LookupError(f"unknown workload {text!r}")
    if not keys:
        raise LookupError(f"no workload has a key starting with {text!r}")
    if len(keys) > 1 and text.lower() not in keys:
        shown = ", ".join(key[:16] for key in keys[:2])
        raise LookupError(f"workload key {text!r} is ambiguous ({shown}, ...): give more of it")
    return text.lower() if text.lower() in keys else keys[0]


def list_workloads(
    s: Session, *, limit: int | None = 100, offset: int = 0, prefix: str | None = None
) -> list[Workload]:
    """Newest first; only those whose key starts with `prefix`, if given."""
    query = select(Workload).order_by(Workload.created_at.desc(), Workload.key)
    if prefix is not None:
        query = query.where(Workload.key.startswith(prefix.lower(), autoescape=True))
    return list(s.scalars(query.limit(limit).offset(offset)))
