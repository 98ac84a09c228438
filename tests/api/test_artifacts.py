"""`/v1/artifacts/{sha256}`: the bytes with their content type, and the metadata."""

from __future__ import annotations

import hashlib

from fastapi.testclient import TestClient

from tests.api.data import add_record, signature


def test_an_artifact_is_served_by_its_hash(client: TestClient) -> None:
    data = b"\x7fELF a kernel"
    record = add_record(client, signature(), artifact=data)
    sha256 = hashlib.sha256(data).hexdigest()
    assert record.artifact_sha256 == sha256
    response = client.get(f"/v1/artifacts/{sha256}")
    assert response.status_code == 200
    assert response.content == data
    assert response.headers["content-type"] == "application/x-sharedlib"
    assert response.headers["etag"] == f'"{sha256}"'
    assert "immutable" in response.headers["cache-control"]
    assert f"{sha256}.so" in response.headers["content-disposition"]
    meta = client.get(f"/v1/artifacts/{sha256}/meta")
    assert meta.status_code == 200
    assert meta.json() == {"entry": "f"}


def test_unknown_and_malformed_hashes(client: TestClient) -> None:
    missing = "ab" * 32
    assert client.get(f"/v1/artifacts/{missing}").json() == {"detail": f"no artifact {missing}"}
    assert client.get(f"/v1/artifacts/{missing}/meta").status_code == 404
    for bad in ("xyz", "AB" * 32, "ab" * 31, "ab" * 33, "../../etc/passwd"):
        assert client.get(f"/v1/artifacts/{bad}").status_code in (404, 422), bad
