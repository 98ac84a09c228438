"""Access: bearer tokens with scopes, or an open server that answers only this machine."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from sqlalchemy import select

from tests.api.conftest import MakeClient
from tests.api.data import make_token, sessions, signature
from tunehub.client.commands.admin import token
from tunehub.schemas.api import Scope
from tunehub.server.app import UnsafeBind, create_app
from tunehub.server.db import tokens
from tunehub.server.db.models import ApiToken
from tunehub.server.db.session import migrate, session_scope
from tunehub.server.settings import Settings


def test_token_mode_needs_a_live_token_of_enough_scope(make_client: MakeClient) -> None:
    client = make_client(auth="token")
    read = make_token(sessions(client), Scope.READ)
    submit = make_token(sessions(client), Scope.SUBMIT)
    admin = make_token(sessions(client), Scope.ADMIN)
    revoked = make_token(sessions(client), Scope.ADMIN, revoked=True)

    def auth(secret: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {secret}"}

    missing = client.get("/v1/tunings")
    assert missing.status_code == 401
    assert missing.headers["www-authenticate"] == "Bearer"
    assert "token is required" in missing.json()["detail"]
    for bad in ("nonsense", revoked, "x" * 10_000):
        response = client.get("/v1/tunings", headers=auth(bad))
        assert response.status_code == 401
        assert response.json() == {"detail": "the API token is invalid or revoked"}
    assert client.get("/v1/tunings", headers={"Authorization": f"Basic {read}"}).status_code == 401

    assert client.get("/v1/tunings", headers=auth(read)).status_code == 200
    body = {"task": signature(), "target": "cpu", "trials": 2}
    refused = client.post("/v1/tunings", json=body, headers=auth(read))
    assert refused.status_code == 403
    assert refused.json() == {
        "detail": "this needs a token with the submit scope; this one has read"
    }
    submitted = client.post("/v1/tunings", json=body, headers=auth(submit))
    assert submitted.status_code == 202
    cancel = f"/v1/tunings/{submitted.json()['id']}/cancel"
    assert client.post(cancel, headers=auth(submit)).status_code == 403
    assert client.post(cancel, headers=auth(admin)).status_code == 200

    # Health and metrics need no token.
    for path in ("/healthz", "/readyz", "/metrics"):
        assert client.get(path).status_code == 200, path


def test_an_open_server_answers_only_loopback_clients(make_client: MakeClient) -> None:
    assert make_client(client=("::1", 4000)).get("/v1/workers").status_code == 200
    remote = make_client(client=("10.1.2.3", 4000))
    response = remote.get("/v1/workers")
    assert response.status_code == 403
    assert "auth=open" in response.json()["detail"]
    assert remote.get("/healthz").status_code == 403  # health checks too: nobody else


def test_an_open_server_is_refused_on_a_public_address(settings: Settings) -> None:
    with pytest.raises(UnsafeBind, match="TUNEHUB_AUTH=token"):
        create_app(settings.model_copy(update={"api_host": "0.0.0.0"}))
    create_app(settings.model_copy(update={"api_host": "0.0.0.0", "auth": "token"}))
    create_app(settings.model_copy(update={"api_host": "::1"}))


def test_tokens_are_stored_hashed(settings: Settings, make_client: MakeClient) -> None:
    client = make_client(auth="token")
    secret = make_token(sessions(client), Scope.READ)
    with session_scope(sessions(client)) as s:
        stored = s.scalars(select(ApiToken)).one()
        assert stored.secret_sha256 == tokens.hash_secret(secret)
        assert secret not in (stored.name, stored.secret_sha256)


def test_the_token_commands(settings: Settings) -> None:
    url = settings.database_url
    migrate(url)
    runner = CliRunner()
    created = runner.invoke(token, ["create", "--name", "ci", "--scope", "submit", "--db", url])
    assert created.exit_code == 0, created.output
    header, secret = created.output.strip().splitlines()
    assert header == "token 1 (ci, scope submit):"
    assert secret.startswith(tokens.SECRET_PREFIX)
    listed = runner.invoke(token, ["list", "--db", url])
    assert "ci" in listed.output and secret not in listed.output
    assert runner.invoke(token, ["revoke", "1", "--db", url]).output == "token 1 (ci) is revoked\n"
    assert "ci" not in runner.invoke(token, ["list", "--db", url]).output
    assert "revoked" in runner.invoke(token, ["list", "--all", "--db", url]).output
    missing = runner.invoke(token, ["revoke", "7", "--db", url])
    assert missing.exit_code == 1 and "no token 7" in missing.output
