"""The best-kernel lookup's fast path: `GET /v1/workloads/{key}/best` answered from the cached
response bytes before any routing, validation or serialization, so the lookup every client
makes costs about what a constant endpoint does.

It answers only when it is sure: the caller is allowed (open mode: anyone `local_only` let
through; tokens: a secret whose verdict `TokenVerifier` holds, of read scope or more) and
`BestLookup.hit` has a current answer for this exact path and query string. Anything else (a
miss, a stale answer, a token not verified lately, a refusal) goes on to the route, which
answers as it always has and caches what it found; so a hit is the bytes, headers and status
the route gave.
"""

from __future__ import annotations

from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Receive, Scope, Send

from tunehub.server.api.auth import surely_readable
from tunehub.server.api.deps import Services

PREFIX = "/v1/workloads/"
SUFFIX = "/best"
KEY_CHARS = 64
PATH_CHARS = len(PREFIX) + KEY_CHARS + len(SUFFIX)


class BestFastPath:
    """ASGI middleware serving cached best-kernel answers; `route` is the route they stand
    for (request metrics count them under its template)."""

    def __init__(self, app: ASGIApp, services: Services, route: BaseRoute) -> None:
        self.app = app
        self.services = services
        self.best = services.best
        self.route = route

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "GET":
            path: str = scope["path"]
            if len(path) == PATH_CHARS and path.startswith(PREFIX) and path.endswith(SUFFIX):
                key = path[len(PREFIX) : -len(SUFFIX)]
                body = (
                    await self.best.hit(key, scope["query_string"])
                    if surely_readable(self.services, scope)
                    else None
                )
                if body is not None:
                    scope["route"] = self.route
                    await send(
                        {
                            "type": "http.response.start",
                            "status": 200,
                            "headers": [
                                (b"content-length", str(len(body)).encode()),
                                (b"content-type", b"application/json"),
                            ],
                        }
                    )
                    await send({"type": "http.response.body", "body": body})
                    return
        await self.app(scope, receive, send)
