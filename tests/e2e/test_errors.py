"""Invalid requests to the real server get a 4xx with a one-line `detail`, never a 5xx; the
SDK turns them into exceptions carrying that detail."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import Service, example
from tunehub.client.errors import ApiError, NotFoundError
from tunehub.client.sdk import Client

ZEROS = "0" * 64
MATMUL: dict[str, Any] = json.loads(example("matmul_128").read_text())


def task(**changes: Any) -> dict[str, Any]:
    compute = {**MATMUL["computes"][0], **changes}
    return {**MATMUL, "computes": [compute]}


def tuning(**fields: Any) -> dict[str, Any]:
    return {"task": MATMUL, "target": "cpu", "trials": 4, **fields}


BAD_REQUESTS: list[tuple[str, str, dict[str, Any]]] = [
    ("POST", "/v1/tunings", {"content": b"{", "headers": {"content-type": "application/json"}}),
    ("POST", "/v1/tunings", {"content": b"\xff\xfe", "headers": {"content-type": "text/plain"}}),
    ("POST", "/v1/tunings", {"json": []}),
    ("POST", "/v1/tunings", {"json": {}}),
    ("POST", "/v1/tunings", {"json": tuning(task=task(expr="foo(A[i, k])"))}),
    ("POST", "/v1/tunings", {"json": tuning(task=task(expr="A[i, k] * B[k + 1, j]"))}),
    ("POST", "/v1/tunings", {"json": tuning(task=task(expr="(" * 5000 + "A[i, k]" + ")" * 5000))}),
    ("POST", "/v1/tunings", {"json": tuning(task=task(shape=[2**20, 2**20]))}),
    ("POST", "/v1/tunings", {"json": tuning(target="gpu")}),
    ("POST", "/v1/tunings", {"json": tuning(target="cpu:pentium")}),
    ("POST", "/v1/tunings", {"json": tuning(trials=0)}),
    ("POST", "/v1/tunings", {"json": tuning(trials="8")}),
    ("POST", "/v1/tunings", {"json": tuning(trials=10**12)}),
    ("POST", "/v1/tunings", {"json": tuning(symbols={"M": 64})}),
    ("POST", "/v1/tunings", {"json": tuning(strategy="exhaustive")}),
    ("POST", "/v1/tunings", {"json": tuning(extra=1)}),
    ("POST", "/v1/tunings", {"json": {**tuning(), "task": "x" * (2 << 20)}}),
    ("GET", "/v1/tunings/0", {}),
    ("GET", "/v1/tunings/999999", {}),
    ("GET", "/v1/tunings/abc", {}),
    ("GET", f"/v1/tunings/{10**20}", {}),
    ("GET", "/v1/tunings?limit=0", {}),
    ("GET", "/v1/tunings?status=sleeping", {}),
    ("POST", "/v1/tunings/999999/cancel", {}),
    ("DELETE", "/v1/tunings", {}),
    ("GET", "/v1/workloads/xyz/best?target=cpu", {}),
    ("GET", f"/v1/workloads/{ZEROS}/best?target=cpu", {}),
    ("GET", f"/v1/workloads/{ZEROS}/best", {}),
    ("GET", f"/v1/workloads/{ZEROS}/best?target=tpu", {}),
    ("GET", f"/v1/workloads/{ZEROS}/best?target=cpu&symbol=M", {}),
    ("GET", f"/v1/workloads/{ZEROS}/records", {}),
    ("POST", "/v1/workloads/best", {"json": {"task": MATMUL}}),
    ("POST", "/v1/workloads/best", {"json": {"task": task(expr="A[i]"), "target": "cpu"}}),
    ("GET", f"/v1/artifacts/{ZEROS}", {}),
    ("GET", "/v1/artifacts/../../etc/passwd", {}),
    ("GET", "/v1/nothing", {}),
]


@pytest.mark.parametrize(("method", "path", "kwargs"), BAD_REQUESTS)
def test_an_invalid_request_gets_a_4xx_with_a_detail(
    service: Service, method: str, path: str, kwargs: dict[str, Any]
) -> None:
    response = httpx.request(method, service.url + path, timeout=30, **kwargs)
    assert 400 <= response.status_code < 500, (response.status_code, response.text[:300])
    detail = response.json()["detail"]
    assert isinstance(detail, str) and detail and "\n" not in detail


def test_the_sdk_raises_the_servers_detail(client: Client) -> None:
    with pytest.raises(ApiError, match=r"HTTP 422: .*foo") as error:
        client.submit(task(expr="foo(A[i, k])"), trials=4)
    assert error.value.status_code == 422 and "foo" in error.value.detail
    with pytest.raises(NotFoundError, match=f"no workload {ZEROS}"):
        client.best(ZEROS, target="cpu")
    with pytest.raises(NotFoundError, match="no artifact or workload"):
        client.download(ZEROS, "unused")
