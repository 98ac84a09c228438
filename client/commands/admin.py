"""The `tunehub token` and `tunehub api` commands (`services.COMMANDS` adds them).

Thin: they parse options and call `server.db.tokens` and `server.app.serve`. The service stack
is imported inside the commands, so the client imports none of it until one runs.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import click

from tunehub.schemas.api import Scope

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

_DB_OPTION = click.option(
    "--db", "db_url", help="Database URL (default: TUNEHUB_DATABASE_URL or ~/.tunehub)."
)


@click.group()
def token() -> None:
    """Manage API tokens (needed when the server runs with TUNEHUB_AUTH=token)."""


@token.command("create")
@click.option("--name", required=True, help="Who or what the token is for.")
@click.option(
    "--scope",
    type=click.Choice([s.value for s in Scope]),
    default=Scope.READ.value,
    show_default=True,
    help="read: lookups; submit: also tunings; admin: also cancelling.",
)
@_DB_OPTION
def create(name: str, scope: str, db_url: str | None) -> None:
    """Create a token and print its secret: it is shown this once, and only its hash is kept."""
    from tunehub.server.db import tokens

    with _session(db_url) as s:
        created, secret = tokens.create_token(s, name=name, scope=Scope(scope))
        click.echo(f"token {created.id} ({created.name}, scope {created.scope}):")
    click.echo(secret)


@token.command("list")
@click.option("--all", "include_revoked", is_flag=True, help="Include revoked tokens.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array.")
@_DB_OPTION
def list_(include_revoked: bool, as_json: bool, db_url: str | None) -> None:
    """List tokens (never their secrets)."""
    from tunehub.server.db import tokens

    with _session(db_url) as s:
        rows = [
            {
                "id": t.id,
                "name": t.name,
                "scope": str(t.scope),
                "created_at": t.created_at.isoformat(),
                "revoked_at": t.revoked_at.isoformat() if t.revoked_at else None,
            }
            for t in tokens.list_tokens(s, include_revoked=include_revoked)
        ]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    for row in rows:
        revoked = f"  revoked {row['revoked_at']}" if row["revoked_at"] else ""
        click.echo(
            f"{row['id']:>5}  {row['scope']:<6}  {row['name']}  {row['created_at']}{revoked}"
        )


@token.command("revoke")
@click.argument("token_id", type=click.IntRange(min=1))
@_DB_OPTION
def revoke(token_id: int, db_url: str | None) -> None:
    """Revoke a token; servers stop accepting it within seconds (their cache's lifetime)."""
    from tunehub.server.db import tokens

    with _session(db_url) as s:
        try:
            revoked = tokens.revoke_token(s, token_id=token_id)
        except LookupError as exc:
            raise click.ClickException(str(exc)) from None
        click.echo(f"token {revoked.id} ({revoked.name}) is revoked")


@click.command()
@click.option("--host", help="Address to bind (default: TUNEHUB_API_HOST or 127.0.0.1).")
@click.option(
    "--port", type=click.IntRange(1, 65535), help="Port (default: TUNEHUB_API_PORT or 8000)."
)
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="API processes sharing the port (one per core serves the most lookups).",
)
def api(host: str | None, port: int | None, workers: int) -> None:
    """Serve the HTTP API. Without tokens (TUNEHUB_AUTH=open, the default) only on loopback."""
    from tunehub.server.app import UnsafeBind, serve

    try:
        serve(host=host, port=port, workers=workers)
    except UnsafeBind as exc:
        raise click.ClickException(str(exc)) from None


@contextmanager
def _session(db_url: str | None) -> Iterator[Session]:
    """One transaction on the migrated database at `db_url` (or the settings')."""
    from tunehub.server.db.session import make_engine, migrate, session_factory, session_scope
    from tunehub.server.settings import get_settings

    url = db_url or get_settings().database_url
    migrate(url)
    engine = make_engine(url)
    try:
        with session_scope(session_factory(engine)) as s:
            yield s
    finally:
        engine.dispose()
