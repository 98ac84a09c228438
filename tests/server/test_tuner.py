"""The tuner end to end: real spaces, real builds and measurements, a real database."""

from __future__ import annotations

import itertools
import json
import platform
import random
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.orm import Session, sessionmaker

from tests.signatures import row_matmul
from tunehub.compiler import features
from tunehub.compiler.program import load
from tunehub.compiler.space import space_for
from tunehub.compiler.space.space import Space
from tunehub.schemas.record import RecordStatus, TuningStatus
from tunehub.schemas.signature import TaskSignature
from tunehub.schemas.target import Target
from tunehub.server.db.artifacts import get_artifact
from tunehub.server.db.records import list_records
from tunehub.server.db.session import session_scope
from tunehub.server.db.tunings import get_tuning, update_tuning
from tunehub.server.tuner import (
    LocalExecutor,
    Progress,
    SearchPlan,
    Tuner,
    featurizer,
    register_tuning,
    resolve_symbols,
    validate_task,
)
from tunehub.server.tuner.featurizer import FeaturePool, Featurizer

# A small symbolic matmul: cheap to build and measure, and it exercises symbol defaults.
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SIGNATURE = TaskSignature.model_validate(row_matmul("tiny_matmul", k=32, n=24, max_m=256))


@pytest.fixture(scope="module")
def executor() -> Iterator[LocalExecutor]:
    """One process pool for the module: starting one costs about a second."""
    with LocalExecutor() as executor:
        yield executor


def _submit(
    sessions: sessionmaker[Session], target: Target, trials: int, strategy: str = "evolutionary"
) -> int:
    with session_scope(sessions) as s:
        return register_tuning(
            s, validate_task(SIGNATURE, {}), SearchPlan(strategy, trials), target=target
        )


def test_tuning_measures_naive_first_persists_everything_and_resumes(
    sessions: sessionmaker[Session], executor: LocalExecutor
) -> None:
    target = executor.resolve(Target(kind="cpu"))
    tuner = Tuner(sessions, executor, batch_size=3)
    seen: list[Progress] = []

    first = tuner.run(_submit(sessions, target, trials=5), seen.append)

    assert first.status == TuningStatus.DONE
    assert first.trials == 5
    assert [p.trials_done for p in seen] == [3, 5]
    assert first.symbols == {"M": 64}  # the documented default
    naive = space_for(load(SIGNATURE), target).naive()
    with session_scope(sessions) as s:
        records = list_records(s, tuning_id=first.tuning_id, limit=None)
        assert len(records) == 5
        assert records[0].config == naive  # the baseline goes first
        assert records[1].config == space_for(load(SIGNATURE), target).seeds()[0]  # then seeds
        assert records[0].status == RecordStatus.OK
        assert first.baseline_latency_s == records[0].latency_s
        assert all(r.target == str(target) and r.machine for r in records)
        assert first.best is not None and first.best.artifact_sha256 is not None
        artifact = get_artifact(s, first.best.artifact_sha256)
        assert artifact is not None and artifact.data and artifact.source
        assert artifact.meta["entry"]
        tuning = get_tuning(s, first.tuning_id)
        assert tuning is not None and tuning.best_record_id == first.best.record_id
        assert first.best.latency_s == min(r.latency_s for r in records if r.latency_s)

    # A second tuning of the same workload reuses every measurement: nothing is measured twice,
    # the naive config is not measured again, and the best can only get better.
    second = tuner.run(_submit(sessions, target, trials=4, strategy="random"))
    with session_scope(sessions) as s:
        all_records = list_records(s, workload_key=first.workload_key, limit=None)
        again = list_records(s, tuning_id=second.tuning_id, limit=None)
    assert len(again) == 4
    keys = [r.config_key for r in all_records]
    assert len(keys) == len(set(keys)) == 9
    assert Space.key(naive) not in {r.config_key for r in again}
    assert second.baseline_latency_s == first.baseline_latency_s
    assert second.best is not None and second.best.latency_s <= first.best.latency_s


def test_the_default_is_measured_right_after_the_seeds(
    sessions: sessionmaker[Session], executor: LocalExecutor
) -> None:
    """A softmax has no seeds on a CPU: its default (the fused row group) goes second."""
    target = executor.resolve(Target(kind="cpu"))
    signature = TaskSignature.model_validate(json.loads((EXAMPLES / "softmax.json").read_text()))
    space = space_for(load(signature), target)
    assert space.seeds() == [] and space.default() != space.naive()
    with session_scope(sessions) as s:
        tuning_id = register_tuning(
            s, validate_task(signature, {}), SearchPlan("random", 2), target=target
        )
    summary = Tuner(sessions, executor, batch_size=2).run(tuning_id)
    assert summary.status == TuningStatus.DONE
    with session_scope(sessions) as s:
        records = list_records(s, tuning_id=tuning_id, limit=None)
        assert [r.config for r in records] == [space.naive(), space.default()]


