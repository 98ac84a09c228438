"""`/healthz` (the process answers), `/readyz` (its database answers and takes writes, and
Redis answers) and `/metrics`:
no token needed, so that orchestrators and Prometheus can call them."""

from __future__ import annotations

from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST

from tunehub.schemas.api import ReadyView
from tunehub.server.api.deps import ServicesDep
from tunehub.server.health import check_database, check_redis

router = APIRouter(tags=["health"])


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", responses={503: {"model": ReadyView}})
def readyz(services: ServicesDep) -> JSONResponse:
    """200 when the database answers and takes writes (probed every few seconds) and Redis
    (if configured) answers; 503 otherwise, each dependency's field saying why not."""
    database = check_database(services.engine)
    if database == "ok":
        database = services.write_probe.check()
    redis = "disabled" if services.redis is None else check_redis(services.redis)
    view = ReadyView(
        ready=database == "ok" and redis in ("ok", "disabled"), database=database, redis=redis
    )
    return JSONResponse(view.model_dump(), status_code=200 if view.ready else 503)


@router.get("/metrics", response_class=Response)
def metrics(services: ServicesDep) -> Response:
    """Prometheus text format."""
    return Response(services.metrics.render(), media_type=CONTENT_TYPE_LATEST)
