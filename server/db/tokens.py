"""API tokens: created with a random secret, stored as its sha256, looked up by that hash.

The secret (`thk_` and 43 URL-safe characters, 256 random bits) is returned once, by
`create_token`; the database keeps only its sha256. A high-entropy secret needs no slow,
salted hash: nobody can guess one, and a plain sha256 lets `find_token` be one indexed lookup
per request. Like the other data-access modules, these functions flush but never commit.
"""

from __future__ import annotations

import hashlib
import secrets

from sqlalchemy import select
from sqlalchemy.orm import Session

from tunehub.schemas.api import Scope
from tunehub.server.db.models import ApiToken, utcnow

SECRET_PREFIX = "thk_"


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def create_token(s: Session, *, name: str, scope: Scope) -> tuple[ApiToken, str]:
    """A new token and its secret: the only time the secret is ever available."""
    secret = SECRET_PREFIX + secrets.token_urlsafe(32)
    token = ApiToken(name=name, secret_sha256=hash_secret(secret), scope=scope, created_at=utcnow())
    s.add(token)
    s.flush()
    return token, secret


def list_tokens(s: Session, *, include_revoked: bool = False) -> list[ApiToken]:
    """Oldest first."""
    query = select(ApiToken).order_by(ApiToken.id)
    if not include_revoked:
        query = query.where(ApiToken.revoked_at.is_(None))
    return list(s.scalars(query))


def revoke_token(s: Session, *, token_id: int) -> ApiToken:
    """Revoke a token (kept, with the time, for audit); revoking twice keeps the first time.
    Raises `LookupError` for an unknown id."""
    token = s.get(ApiToken, token_id)
    if token is None:
        raise LookupError(f"no token {token_id}")
    if token.revoked_at is None:
        token.revoked_at = utcnow()
        s.flush()
    return token


def find_token(s: Session, *, secret: str) -> ApiToken | None:
    """The live (unrevoked) token whose secret this is."""
    query = select(ApiToken).where(
        ApiToken.secret_sha256 == hash_secret(secret), ApiToken.revoked_at.is_(None)
    )
    return s.scalars(query).first()
