"""`/v1/tunings`: submit a tuning, follow it, cancel it, list them."""

from __future__ import annotations

from http import HTTPStatus

from fastapi import APIRouter, Response

from tunehub.schemas.api import Page, Submission, TuningRequest, TuningView
from tunehub.schemas.record import TuningStatus
from tunehub.server.api import views
from tunehub.server.api.auth import AdminAccess, ReadAccess, SubmitAccess
from tunehub.server.api.deps import PageDep, ServicesDep, SessionDep, TuningDep, WorkloadKeyQuery
from tunehub.server.db import tunings
from tunehub.server.db.session import session_scope
from tunehub.server.submit import cancel_tuning, submit_tuning

router = APIRouter(prefix="/v1/tunings", tags=["tunings"])


@router.post(
    "",
    status_code=HTTPStatus.ACCEPTED,
    dependencies=[SubmitAccess],
    responses={200: {"model": Submission, "description": "Answered from the database"}},
)
def submit(request: TuningRequest, services: ServicesDep, response: Response) -> Submission:
    """Queue a tuning, join the one already running, or answer from the database."""
    submitted = submit_tuning(
        services.sessions, services.redis, request, max_trials=services.settings.max_trials
    )
    if submitted.outcome == "cached":
        response.status_code = HTTPStatus.OK
    # A session of its own, closed before the response is sent: a request-scoped one would
    # keep its connection until FastAPI's teardown, which waits for a free worker thread, while
    # every thread may be waiting for a connection (a burst of submissions deadlocked so).
    with session_scope(services.sessions) as s:
        return views.submission(s, submitted, services.stalls)


@router.get("", dependencies=[ReadAccess])
def list_tunings(
    s: SessionDep,
    services: ServicesDep,
    paging: PageDep,
    status: TuningStatus | None = None,
    workload_key: WorkloadKeyQuery = None,
) -> Page[TuningView]:
    """Newest first."""
    found = tunings.list_tunings(
        s,
        limit=paging.limit + 1,
        offset=paging.offset,
        workload_key=workload_key,
        status=status,
    )
    return views.page(views.tuning_views(s, found, services.stalls), paging.limit, paging.offset)


@router.get("/{tuning_id}", dependencies=[ReadAccess])
def get_tuning(tuning: TuningDep, s: SessionDep, services: ServicesDep) -> TuningView:
    return views.tuning_view(s, tuning, services.stalls)


@router.post(
    "/{tuning_id}/cancel",
    dependencies=[AdminAccess],
    responses={409: {"description": "The tuning has already ended"}},
)
def cancel(tuning: TuningDep, s: SessionDep, services: ServicesDep) -> TuningView:
    """Cancel a queued or running tuning (409 when it has ended)."""
    cancel_tuning(s, tuning)
    return views.tuning_view(s, tuning, services.stalls)
