"""Test data: example signatures, and records stored the way the tuner stores them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from tunehub.compiler.canonical import workload_key
from tunehub.compiler.program import load
from tunehub.compiler.space.space import Space
from tunehub.schemas.api import Scope
from tunehub.schemas.record import RecordStatus
from tunehub.server.db import records, tokens
from tunehub.server.db.artifacts import put_artifact
from tunehub.server.db.models import Record
from tunehub.server.db.session import session_scope
from tunehub.server.db.workloads import upsert_workload

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def signature(name: str = "matmul_128") -> dict[str, Any]:
    data: dict[str, Any] = json.loads((EXAMPLES / f"{name}.json").read_text())
    return data


def key_of(sig: dict[str, Any]) -> str:
    return workload_key(load(sig))


def sessions(client: TestClient) -> sessionmaker[Session]:
    factory: sessionmaker[Session] = client.app.state.services.sessions  # type: ignore[attr-defined]
    return factory


def make_token(
    client_sessions: sessionmaker[Session], scope: Scope, *, revoked: bool = False
) -> str:
    """The secret of a new API token of `scope` (revoked at once if asked)."""
    with session_scope(client_sessions) as s:
        created, secret = tokens.create_token(s, name=f"test {scope}", scope=scope)
        if revoked:
            tokens.revoke_token(s, token_id=created.id)
    return secret


def add_record(
    client: TestClient,
    sig: dict[str, Any],
    *,
    target: str = "cpu:x86_64-avx2",
    symbols: dict[str, int] | None = None,
    status: RecordStatus = RecordStatus.OK,
    latency_s: float | None = 1e-3,
    config: dict[str, Any] | None = None,
    artifact: bytes | None = None,
    machine: dict[str, Any] | None = None,
) -> Record:
    """One record of `sig` (its workload created on first use), with an artifact if given."""
    with session_scope(sessions(client)) as s:
        key = key_of(sig)
        upsert_workload(s, key=key, name=sig["name"], signature=sig)
        sha256 = None
        config = config if config is not None else {"latency": latency_s, "status": status}
        if artifact is not None:
            sha256 = put_artifact(
                s, data=artifact, kind="so", source="int f();", meta={"entry": "f"}
            )
        return records.add_record(
            s,
            records.NewRecord(
                workload_key=key,
                target=target,
                symbols=symbols or {},
                tuning_id=None,
                config=config,
                config_key=Space.key(config),
                features=[1.0, 2.0],
                feature_version=1,
                status=status,
                latency_s=latency_s,
                latencies_s=[] if latency_s is None else [latency_s],
                build_time_s=0.5,
                max_error=0.0,
                error_log=None if status == RecordStatus.OK else "it failed",
                machine=machine if machine is not None else {"host": "test"},
                artifact_sha256=sha256,
            ),
        )
