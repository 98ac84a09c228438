"""A stored artifact as one workload's kernel: its bytes and launch are the artifact's, its
interface (argument names, shapes, dtypes, symbols) the workload's own.

Artifacts are content-addressed, and signatures that differ only in unit axes can compile to
the same bytes, so one artifact may be the kernel of several workloads. The metadata stored
with it describes whichever workload produced it first; every path that hands a kernel out
for a workload (the API, `tunehub kernel`, `tunehub.torch`) takes it from here instead.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from tunehub.runtime.abi import for_workload, interface
from tunehub.server.db.artifacts import artifact_workloads, workload_has_artifact
from tunehub.server.db.models import Artifact
from tunehub.server.db.workloads import get_workload
from tunehub.server.errors import Conflict, NotFound

# How many of an artifact's workloads an unnamed lookup reads, and names in its refusal.
_SHOWN = 8


def kernel_meta(s: Session, artifact: Artifact, workload_key: str | None = None) -> dict[str, Any]:
    """`artifact`'s metadata as the kernel of `workload_key` (NotFound unless one of that
    workload's records has it). Without a workload: as stored, unless the artifact is the
    kernel of workloads whose interfaces differ (Conflict, naming them: which one is meant
    cannot be guessed)."""
    if workload_key is not None:
        workload = get_workload(s, workload_key)
        if workload is None:
            raise NotFound(f"no workload {workload_key}")
        if not workload_has_artifact(s, workload_key, artifact.sha256):
            raise NotFound(f"artifact {artifact.sha256} is not a kernel of workload {workload_key}")
        return for_workload(artifact.meta, workload.signature)
    keys = artifact_workloads(s, artifact.sha256, limit=_SHOWN + 1)
    interfaces = []
    for key in keys:
        workload = get_workload(s, key)
        assert workload is not None  # a record's workload exists (a foreign key)
        interfaces.append(interface(workload.signature))
    if any(found != interfaces[0] for found in interfaces[1:]):
        shown = ", ".join(key[:12] for key in keys[:_SHOWN])
        shown += ", ..." if len(keys) > _SHOWN else ""
        raise Conflict(
            f"artifact {artifact.sha256[:12]} is the kernel of workloads with different "
            f"argument shapes ({shown}): name the workload (?workload=KEY, or download by "
            f"its workload key)"
        )
    return {**artifact.meta, **interfaces[0]} if interfaces else dict(artifact.meta)
