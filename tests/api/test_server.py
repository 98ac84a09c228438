"""The API as it runs in production: a uvicorn process on a loopback port, with tokens, a real
Redis, a worker daemon and the tuner daemon; a client submits over HTTP and gets a kernel."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.api.data import signature
from tests.service.redis_server import free_port
from tests.service.workers import ROOT, Fleet
from tunehub.schemas.api import RecordView, Scope, Submission, TuningView
from tunehub.server.db import tokens
from tunehub.server.db.session import make_engine, session_factory, session_scope

START_TIMEOUT_S = 60.0
TUNING_TIMEOUT_S = 300.0


@dataclass
class Server:
    url: str
    database_url: str
    redis_url: str
    env: dict[str, str]
    log: Path

    def token(self, scope: Scope) -> dict[str, str]:
        engine = make_engine(self.database_url)
        try:
            with session_scope(session_factory(engine)) as s:
                _, secret = tokens.create_token(s, name=f"test {scope}", scope=scope)
        finally:
            engine.dispose()
        return {"Authorization": f"Bearer {secret}"}


@pytest.fixture
def server(tmp_path: Path, database_url: str, redis_url: str) -> Iterator[Server]:
    """`uvicorn server.app:create_app --factory` with tokens, on a free loopback port."""
    port = free_port()
    env = {
        **os.environ,
        "TUNEHUB_HOME": str(tmp_path / "home"),
        "TUNEHUB_DATABASE_URL": database_url,
        "TUNEHUB_REDIS_URL": redis_url,
        "TUNEHUB_AUTH": "token",
        "TUNEHUB_MAX_BODY_BYTES": str(256 * 1024),
    }
    log = tmp_path / "uvicorn.log"
    command = [
        *(sys.executable, "-m", "uvicorn", "tunehub.server.app:create_app", "--factory"),
        *("--host", "127.0.0.1", "--port", str(port)),
    ]
    with log.open("wb") as out:
        proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=out)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(url, proc, log)
        yield Server(url, database_url, redis_url, env, log)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _wait_ready(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"uvicorn exited:\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"uvicorn did not become ready:\n{log.read_text()[-3000:]}")


def test_submit_tune_and_fetch_the_kernel_over_http(server: Server, fleet: Fleet) -> None:
    fleet.start(server.redis_url, 1)
    submitter = httpx.Client(base_url=server.url, headers=server.token(Scope.SUBMIT), timeout=30)
    reader = httpx.Client(base_url=server.url, headers=server.token(Scope.READ), timeout=30)

    response = submitter.post(
        "/v1/tunings", json={"task": signature(), "target": "cpu", "trials": 3}
    )
    assert response.status_code == 202, response.text
    submitted = Submission.model_validate(response.json())
    assert submitted.outcome == "created"
    assert ":" in submitted.target  # completed from the living worker

    tuner = subprocess.run(
        [
            sys.executable,
            "-m",
            "tunehub.server.tuner.service",
            "--redis",
            server.redis_url,
            "--burst",
        ],
        cwd=ROOT,
        env=server.env,
        capture_output=True,
        text=True,
        timeout=TUNING_TIMEOUT_S,
    )
    assert tuner.returncode == 0, tuner.stderr[-3000:]

    view = TuningView.model_validate(reader.get(f"/v1/tunings/{submitted.id}").json())
    assert view.status == "done", view.error
    assert view.trials_done == 3
    assert view.best is not None and view.best.artifact_sha256 is not None

    best = reader.get(
        f"/v1/workloads/{submitted.workload_key}/best", params={"target": submitted.target}
    )
    assert best.status_code == 200
    record = RecordView.model_validate(best.json())
    assert record.id == view.best.id
    kernel = reader.get(f"/v1/artifacts/{record.artifact_sha256}")
    assert kernel.status_code == 200
    assert hashlib.sha256(kernel.content).hexdigest() == record.artifact_sha256
    assert kernel.headers["content-type"] == "application/x-sharedlib"
    assert reader.get(f"/v1/artifacts/{record.artifact_sha256}/meta").status_code == 200

    # Tuned to that depth already: answered from the database, nothing queued.
    again = submitter.post("/v1/tunings", json={"task": signature(), "target": "cpu", "trials": 3})
    assert again.status_code == 200
    assert again.json()["outcome"] == "cached"
    assert again.json()["best"]["id"] == record.id


def test_limits_and_tokens_over_http(server: Server) -> None:
    reader = server.token(Scope.READ)
    assert httpx.get(f"{server.url}/v1/tunings").status_code == 401
    assert httpx.get(f"{server.url}/v1/tunings", headers=reader).status_code == 200
    assert httpx.get(f"{server.url}/healthz").json() == {"status": "ok"}

    def chunks() -> Iterator[bytes]:  # chunked: no Content-Length to refuse it by
        for _ in range(1024):
            yield b" " * 1024

    for content in (b" " * (512 * 1024), chunks()):
        response = httpx.post(
            f"{server.url}/v1/tunings", content=content, headers=reader, timeout=30
        )
        assert response.status_code == 413
        assert response.json() == {"detail": "the request body is over the limit of 262144 bytes"}
    assert "tunehub_http_requests_total" in httpx.get(f"{server.url}/metrics").text


def test_concurrent_identical_submissions_make_one_tuning(server: Server) -> None:
    headers = server.token(Scope.SUBMIT)
    body = {"task": signature(), "target": "cpu:x86_64", "trials": 5}

    def submit(_: int) -> Submission:
        response = httpx.post(f"{server.url}/v1/tunings", json=body, headers=headers, timeout=60)
        assert response.status_code == 202, response.text
        return Submission.model_validate(response.json())

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(submit, range(16)))
    assert len({r.id for r in results}) == 1
    assert sorted(r.outcome for r in results) == ["created"] + ["joined"] * 15
