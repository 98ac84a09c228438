"""Storing a tuning's results: one record per candidate, failures included (a failed config
fails again, so it is never measured twice), with its artifact when it ran correctly.

A result becomes a record in `new_record` and nowhere else.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.orm import Session

from tunehub.compiler.space.space import Config, Space
from tunehub.runtime.backend import target_runtime
from tunehub.schemas.record import RecordStatus
from tunehub.schemas.target import Target
from tunehub.server.db.artifacts import put_artifact
from tunehub.server.db.records import NewRecord, add_record
from tunehub.worker.jobs import CandidateResult

# Feature version of records without a feature vector (the candidate failed before lowering).
NO_FEATURES = 0


@dataclass(frozen=True)
class RecordContext:
    """What every record of one tuning shares: the workload, the tuning, and the complete
    target and symbol values it measures for."""

    workload_key: str
    tuning_id: int
    target: Target
    symbols: dict[str, int]


def new_record(
    context: RecordContext, config: Config, result: CandidateResult, artifact_sha256: str | None
) -> NewRecord:
    """The record of `result`, the outcome of `config`; a failure keeps its log, a success
    its stored artifact."""
    ok = result.status is RecordStatus.OK
    return NewRecord(
        workload_key=context.workload_key,
        target=context.target,
        symbols=context.symbols,
        tuning_id=context.tuning_id,
        config=config,
        config_key=Space.key(config),
        features=list(result.features.values()),
        feature_version=NO_FEATURES
        if result.feature_version is None
        else int(result.feature_version),
        status=result.status,
        latency_s=result.latency_s,
        latencies_s=result.latencies_s,
        build_time_s=result.build_time_s,
        max_error=result.max_error,
        error_log=None if ok else result.log,
        machine=result.machine,
        artifact_sha256=artifact_sha256,
    )


def persist(
    s: Session, context: RecordContext, config: Config, result: CandidateResult
) -> NewRecord:
    """Store `result` (and its artifact, when it ran correctly); the record it stored."""
    sha256 = None
    if result.status is RecordStatus.OK and result.artifact is not None:
        sha256 = put_artifact(
            s,
            data=result.artifact,
            kind=target_runtime(context.target.kind).artifact_kind,
            source=result.source,
            meta=result.metadata,
        )
    record = new_record(context, config, result, sha256)
    add_record(s, record)
    return record
