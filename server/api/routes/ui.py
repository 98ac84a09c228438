"""`/ui`: the dashboard (`server.ui`), read-only pages over the same data as `/v1`.

Access is the API's read scope. An open server answers local clients as `/v1` does; with
tokens, the browser keeps the token in a cookie that `/ui/login` sets (HttpOnly, SameSite
strict, path `/ui`), and a bearer header works too (scripts, `curl`). A page asked for without
a valid token answers 401 with the login form. Each page's live part is a fragment
(`.../live`) that `static/dashboard.js` fetches again every few seconds.
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Annotated, Any
from urllib.parse import parse_qs

from fastapi import APIRouter, Depends, FastAPI, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles

from tunehub.schemas.api import MAX_ID, Scope
from tunehub.server.api.auth import MAX_SECRET_CHARS, authorize
from tunehub.server.api.deps import ServicesDep, SessionDep, TuningDep, WorkloadDep
from tunehub.server.ui import views
from tunehub.server.ui.render import STATIC_DIR, templates

PREFIX = "/ui"
COOKIE = "tunehub_token"

Offset = Annotated[int, Query(ge=0, le=MAX_ID)]


class LoginRequired(Exception):
    """No valid token came with a page request: answer with the login form."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


async def ui_access(request: Request, services: ServicesDep) -> None:
    """The read scope, from the dashboard's cookie or a bearer header."""
    secret = request.cookies.get(COOKIE)
    header = request.headers.get("authorization", "")
    if secret is None and header.lower().startswith("bearer "):
        secret = header[len("bearer ") :].strip()
    try:
        await authorize(services, secret, Scope.READ)
    except HTTPException as exc:
        if exc.status_code == HTTPStatus.UNAUTHORIZED:
            raise LoginRequired(
                "" if secret is None else "that token is invalid or revoked"
            ) from None
        raise


router = APIRouter(prefix=PREFIX, include_in_schema=False, dependencies=[Depends(ui_access)])
# The login form is the one page without a token.
login_router = APIRouter(prefix=PREFIX, include_in_schema=False)


def install(app: FastAPI) -> None:
    """Serve the dashboard on `app`: its pages, its static files and its login form."""
    app.include_router(router)
    app.include_router(login_router)
    app.mount(f"{PREFIX}/static", StaticFiles(directory=STATIC_DIR), name="ui-static")
    app.add_exception_handler(LoginRequired, _login_required)


def _base(request: Request) -> str:
    return f"{request.scope.get('root_path', '')}{PREFIX}"


def _page(
    request: Request, name: str, section: str, status_code: int = 200, **context: Any
) -> HTMLResponse:
    return templates().TemplateResponse(
        request,
        name,
        {
            "base": _base(request),
            "root": request.scope.get("root_path", ""),
            "section": section,
            "logged_in": COOKIE in request.cookies,
            "page_size": views.PAGE_SIZE,
            **context,
        },
        status_code=status_code,
    )


@router.get("")
def tunings(
    request: Request, s: SessionDep, services: ServicesDep, offset: Offset = 0
) -> HTMLResponse:
    page = views.tunings_page(s, services.stalls, offset=offset)
    return _page(request, "tunings.html", "tunings", page=page, offset=offset)


@router.get("/tunings/live")
def tunings_live(
    request: Request, s: SessionDep, services: ServicesDep, offset: Offset = 0
) -> HTMLResponse:
    page = views.tunings_page(s, services.stalls, offset=offset)
    return _page(request, "_tunings_table.html", "tunings", page=page)


@router.get("/tunings/{tuning_id}")
def tuning(
    request: Request, tuning: TuningDep, s: SessionDep, services: ServicesDep
) -> HTMLResponse:
    page = views.tuning_page(s, tuning, services.stalls)
    return _page(request, "tuning.html", "tunings", page=page)


@router.get("/tunings/{tuning_id}/live")
def tuning_live(
    request: Request, tuning: TuningDep, s: SessionDep, services: ServicesDep
) -> HTMLResponse:
    page = views.tuning_page(s, tuning, services.stalls)
    return _page(request, "_tuning_live.html", "tunings", page=page)


@router.get("/workloads")
def workloads(request: Request, s: SessionDep, offset: Offset = 0) -> HTMLResponse:
    page = views.workloads_page(s, offset=offset)
    return _page(request, "workloads.html", "workloads", page=page, offset=offset)


@router.get("/workloads/{key}")
def workload(
    request: Request, workload: WorkloadDep, s: SessionDep, services: ServicesDep
) -> HTMLResponse:
    page = views.workload_page(s, workload, services.stalls)
    return _page(request, "workload.html", "workloads", page=page)


@router.get("/workers")
def workers(request: Request, services: ServicesDep, s: SessionDep) -> HTMLResponse:
    page = views.workers_page(s, services.redis)
    return _page(request, "workers.html", "workers", page=page)


@router.get("/workers/live")
def workers_live(request: Request, services: ServicesDep, s: SessionDep) -> HTMLResponse:
    page = views.workers_page(s, services.redis)
    return _page(request, "_workers_live.html", "workers", page=page)


@login_router.get("/login", response_model=None)
def login_form(request: Request, services: ServicesDep) -> Response:
    if services.settings.auth == "open":
        return RedirectResponse(_base(request), HTTPStatus.SEE_OTHER)
    return _login_page(request, "", _base(request), HTTPStatus.OK)


@login_router.post("/login", response_model=None)
async def login(request: Request, services: ServicesDep) -> Response:
    """Check the form's token and keep it in the cookie; back to the form if it is no good."""
    form = parse_qs((await request.body()).decode("utf-8", "replace"))
    secret = form.get("token", [""])[0].strip()
    target = _safe_next(request, form.get("next", [""])[0])
    scope = None
    if secret and len(secret) <= MAX_SECRET_CHARS:
        scope = await services.tokens.scope_of(secret)
    if scope is None:
        return _login_page(
            request, "that token is invalid or revoked", target, HTTPStatus.UNAUTHORIZED
        )
    response = RedirectResponse(target, HTTPStatus.SEE_OTHER)
    response.set_cookie(
        COOKIE,
        secret,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path=_base(request),
    )
    return response


@login_router.post("/logout")
def logout(request: Request) -> RedirectResponse:
    response = RedirectResponse(f"{_base(request)}/login", HTTPStatus.SEE_OTHER)
    response.delete_cookie(COOKIE, path=_base(request))
    return response


async def _login_required(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, LoginRequired)
    return _login_page(request, exc.message, str(request.url.path), HTTPStatus.UNAUTHORIZED)


def _login_page(request: Request, message: str, target: str, status_code: int) -> HTMLResponse:
    return _page(request, "login.html", "", status_code, message=message, next=target)


def _safe_next(request: Request, target: str) -> str:
    """Where to go after logging in: a dashboard page, never another site."""
    base = _base(request)
    if target == base or (target.startswith(f"{base}/") and "//" not in target):
        return target
    return base
