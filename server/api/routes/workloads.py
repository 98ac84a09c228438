"""`/v1/workloads`: the best kernel of a workload (by key or by signature), its dispatch table
over the symbol values it was tuned for, and its records."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response

from tunehub.schemas.api import BestRequest, BestView, Page, RecordView, WorkloadView
from tunehub.schemas.dispatch import DispatchTable
from tunehub.schemas.record import RecordStatus
from tunehub.server.api import views
from tunehub.server.api.auth import ReadAccess
from tunehub.server.api.deps import (
    DeviceDep,
    OptionalTargetDep,
    PageDep,
    ServicesDep,
    SessionDep,
    SymbolsDep,
    TargetDep,
    WorkloadDep,
    WorkloadKey,
)
from tunehub.server.best import dispatch_table, no_kernel
from tunehub.server.db import workloads
from tunehub.server.db.records import list_records
from tunehub.server.errors import NotFound

router = APIRouter(prefix="/v1/workloads", tags=["workloads"], dependencies=[ReadAccess])

_NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {"description": "Unknown workload, or no verified kernel for the target yet"}
}


@router.get("")
def list_workloads(
    s: SessionDep,
    paging: PageDep,
    prefix: Annotated[
        str | None,
        Query(pattern=r"^[0-9a-f]{1,64}$", description="only keys starting with it"),
    ] = None,
) -> Page[WorkloadView]:
    """Newest first; with `prefix`, those whose key starts with it (how a client turns the
    12 characters `best` shows into a key)."""
    rows = workloads.list_workloads(s, limit=paging.limit + 1, offset=paging.offset, prefix=prefix)
    return views.page([WorkloadView.model_validate(w) for w in rows], paging.limit, paging.offset)


@router.get("/{key}/best", response_model=BestView, responses=_NOT_FOUND)
async def best(
    key: WorkloadKey,
    target: TargetDep,
    symbols: SymbolsDep,
    services: ServicesDep,
    request: Request,
    device: DeviceDep = None,
) -> Response:
    """The fastest verified record of the workload for `target`, with its artifact id; with
    `device`, one measured on that device model if any (else `fallback` says why not)."""
    query = request.scope["query_string"]
    return _json(await services.best.by_key(key, target, symbols, device, query))


@router.post("/best", response_model=BestView, responses=_NOT_FOUND)
async def best_by_signature(request: BestRequest, services: ServicesDep) -> Response:
    """As `GET /v1/workloads/{key}/best`, naming the workload by its signature."""
    return _json(
        await services.best.by_signature(
            request.task, request.target, request.symbols, request.device
        )
    )


def _json(body: bytes) -> Response:
    """A `BestView` rendered by `BestLookup` (as FastAPI would), sent as it is."""
    return Response(body, media_type="application/json")


@router.get("/{key}/dispatch", responses=_NOT_FOUND)
def dispatch(
    workload: WorkloadDep, target: TargetDep, s: SessionDep, device: DeviceDep = None
) -> DispatchTable:
    """The best verified kernel of every symbol assignment tuned for `target` (an incomplete
    one matches every ISA or arch of its kind), and the symbols' ranges: a client picks an
    entry per call with `DispatchTable.select`. With `device`, each entry prefers records
    measured on that device model (its `fallback` says when none was)."""
    table = dispatch_table(s, workload.key, target, device)
    if table is None:
        raise NotFound(no_kernel(workload.key, target, None))
    return table


@router.get("/{key}/records")
def records(
    workload: WorkloadDep,
    s: SessionDep,
    paging: PageDep,
    target: OptionalTargetDep,
    symbols: SymbolsDep,
    status: RecordStatus | None = None,
) -> Page[RecordView]:
    """The workload's records in the order they were made, filtered by status, target (an
    incomplete one matches every ISA or arch of its kind) and exact symbol values."""
    rows = list_records(
        s,
        workload_key=workload.key,
        target=target,
        status=status,
        symbols=symbols,
        limit=paging.limit + 1,
        offset=paging.offset,
    )
    return views.page([RecordView.model_validate(r) for r in rows], paging.limit, paging.offset)
