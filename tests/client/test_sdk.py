"""The client SDK against a real API process (uvicorn, a private redis-server, SQLite), with
kernels made by a real tuning: every call, its errors, and tokens."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.orm import Session, sessionmaker

from tests.e2e.kernels import run_and_check
from tests.service.redis_server import redis_server_binary
from tests.signatures import row_matmul
from tunehub.client.errors import (
    ApiError,
    ClientError,
    NotFoundError,
    ServerUnreachable,
    TuningTimeout,
)
from tunehub.client.sdk import Client
from tunehub.compiler.canonical import workload_key
from tunehub.compiler.program import load
from tunehub.schemas.api import Scope
from tunehub.schemas.record import RecordStatus, TuningStatus
from tunehub.schemas.signature import TaskSignature
from tunehub.schemas.target import Target
from tunehub.server.db import tokens
from tunehub.server.db.models import Artifact
from tunehub.server.db.session import make_engine, migrate, session_factory, session_scope
from tunehub.server.standalone import Stack, StackConfig, free_port
from tunehub.server.tuner import LocalExecutor, SearchPlan, Tuner, register_tuning, validate_task

SIGNATURE: dict[str, Any] = row_matmul("sdk_matmul", k=16, n=24, max_m=64)
KEY = workload_key(load(SIGNATURE))
TRIALS = 4
SYMBOLS = {"M": 8}


@dataclass(frozen=True)
class Server:
    stack: Stack
    sessions: sessionmaker[Session]
    tuning_id: int

    @property
    def url(self) -> str:
        return self.stack.url


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """An API with no tuner or workers, on a database holding one real tuning (tuned here,
    on this machine, as `tunehub tune` does)."""
    if redis_server_binary() is None:
        pytest.skip("redis-server is not on PATH")
    home = tmp_path_factory.mktemp("sdk")
    url = f"sqlite:///{home / 'tunehub.db'}"
    migrate(url)
    engine = make_engine(url)
    sessions = session_factory(engine)
    with LocalExecutor(workers=1) as executor:
        with session_scope(sessions) as s:
            tuning_id = register_tuning(
                s,
                validate_task(TaskSignature.model_validate(SIGNATURE), SYMBOLS),
                SearchPlan("random", TRIALS),
                target=executor.resolve(Target(kind="cpu")),
            )
        Tuner(sessions, executor).run(tuning_id)
    config = StackConfig(home=home, database_url=url, workers=0, tuner=False)
    with Stack(config) as stack:
        yield Server(stack, sessions, tuning_id)
    engine.dispose()


@pytest.fixture
def client(server: Server) -> Iterator[Client]:
    with Client(server.url) as hub:
        yield hub


def test_get_and_wait_return_a_finished_tuning_at_once(server: Server, client: Client) -> None:
    tuning = client.get(server.tuning_id)
    assert tuning.status == TuningStatus.DONE and tuning.trials_done == TRIALS
    assert tuning.workload_key == KEY and tuning.symbols == SYMBOLS
    seen: list[int] = []
    assert client.wait(server.tuning_id, on_progress=lambda t: seen.append(t.id)) == tuning
    assert seen == [server.tuning_id]


def test_best_by_key_and_by_signature_agree_with_the_records(client: Client) -> None:
    records = list(client.records(KEY))
    assert len(records) == TRIALS
    ok = [r for r in records if r.status == RecordStatus.OK]
    fastest = min(ok, key=lambda r: r.latency_s or 0)
    assert client.best(KEY, target="cpu").id == fastest.id
    assert client.best(KEY, target="cpu", symbols=SYMBOLS).id == fastest.id
    assert client.best(task=SIGNATURE, target="cpu", symbols=SYMBOLS).id == fastest.id
    with pytest.raises(NotFoundError, match="no verified kernel"):
        client.best(task=SIGNATURE, target="cpu", symbols={"M": 9})
    with pytest.raises(ValueError, match="not both"):
        client.best(KEY, task=SIGNATURE)


def test_records_are_paged_and_filtered(client: Client) -> None:
    everything = list(client.records(KEY))
    assert [r.id for r in client.records(KEY, page_size=1)] == [r.id for r in everything]
    ok = list(client.records(KEY, status="ok", target=everything[0].target, symbols=SYMBOLS))
    assert ok == [r for r in everything if r.status == RecordStatus.OK]
    assert list(client.records(KEY, symbols={"M": 9})) == []


def test_download_by_key_or_artifact_gives_a_kernel_that_runs(
    client: Client, tmp_path: Path
) -> None:
    best = client.best(KEY, target="cpu", symbols=SYMBOLS)
    assert best.artifact_sha256 is not None

    by_key = client.download(KEY, tmp_path / "by-key", symbols=SYMBOLS)
    meta = json.loads((by_key / "metadata.json").read_text())
    assert meta["record_id"] == best.id and meta["tuned_symbols"] == SYMBOLS
    assert meta["artifact_sha256"] == best.artifact_sha256
    run_and_check(by_key, SIGNATURE, SYMBOLS)

    by_sha = client.download(best.artifact_sha256, tmp_path / "by-sha")
    assert (by_sha / "kernel.so").read_bytes() == (by_key / "kernel.so").read_bytes()
    run_and_check(by_sha, SIGNATURE, {"M": 5})  # any M: the kernel is symbolic


def test_a_corrupted_artifact_is_refused(server: Server, client: Client, tmp_path: Path) -> None:
    sha256 = "f" * 64  # stored under a hash its bytes do not have
    with session_scope(server.sessions) as s:
        s.add(Artifact(sha256=sha256, kind="so", data=b"x", source=None, meta={}, size=1))
    with pytest.raises(ClientError, match="corrupted"):
        client.download(sha256, tmp_path / "bad")
    assert not (tmp_path / "bad").exists()


def test_wait_times_out_on_a_queued_tuning_which_can_be_cancelled(client: Client) -> None:
    # No tuner serves this server: a new tuning stays queued.
    submitted = client.submit(SIGNATURE, trials=TRIALS, symbols={"M": 3}, strategy="random")
    assert submitted.outcome == "created" and submitted.status == TuningStatus.QUEUED
    assert client.submit(SIGNATURE, trials=TRIALS, symbols={"M": 3}).id == submitted.id
    with pytest.raises(TuningTimeout, match=f"tuning {submitted.id} is still queued") as timeout:
        client.wait(submitted.id, timeout_s=0.3)
    assert timeout.value.tuning.id == submitted.id
    assert client.cancel(submitted.id).status == TuningStatus.CANCELLED
    assert client.wait(submitted.id).status == TuningStatus.CANCELLED
    with pytest.raises(ApiError, match="HTTP 409") as conflict:
        client.cancel(submitted.id)
    assert conflict.value.status_code == 409


def test_a_request_is_checked_before_it_is_sent(client: Client) -> None:
    with pytest.raises(ValueError, match="trials"):
        client.submit(SIGNATURE, trials=0)
    with pytest.raises(ValueError, match="unknown target"):
        client.submit(SIGNATURE, target="tpu")


def test_workers_of_a_server_without_any(client: Client) -> None:
    assert client.workers() == []


def test_an_unreachable_server_is_a_clear_error() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    unreachable = pytest.raises(ServerUnreachable, match=rf"cannot reach .* at {url}")
    with Client(url, retry_s=0) as hub, unreachable:
        hub.get(1)


def test_tokens_are_sent_and_refusals_explained(server: Server, tmp_path: Path) -> None:
    with session_scope(server.sessions) as s:
        _, reader = tokens.create_token(s, name="sdk-test", scope=Scope.READ)
    config = StackConfig(
        home=tmp_path,
        database_url=server.stack.config.database_url,
        redis_url=server.stack.redis_url,
        workers=0,
        tuner=False,
        env={"TUNEHUB_AUTH": "token"},
    )
    with Stack(config) as secured:
        with Client(secured.url, token=reader) as hub:
            assert hub.get(server.tuning_id).id == server.tuning_id
            with pytest.raises(ApiError, match=r"HTTP 403: .*submit scope") as refused:
                hub.submit(SIGNATURE, trials=1)
            assert refused.value.status_code == 403
        with Client(secured.url) as anonymous, pytest.raises(ApiError, match="HTTP 401"):
            anonymous.get(server.tuning_id)


def test_the_sdk_needs_only_schemas_and_httpx() -> None:
    """An application can use the SDK without the compiler, the workers or the server."""
    probe = (
        "import sys, tunehub.client.sdk, tunehub.client; "
        "print(sorted({m.removeprefix('tunehub.').split('.')[0] for m in sys.modules} & "
        "{'compiler', 'worker', 'server', 'fastapi', 'sqlalchemy', 'redis', 'rq'}))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