def test_cancelling_stops_at_the_next_batch(
    sessions: sessionmaker[Session], executor: LocalExecutor
) -> None:
    target = executor.resolve(Target(kind="cpu"))
    tuning_id = _submit(sessions, target, trials=20)

    def cancel(progress: Progress) -> None:
        with session_scope(sessions) as s:
            update_tuning(s, progress.tuning_id, status=TuningStatus.CANCELLED)

    summary = Tuner(sessions, executor, batch_size=2).run(tuning_id, cancel)
    assert summary.status == TuningStatus.CANCELLED
    assert summary.trials == 2


def test_a_tuning_stops_when_the_space_is_exhausted(
    sessions: sessionmaker[Session], executor: LocalExecutor
) -> None:
    signature = TaskSignature.model_validate(
        {
            "version": 1,
            "name": "add_one",
            "inputs": [{"name": "X", "shape": [8], "dtype": "float32"}],
            "computes": [
                {"name": "Y", "axes": ["i"], "shape": [8], "dtype": "float32", "expr": "X[i] + 1.0"}
            ],
            "outputs": ["Y"],
        }
    )
    target = executor.resolve(Target(kind="cpu"))
    space = space_for(load(signature), target)
    combos = itertools.product(*space.knobs.values())
    valid = sum(space.check(dict(zip(space.knobs, c, strict=True))) is None for c in combos)
    assert valid < 50, "pick a smaller program: this test needs a space it can exhaust"
    with session_scope(sessions) as s:
        tuning_id = register_tuning(
            s, validate_task(signature, {}), SearchPlan("evolutionary", 50), target=target
        )
    summary = Tuner(sessions, executor).run(tuning_id)
    assert summary.status == TuningStatus.DONE
    assert summary.trials == valid


def test_a_tuning_that_cannot_run_is_marked_failed(
    sessions: sessionmaker[Session], executor: LocalExecutor
) -> None:
    # Code for the other architecture: no local executor can run it, GPU or not.
    foreign = "aarch64-neon" if platform.machine() == "x86_64" else "x86_64-avx512"
    tuning_id = _submit(sessions, Target(kind="cpu", isa=foreign), trials=2)
    with pytest.raises(ValueError, match="cannot run"):
        Tuner(sessions, executor).run(tuning_id)
    with session_scope(sessions) as s:
        tuning = get_tuning(s, tuning_id)
        assert tuning is not None
        assert tuning.status == TuningStatus.FAILED
        assert tuning.error and f"cannot run {foreign} code" in tuning.error


def test_symbol_values_default_and_are_checked() -> None:
    program = load(SIGNATURE)
    assert resolve_symbols(program, {}) == {"M": 64}
    assert resolve_symbols(program, {"M": 7}) == {"M": 7}
    with pytest.raises(ValueError, match=r"outside its range \[1, 256\]"):
        resolve_symbols(program, {"M": 1000})
    with pytest.raises(ValueError, match="unknown symbol N"):
        resolve_symbols(program, {"N": 3})


def test_stored_feature_vectors_stand_in_for_extraction() -> None:
    """A record's stored vector (with what only its build knew) is what the model learns from;
    a config without one, or with one of another feature version, is extracted."""
    program = load(SIGNATURE.model_dump())
    target = Target(kind="cpu", isa="x86_64")
    symbols = resolve_symbols(program, {})
    space = space_for(program, target)
    stored, old, fresh = space.naive(), space.default(), space.sample(random.Random(1))
    featurize = Featurizer(SIGNATURE.model_dump(), target, symbols)
    featurize.remember(stored, [7.0] * 3, features.FEATURE_VERSION)
    featurize.remember(old, [5.0] * 3, features.FEATURE_VERSION - 1)
    assert featurize([stored, old, fresh]) == [
        [7.0] * 3,
        list(features.extract(program, target, old, symbols).values()),
        list(features.extract(program, target, fresh, symbols).values()),
    ]


def test_a_feature_pool_extracts_in_order_what_this_process_would() -> None:
    """Spread over processes in shares, the vectors come back in the configs' order, and a
    config the compiler rejects gets None (as in this process)."""
    document = SIGNATURE.model_dump()
    program, target = load(document), Target(kind="cpu", isa="x86_64-avx2")
    symbols = resolve_symbols(program, {})
    space, rng = space_for(program, target), random.Random(2)
    configs = [space.sample(rng) for _ in range(3 * featurizer.MIN_SHARE)]
    configs.insert(5, {**space.naive(), next(iter(space.knobs)): "no such value"})
    expected = [list(features.extract(program, target, c, symbols).values()) for c in configs[6:]]
    with FeaturePool(2) as pool:
        pooled = Featurizer(document, target, symbols, pool)(configs)
    assert pooled[5] is None
    assert pooled[6:] == expected and len(pooled) == len(configs)
    assert pooled == Featurizer(document, target, symbols)(configs)
