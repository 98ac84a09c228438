"""`/v1/records`: import a records file (`schemas.records`), as `tunehub push` and
`tunehub records import --server` send one."""

from __future__ import annotations

from typing import Any

from anyio import to_thread
from fastapi import APIRouter, Request

from tunehub.schemas.records import ImportSummary
from tunehub.server.api.auth import AdminAccess
from tunehub.server.api.deps import ServicesDep
from tunehub.server.generations import BestGenerations
from tunehub.server.records import import_records

router = APIRouter(prefix="/v1/records", tags=["records"], dependencies=[AdminAccess])

_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {"application/x-ndjson": {"schema": {"type": "string"}}},
        "description": "A records file: JSON lines, its header first",
    }
}


@router.post("", openapi_extra=_BODY, responses={422: {"description": "A line is invalid"}})
async def import_file(request: Request, services: ServicesDep) -> ImportSummary:
    """Store the file's workloads, artifacts and records that the database lacks (a record
    already stored for the same workload, target, device, symbols and config is skipped); all
    of the file or, when a line is invalid, none of it."""
    body = await request.body()
    generations = None if services.redis is None else BestGenerations(services.redis)
    return await to_thread.run_sync(
        import_records, services.sessions, body.splitlines(), generations
    )
