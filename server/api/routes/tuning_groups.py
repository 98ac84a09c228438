"""`/v1/tuning-groups`: tune many tasks (a model's layers) on one shared trial budget."""

from __future__ import annotations

from http import HTTPStatus

from fastapi import APIRouter

from tunehub.schemas.api import Page, TuningGroupRequest, TuningGroupView
from tunehub.schemas.record import TuningStatus
from tunehub.server.api import views
from tunehub.server.api.auth import AdminAccess, ReadAccess, SubmitAccess
from tunehub.server.api.deps import GroupDep, PageDep, ServicesDep, SessionDep
from tunehub.server.db import groups
from tunehub.server.db.session import session_scope
from tunehub.server.submit import cancel_group, submit_group

router = APIRouter(prefix="/v1/tuning-groups", tags=["tuning groups"])


@router.post(
    "",
    status_code=HTTPStatus.ACCEPTED,
    dependencies=[SubmitAccess],
    responses={409: {"description": "A task's workload is being tuned already"}},
)
def submit(request: TuningGroupRequest, services: ServicesDep) -> TuningGroupView:
    """Queue one tuning per task, run by one tuner that shares the budget among them."""
    group_id = submit_group(
        services.sessions, services.redis, request, max_trials=services.settings.max_trials
    )
    # A session of its own, as in `tunings.submit`.
    with session_scope(services.sessions) as s:
        group = groups.get_group(s, group_id)
        assert group is not None  # committed by the submission
        return views.group_view(s, group, services.stalls)


@router.get("", dependencies=[ReadAccess])
def list_groups(
    s: SessionDep, services: ServicesDep, paging: PageDep, status: TuningStatus | None = None
) -> Page[TuningGroupView]:
    """Newest first."""
    found = groups.list_groups(s, limit=paging.limit + 1, offset=paging.offset, status=status)
    return views.page(views.group_views(s, found, services.stalls), paging.limit, paging.offset)


@router.get("/{group_id}", dependencies=[ReadAccess])
def get_group(group: GroupDep, s: SessionDep, services: ServicesDep) -> TuningGroupView:
    return views.group_view(s, group, services.stalls)


@router.post(
    "/{group_id}/cancel",
    dependencies=[AdminAccess],
    responses={409: {"description": "The group has already ended"}},
)
def cancel(group: GroupDep, s: SessionDep, services: ServicesDep) -> TuningGroupView:
    """Cancel the group's unfinished tunings (409 when none is left)."""
    cancel_group(s, group)
    return views.group_view(s, group, services.stalls)
