"""With tokens, the API's document and its page follow the token rule (a read token) unless a
setting lists them as public; an open server serves them to its local clients."""

from __future__ import annotations

import pytest

from tests.api.conftest import MakeClient
from tests.api.data import make_token, sessions
from tunehub.schemas.api import Scope

DOCUMENTS = ["/openapi.json", "/docs"]


@pytest.mark.parametrize("path", DOCUMENTS)
def test_the_documents_need_a_token_when_tokens_are_on(make_client: MakeClient, path: str) -> None:
    client = make_client(auth="token")
    secret = make_token(sessions(client), Scope.READ)
    assert client.get(path).status_code == 401
    bogus = client.get(path, headers={"Authorization": "Bearer not-a-token"})
    assert bogus.status_code == 401
    assert "invalid" in bogus.json()["detail"]
    allowed = client.get(path, headers={"Authorization": f"Bearer {secret}"})
    assert allowed.status_code == 200, allowed.text


@pytest.mark.parametrize("path", DOCUMENTS)
def test_a_setting_makes_the_documents_public(make_client: MakeClient, path: str) -> None:
    assert make_client(auth="token", public_docs=True).get(path).status_code == 200


def test_an_open_server_serves_the_document(make_client: MakeClient) -> None:
    document = make_client().get("/openapi.json")
    assert document.status_code == 200
    assert "/v1/tunings" in document.json()["paths"]
