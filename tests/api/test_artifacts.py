"""`/v1/artifacts/{sha256}`: the bytes with their content type, and the metadata."""

from __future__ import annotations

import hashlib

from fastapi.testclient import TestClient

from tests.api.data import add_record, key_of, signature
from tests.signatures import UNIT_AXES_SHAPES, unit_axes_trio


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
    shape = [128, 128]
    args = [{"name": n, "shape": shape, "dtype": "float32", "role": r}
            for n, r in (("A", "input"), ("B", "input"), ("C", "output"))]  # fmt: skip
    assert meta.json() == {"entry": "f", "args": args, "symbols": []}


def test_an_artifact_of_several_workloads_is_served_with_each_ones_interface(
    client: TestClient,
) -> None:
    """Three workloads whose kernels are the same bytes: the metadata asked for with a
    workload has that workload's shapes; asked for without one it is refused (which of them
    is meant cannot be guessed), and a workload that never had the artifact is a 404."""
    data = b"\x7fELF one kernel, three workloads"
    trio = unit_axes_trio()
    for sig in trio:
        add_record(client, sig, artifact=data)
    sha256 = hashlib.sha256(data).hexdigest()
    for sig, shape in zip(trio, UNIT_AXES_SHAPES, strict=True):
        meta = client.get(f"/v1/artifacts/{sha256}/meta", params={"workload": key_of(sig)})
        assert meta.status_code == 200, meta.text
        assert [a["shape"] for a in meta.json()["args"]] == [[64], shape]
        assert meta.json()["entry"] == "f"
    unnamed = client.get(f"/v1/artifacts/{sha256}/meta")
    assert unnamed.status_code == 409
    assert "workloads with different argument shapes" in unnamed.json()["detail"]
    other = key_of(signature())
    add_record(client, signature())
    wrong = client.get(f"/v1/artifacts/{sha256}/meta", params={"workload": other})
    assert wrong.status_code == 404
    assert wrong.json()["detail"] == f"artifact {sha256} is not a kernel of workload {other}"
    missing = client.get(f"/v1/artifacts/{sha256}/meta", params={"workload": "ab" * 32})
    assert missing.json()["detail"] == f"no workload {'ab' * 32}"


def test_unknown_and_malformed_hashes(client: TestClient) -> None:
    missing = "ab" * 32
    assert client.get(f"/v1/artifacts/{missing}").json() == {"detail": f"no artifact {missing}"}
    assert client.get(f"/v1/artifacts/{missing}/meta").status_code == 404
    for bad in ("xyz", "AB" * 32, "ab" * 31, "ab" * 33, "../../etc/passwd"):
        assert client.get(f"/v1/artifacts/{bad}").status_code in (404, 422), bad
