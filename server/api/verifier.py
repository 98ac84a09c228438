"""Token verdicts for the API's auth: a secret's scope, through a short-lived cache, so a token
is one indexed query per TOKEN_CACHE_TTL_S, not per request."""

from __future__ import annotations

from dataclasses import dataclass

from anyio import to_thread
from sqlalchemy.orm import Session, sessionmaker

from tunehub.schemas.api import Scope
from tunehub.server.cache import TTLCache
from tunehub.server.db import tokens
from tunehub.server.db.session import session_scope

TOKEN_CACHE_TTL_S = 5.0


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

    def cached_scope(self, secret: str) -> Scope | None:
        """The scope of a live token whose verdict is cached; None when the token is unknown,
        revoked, or not verified lately (the caller then asks `scope_of`)."""
        verdict = self._cache.get(tokens.hash_secret(secret))
        return None if verdict is None else verdict.scope

    def _verify(self, secret: str) -> _Verdict:
        with session_scope(self.sessions) as s:
            token = tokens.find_token(s, secret=secret)
            return _Verdict(None if token is None else Scope(token.scope))
