"""`/v1/workers`: the living worker daemons, from the registry their heartbeats keep."""

from __future__ import annotations

from fastapi import APIRouter

from tunehub.schemas.api import WorkerView
from tunehub.server.api.auth import ReadAccess
from tunehub.server.api.deps import ServicesDep
from tunehub.worker.registry import list_workers

router = APIRouter(prefix="/v1/workers", tags=["workers"], dependencies=[ReadAccess])


@router.get("")
def workers(services: ServicesDep) -> list[WorkerView]:
    """Every worker whose heartbeat is fresh; none when the server has no Redis."""
    if services.redis is None:
        return []
    return [WorkerView.model_validate(w) for w in list_workers(services.redis)]
