"""The HTTP API: `create_app` builds it, `serve` runs it with uvicorn (`tunehub api`).

    uvicorn tunehub.server.app:create_app --factory --host 127.0.0.1 --port 8000

Building the app touches nothing: the database and Redis are connected to on first use, and
the database is migrated when the app starts (its lifespan), as the tuner daemon does, so a
fresh install serves at once.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import uvicorn
from anyio import to_thread
from fastapi import FastAPI
from redis import Redis
from redis.asyncio import Redis as AsyncRedis

from tunehub.server.api import errors, openapi
from tunehub.server.api.best_path import BestFastPath
from tunehub.server.api.deps import Services
from tunehub.server.api.limits import BodyLimitMiddleware
from tunehub.server.api.local_only import LocalOnly, UnsafeBind, check_open_bind
from tunehub.server.api.metrics import Metrics, MetricsMiddleware
from tunehub.server.api.routes import (
    artifacts,
    health,
    records,
    tuning_groups,
    tunings,
    ui,
    workers,
    workloads,
)
from tunehub.server.api.status_path import StatusFastPath
from tunehub.server.api.verifier import TokenVerifier
from tunehub.server.best_cache import BestLookup
from tunehub.server.db.session import make_engine, migrate, session_factory
from tunehub.server.generations import GenerationReader
from tunehub.server.health import WriteProbe
from tunehub.server.settings import Settings, get_settings
from tunehub.server.stalls import Stalls

# Redis answers in microseconds; a request waiting longer than this for it gets a 503.
REDIS_TIMEOUT_S = 5.0


def create_app(settings: Settings | None = None) -> FastAPI:
    """The API for `settings` (default: the environment's). Raises UnsafeBind for an open
    server (`auth = "open"`) configured on a non-loopback address; its startup fails, and
    requests from other machines are refused, however it is served (`local_only`)."""
    settings = settings or get_settings()
    check_open_bind(settings.auth, settings.api_host)
    engine = make_engine(settings.database_url)
    sessions = session_factory(engine)
    redis = generations = None
    if settings.redis_url:
        redis = Redis.from_url(
            settings.redis_url,
            socket_connect_timeout=REDIS_TIMEOUT_S,
            socket_timeout=REDIS_TIMEOUT_S,
        )
        # The event loop's own connections: best lookups read generations without a thread.
        generations = GenerationReader(
            AsyncRedis.from_url(
                settings.redis_url,
                socket_connect_timeout=REDIS_TIMEOUT_S,
                socket_timeout=REDIS_TIMEOUT_S,
            )
        )
    write_probe = WriteProbe(engine)
    stalls = None if redis is None else Stalls(redis)
    services = Services(
        settings=settings,
        engine=engine,
        sessions=sessions,
        redis=redis,
        best=BestLookup(sessions, settings.best_cache_ttl_s, generations),
        tokens=TokenVerifier(sessions),
        metrics=Metrics(sessions, write_probe, stalls),
        write_probe=write_probe,
        stalls=stalls,
    )

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await to_thread.run_sync(migrate, settings.database_url)
        try:
            yield
        finally:
            if redis is not None:
                redis.close()
            if generations is not None:
                await generations.aclose()
            engine.dispose()

    app = FastAPI(
        title="tunehub",
        summary="Kernel autotuning service: submit tunings, fetch the best kernels.",
        version="1",
        lifespan=lifespan,
        # Served by `openapi.install`, under the token rule.
        openapi_url=None,
        docs_url=None,
        redoc_url=None,
    )
    app.state.services = services
    errors.install(app)
    openapi.install(app)
    for module in (tunings, tuning_groups, workloads, artifacts, records, workers, health):
        app.include_router(module.router)
    ui.install(app)
    # The last added runs first: every request is counted, refused ones and cached best
    # kernels included.
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes)
    best_route = next(r for r in workloads.router.routes if getattr(r, "name", "") == "best")
    app.add_middleware(BestFastPath, services=services, route=best_route)
    app.add_middleware(
        StatusFastPath,
        services=services,
        ttl_s=settings.status_cache_ttl_s,
        generations=generations,
    )
    if settings.auth == "open":
        app.add_middleware(LocalOnly)
    app.add_middleware(MetricsMiddleware, metrics=services.metrics)
    return app


def serve(
    settings: Settings | None = None,
    *,
    host: str | None = None,
    port: int | None = None,
    workers: int = 1,
) -> None:
    """Run the API until interrupted (`tunehub api`); `host` and `port` default to the
    settings' `api_host` and `api_port`. With `workers` > 1, that many processes share the
    port (uvicorn's workers); each builds its app from the environment, as
    `uvicorn ... --factory --workers N` does, so `settings` must be the environment's."""
    settings = settings or get_settings()
    settings = settings.model_copy(
        update={"api_host": host or settings.api_host, "api_port": port or settings.api_port}
    )
    check_open_bind(settings.auth, settings.api_host)
    if workers == 1:
        uvicorn.run(create_app(settings), host=settings.api_host, port=settings.api_port)
        return
    # The workers read the environment: let it say what this call was told.
    os.environ["TUNEHUB_API_HOST"] = settings.api_host
    os.environ["TUNEHUB_API_PORT"] = str(settings.api_port)
    # Migrated once here: the workers' own migrations then find nothing to do.
    migrate(settings.database_url)
    uvicorn.run(
        f"{__name__}:create_app",
        factory=True,
        host=settings.api_host,
        port=settings.api_port,
        workers=workers,
    )


__all__ = ["UnsafeBind", "check_open_bind", "create_app", "serve"]
