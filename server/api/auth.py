"""Who may call the API: bearer tokens with a scope, or nobody but this machine.

`auth = "token"`: every `/v1` route needs `Authorization: Bearer <secret>` naming a live token
whose scope includes the route's (`schemas.api.Scope`: read < submit < admin); 401 without
one, 403 when its scope is too small. Verdicts are cached for TOKEN_CACHE_TTL_S, so a token is
one indexed query per that period, not per request (`verifier`); a revoked token stops
working within it.

`auth = "open"` (the embedded default): no tokens; only loopback clients reach the routes
(`local_only` refuses the others, and refuses to start on a non-loopback address).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated

from fastapi import Depends, HTTPException, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi.security.utils import get_authorization_scheme_param
from starlette.requests import cookie_parser
from starlette.types import Scope as ASGIScope

from tunehub.schemas.api import Scope
from tunehub.server.api.deps import Services, ServicesDep
from tunehub.server.settings import Settings

# Longer "secrets" are not ours; refused before they are hashed or cached.
MAX_SECRET_CHARS = 256

_bearer = HTTPBearer(auto_error=False, description="An API token: `tunehub token create`.")


def require(
    needed: Scope, *, public: Callable[[Settings], bool] | None = None
) -> Callable[..., Awaitable[None]]:
    """A dependency that lets a request through only with a scope that includes `needed`
    (or with none, when `public` says the settings make the route public)."""

    async def authorize_bearer(
        services: ServicesDep,
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    ) -> None:
        if public is not None and public(services.settings):
            return
        secret = None if credentials is None else credentials.credentials
        await authorize(services, secret, needed)

    return authorize_bearer


async def authorize(services: Services, secret: str | None, needed: Scope) -> None:
    """Let the request through with `secret` (a token's, however it came: a bearer header,
    the dashboard's cookie) when it grants `needed`; HTTPException 401 or 403 otherwise."""
    if services.settings.auth == "open":  # local clients only (`local_only`)
        return
    if secret is None:
        raise _unauthorized("an API token is required (Authorization: Bearer <token>)")
    scope = None
    if len(secret) <= MAX_SECRET_CHARS:
        scope = await services.tokens.scope_of(secret)
    if scope is None:
        raise _unauthorized("the API token is invalid or revoked")
    if not scope.allows(needed):
        raise HTTPException(
            status.HTTP_403_FORBIDDEN,
            f"this needs a token with the {needed} scope; this one has {scope}",
        )


def surely_readable(services: Services, scope: ASGIScope, cookie: str | None = None) -> bool:
    """Whether `authorize` would let this ASGI request read, known without waiting: an open
    server (`local_only` refused other machines first), or a bearer secret (or, with
    `cookie`, that cookie's) whose verdict `TokenVerifier` holds, of read scope or more.
    False also when unsure: the caller then goes through the route, which decides."""
    if services.settings.auth == "open":
        return True
    secret = None
    for name, value in scope["headers"]:
        if name == b"authorization":
            scheme, credentials = get_authorization_scheme_param(value.decode("latin-1"))
            if scheme.lower() != "bearer":
                return False
            secret = credentials
        elif name == b"cookie" and cookie is not None and secret is None:
            secret = cookie_parser(value.decode("latin-1")).get(cookie)
    if not secret or len(secret) > MAX_SECRET_CHARS:
        return False
    held = services.tokens.cached_scope(secret)
    return held is not None and held.allows(Scope.READ)


# Route and router dependencies.
ReadAccess = Depends(require(Scope.READ))
SubmitAccess = Depends(require(Scope.SUBMIT))
AdminAccess = Depends(require(Scope.ADMIN))


def _unauthorized(detail: str) -> HTTPException:
    return HTTPException(
        status.HTTP_401_UNAUTHORIZED, detail, headers={"WWW-Authenticate": "Bearer"}
    )
