"""Who may call the API: bearer tokens with a scope, or nobody but this machine.

`auth = "token"`: every `/v1` route needs `Authorization: Bearer <secret>` naming a live token
whose scope includes the route's (`schemas.api.Scope`: read < submit < admin); 401 without
one, 403 when its scope is too small. Verdicts are cached for TOKEN_CACHE_TTL_S, so a token is
one indexed query per that period, not per request; a revoked token stops working within it.

`auth = "open"` (the embedded default): no tokens, and only loopback clients are answered
(403 otherwise). `serve` refuses to start an open server on another address; this check is
the second line, for `uvicorn server.app:create_app --factory --host 0.0.0.0`. A reverse proxy
on the same machine makes every client look local: run such deployments with tokens.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated

from anyio import to_thread
from fastapi import Depends, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session, sessionmaker

from schemas.api import Scope
from server.api.deps import ServicesDep
from server.cache import TTLCache
from server.db import tokens
from server.db.session import session_scope

TOKEN_CACHE_TTL_S = 5.0
# Longer "secrets" are not ours; refused before they are hashed or cached.
MAX_SECRET_CHARS = 256

_bearer = HTTPBearer(auto_error=False, description="An API token: `tunehub token create`.")


@dataclass(frozen=True)
class _Verdict:
    scope: Scope | None  # None: no such live token


class TokenVerifier:
    """Maps a secret to its token's scope, through a short-lived cache."""

    def __init__(self, sessions: sessionmaker[Session], ttl_s: float = TOKEN_CACHE_TTL_S) -> None:
        self.sessions = sessions
        self._cache: TTLCache[_Verdict] = TTLCache(ttl_s)

    async def scope_of(self, secret: str) -> Scope | None:
        key = tokens.hash_secret(secret)
        verdict = self._cache.get(key)
        if verdict is None:
            verdict = await to_thread.run_sync(self._verify, secret)
            self._cache.put(key, verdict)
        return verdict.scope

    def _verify(self, secret: str) -> _Verdict:
        with session_scope(self.sessions) as s:
            token = tokens.find_token(s, secret=secret)
            return _Verdict(None if token is None else Scope(token.scope))


def is_loopback(host: str) -> bool:
    """Whether `host` is a loopback address (`localhost` is a name, not an address: no)."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def require(needed: Scope) -> Callable[..., Awaitable[None]]:
    """A dependency that lets a request through only with a scope that includes `needed`."""

    async def authorize(
        request: Request,
        services: ServicesDep,
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    ) -> None:
        if services.settings.auth == "open":
            client = request.client.host if request.client else ""
            if not is_loopback(client):
                raise HTTPException(
                    status.HTTP_403_FORBIDDEN,
                    "this server runs without tokens (auth=open) and answers only local clients",
                )
            return
        if credentials is None:
            raise _unauthorized("an API token is required (Authorization: Bearer <token>)")
        secret = credentials.credentials
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

    return authorize


# Route and router dependencies.
ReadAccess = Depends(require(Scope.READ))
SubmitAccess = Depends(require(Scope.SUBMIT))
AdminAccess = Depends(require(Scope.ADMIN))


def _unauthorized(detail: str) -> HTTPException:
    return HTTPException(
        status.HTTP_401_UNAUTHORIZED, detail, headers={"WWW-Authenticate": "Bearer"}
    )
