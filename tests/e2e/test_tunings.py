"""Tunings through the whole service: submitted over HTTP with the SDK, run by the tuner
daemon on two worker daemons, stored in the database, downloaded and run as a user would."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from tests.e2e.conftest import Service, example
from tests.e2e.kernels import SEED, run_and_check
from tunehub.client import load_kernel
from tunehub.client.sdk import Client
from tunehub.compiler.canonical import workload_key
from tunehub.compiler.inputs import random_inputs
from tunehub.compiler.program import load
from tunehub.schemas.record import RecordStatus, TuningStatus
from tunehub.server.db.records import list_records
from tunehub.server.db.session import make_engine, session_factory, session_scope

TRIALS = 8
TIMEOUT_S = 240


def signature(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(example(name).read_text())
    return data


def database_records(service: Service, key: str) -> list[Any]:
    engine = make_engine(service.database_url)
    try:
        with session_scope(session_factory(engine)) as s:
            return list_records(s, workload_key=key, limit=None)
    finally:
        engine.dispose()


def test_four_workloads_at_once_all_finish_with_verified_kernels(
    service: Service, client: Client, tmp_path: Path
) -> None:
    names = ["matmul_128", "softmax", "conv2d_3x3", "matmul_bias_relu"]
    signatures = {name: signature(name) for name in names}
    # Submitted concurrently, as four clients would.
    with ThreadPoolExecutor(len(names)) as pool:
        submitted = dict(
            zip(
                names,
                pool.map(lambda n: client.submit(signatures[n], trials=TRIALS), names),
                strict=True,
            )
        )
    assert all(s.outcome == "created" for s in submitted.values())
    assert len({s.id for s in submitted.values()}) == len(names)

    for name in names:
        tuning = client.wait(submitted[name].id, timeout_s=TIMEOUT_S)
        assert tuning.status == TuningStatus.DONE, (name, tuning.error)
        assert tuning.trials_done == TRIALS
        assert tuning.best is not None and tuning.best.status == RecordStatus.OK
        key = workload_key(load(signatures[name]))
        assert tuning.workload_key == key

        stored = database_records(service, key)
        assert len(stored) == TRIALS
        assert {r.tuning_id for r in stored} == {tuning.id}
        assert [r.id for r in client.records(key)] == [r.id for r in stored]
        best = client.best(key, target=tuning.target)
        ok = [r.latency_s for r in stored if r.status == RecordStatus.OK]
        assert best.latency_s == min(ok)
        assert best.id == tuning.best.id

        out = client.download(key, tmp_path / name, target=tuning.target)
        meta = json.loads((out / "metadata.json").read_text())
        assert meta["record_id"] == best.id and meta["artifact_sha256"] == best.artifact_sha256
        run_and_check(out, signatures[name], tuning.symbols)

    # The matmul, once more against numpy itself.
    kernel = load_kernel(tmp_path / "matmul_128")
    inputs = random_inputs(load(signatures["matmul_128"]), {}, seed=SEED)
    np.testing.assert_allclose(
        kernel(inputs["A"], inputs["B"]), inputs["A"] @ inputs["B"], rtol=1e-4, atol=1e-4
    )


def test_the_same_task_is_tuned_once_and_then_answered_from_the_database(
    client: Client,
) -> None:
    task = signature("gelu")
    first = client.submit(task, trials=TRIALS)
    second = client.submit(task, trials=TRIALS)  # while the first is queued or running
    assert first.outcome == "created"
    assert second.outcome == "joined" and second.id == first.id

    tuning = client.wait(first.id, timeout_s=TIMEOUT_S)
    assert tuning.status == TuningStatus.DONE, tuning.error
    key = tuning.workload_key
    records = [r.id for r in client.records(key)]
    assert len(records) == TRIALS

    # Lookups cost no trial...
    by_key = client.best(key, target=tuning.target)
    by_signature = client.best(task=task, target="cpu")
    assert tuning.best is not None
    assert by_key.id == by_signature.id == tuning.best.id
    # ...and neither does asking again for the same depth (or less): the answer is the
    # tuning that measured them, no new row.
    for trials in (TRIALS, TRIALS // 2):
        again = client.submit(task, trials=trials)
        assert again.outcome == "cached" and again.id == first.id
        assert again.status == TuningStatus.DONE
        assert again.best is not None and again.best.id == by_key.id
    assert [r.id for r in client.records(key)] == records
