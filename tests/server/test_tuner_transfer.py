"""The tuner's learned search: model-guided tunings train on other workloads' records of the
same target (transfer), save their model, and never measure a config twice.

Candidates are "measured" by a synthetic executor (features from the real compiler, latency
from a formula), so these tests exercise the search and the database, not gcc."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from sqlalchemy.orm import Session, sessionmaker

from tunehub.compiler import features
from tunehub.compiler.program import load
from tunehub.compiler.space import space_for
from tunehub.compiler.space.space import Config, Space
from tunehub.schemas.record import RecordStatus
from tunehub.schemas.signature import TaskSignature
from tunehub.schemas.target import Target
from tunehub.server.db.cost_models import latest_cost_model
from tunehub.server.db.records import NewRecord, add_record, list_records
from tunehub.server.db.session import session_scope
from tunehub.server.db.workloads import upsert_workload
from tunehub.server.tuner import (
    Executor,
    SearchPlan,
    Tuner,
    featurizer,
    register_tuning,
    validate_task,
)
from tunehub.worker.jobs import CandidateRequest, CandidateResult

TARGET = Target(kind="cpu", isa="x86_64-avx512")


def matmul(name: str, m: int, k: int, n: int) -> TaskSignature:
    return TaskSignature.model_validate(
        {
            "version": 1,
            "name": name,
            "inputs": [
                {"name": "A", "shape": [m, k], "dtype": "float32"},
                {"name": "B", "shape": [k, n], "dtype": "float32"},
            ],
            "computes": [
                {
                    "name": "C",
                    "axes": ["i", "j"],
                    "shape": [m, n],
                    "dtype": "float32",
                    "reduce": {"op": "sum", "axes": {"k": k}},
                    "expr": "A[i, k] * B[k, j]",
                }
            ],
            "outputs": ["C"],
        }
    )


OLD = matmul("old", 256, 128, 256)
NEW = matmul("new", 96, 64, 160)


def tile_latency(config: Config) -> float:
    """Fastest with an 8 x 2-vector register tile, as on the real machine; the plain nest
    (mr = 0) slowest. Features see the tile, so what one matmul teaches holds for another."""
    mr, nv = int(config["s0.mr"]), int(config["s0.nv"])
    return 1e-3 * (1 + (mr - 8) ** 2 / 4 + 2 * (nv - 2) ** 2 + 30 * (mr == 0))


class SyntheticExecutor(Executor):
    """Features from the compiler, latencies from `tile_latency`; nothing is built."""

    parallelism = 1

    def resolve(self, target: Target) -> Target:
        return TARGET

    def run(self, requests: Sequence[CandidateRequest]) -> list[CandidateResult]:
        results = []
        for r in requests:
            program = load(TaskSignature.model_validate(r.signature))
            latency = tile_latency(r.config)
            results.append(
                CandidateResult(
                    RecordStatus.OK,
                    latency_s=latency,
                    latencies_s=[latency],
                    features=features.extract(program, TARGET, r.config, r.symbols),
                    feature_version=features.FEATURE_VERSION,
                    machine={"kind": "synthetic"},
                    measured=True,
                )
            )
        return results


def tune(
    sessions: sessionmaker[Session], signature: TaskSignature, trials: int, strategy: str
) -> int:
    with session_scope(sessions) as s:
        tuning_id = register_tuning(
            s, validate_task(signature, {}), SearchPlan(strategy, trials), target=TARGET
        )
    Tuner(sessions, SyntheticExecutor(), batch_size=8).run(tuning_id)
    return tuning_id


def test_a_new_workloads_first_batch_is_chosen_by_what_other_workloads_taught(
    sessions: sessionmaker[Session],
) -> None:
    tune(sessions, OLD, trials=48, strategy="random")
    version = features.FEATURE_VERSION
    with session_scope(sessions) as s:
        assert latest_cost_model(s, target=TARGET, feature_version=version) is None

    new_id = tune(sessions, NEW, trials=8, strategy="model")  # the naive config, then 7
    with session_scope(sessions) as s:
        records = list_records(s, tuning_id=new_id, limit=None)
        model = latest_cost_model(s, target=TARGET, feature_version=version)
        assert model is not None and model.n_train == 48 + 8  # saved, with what it learned
    space = space_for(load(NEW), TARGET)
    assert records[0].config == space.naive()
    first = [tile_latency(r.config) for r in records[1:]]
    rng = random.Random(0)
    uniform = [tile_latency(space.sample(rng)) for _ in range(400)]
    assert np.median(first) < np.median(uniform) / 2
    keys = [r.config_key for r in records]
    assert len(set(keys)) == len(keys)


def test_transfer_takes_the_newest_records_of_other_workloads_of_this_target(
    sessions: sessionmaker[Session], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(featurizer, "TRANSFER_RECORDS", 4)
    version = features.FEATURE_VERSION
    with session_scope(sessions) as s:
        for key in ("w_old", "w_new"):
            upsert_workload(s, key=key, name=key, signature={})

        def add(key: str, latency: float | None, **changes: object) -> None:
            values: dict[str, object] = {
                "workload_key": key,
                "target": TARGET,
                "symbols": {"M": 64},
                "tuning_id": None,
                "config": {"x": latency},
                "features": [1.0, 2.0],
                "feature_version": version,
                "status": RecordStatus.OK if latency is not None else RecordStatus.RUNTIME_ERROR,
                "latency_s": latency,
                "latencies_s": [],
                "build_time_s": None,
                "max_error": None,
                "error_log": None,
                "machine": {},
                "artifact_sha256": None,
            }
            fields: dict[str, Any] = {**values, **changes}
            add_record(s, NewRecord(**fields, config_key=Space.key(fields["config"])))

        add("w_old", 9.0)  # the oldest: beyond the cap
        add("w_old", 1.0)
        add("w_old", None)  # a failure teaches too (throughput 0)
        add("w_old", 2.0, feature_version=version - 1)  # features of another version
        add("w_old", 3.0, target="cpu:x86_64-avx2")  # another target
        add("w_new", 4.0, symbols={"M": 8})  # the same workload at other symbol values
        add("w_new", 5.0)  # the tuned workload itself: it comes through `known`

        prior = featurizer.transfer_set(s, "w_new", TARGET, {"M": 64})
    assert prior.latencies == [1.0, None, 4.0]
    assert prior.groups[0] == prior.groups[1] != prior.groups[2]
    assert prior.features == [[1.0, 2.0]] * 3
