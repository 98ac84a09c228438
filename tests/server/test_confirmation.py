"""A tuning's confirmation: its best few records measured again at its end, each gaining the
new repeats and keeping the lesser median, a flaky kernel demoted, nothing else touched."""

from __future__ import annotations

import statistics
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy.orm import Session, sessionmaker

from tests.signatures import row_matmul
from tunehub.compiler.canonical import workload_key
from tunehub.compiler.program import load
from tunehub.compiler.space import space_for
from tunehub.compiler.space.space import Space
from tunehub.schemas.record import RecordStatus, TuningStatus
from tunehub.schemas.signature import TaskSignature
from tunehub.schemas.target import Target
from tunehub.server.best import best_record
from tunehub.server.db.models import Record
from tunehub.server.db.records import NewRecord, add_record, add_timings, demote, list_records
from tunehub.server.db.session import session_scope
from tunehub.server.db.tunings import get_tuning
from tunehub.server.db.workloads import upsert_workload
from tunehub.server.tuner import LocalExecutor, SearchPlan, Tuner, register_tuning, validate_task
from tunehub.server.tuner.confirmation import contenders, settle
from tunehub.worker.jobs import CandidateResult

SIGNATURE = TaskSignature.model_validate(row_matmul("confirmed_matmul", k=32, n=24, max_m=64))
REPEATS = 3
MACHINE: dict[str, Any] = {"device": "Some CPU", "driver": None, "toolkit": None, "threads": 1}


@pytest.fixture(scope="module")
def executor() -> Iterator[LocalExecutor]:
    with LocalExecutor() as executor:
        yield executor


def _tune(
    sessions: sessionmaker[Session],
    executor: LocalExecutor,
    trials: int,
    count: int,
    signature: TaskSignature = SIGNATURE,
) -> tuple[int, list[Record]]:
    """A tuning run with `count` contenders; its id and the workload's records."""
    target = executor.resolve(Target(kind="cpu"))
    with session_scope(sessions) as s:
        tuning_id = register_tuning(
            s, validate_task(signature, {}), SearchPlan("random", trials), target=target
        )
    tuner = Tuner(sessions, executor, batch_size=4, repeats=REPEATS, contenders=count)
    assert tuner.run(tuning_id).status == TuningStatus.DONE
    with session_scope(sessions) as s:
        records = list_records(s, workload_key=workload_key(load(signature)), limit=None)
        s.expunge_all()
    return tuning_id, records


def test_a_tuning_measures_its_contenders_again_and_names_the_best_after(
    sessions: sessionmaker[Session], executor: LocalExecutor
) -> None:
    tuning_id, records = _tune(sessions, executor, trials=6, count=2)

    assert len(records) == 6  # measuring again adds no record and spends no trial
    timed = {r.id: len(r.latencies_s) for r in records if r.status == RecordStatus.OK}
    assert sorted(timed.values()).count(2 * REPEATS) == 2
    assert all(n in (REPEATS, 2 * REPEATS) for n in timed.values())
    for r in records:
        if r.status == RecordStatus.OK:  # the lesser median of its measurements
            medians = [
                statistics.median(r.latencies_s[n : n + REPEATS])
                for n in range(0, len(r.latencies_s), REPEATS)
            ]
            assert r.latency_s == min(medians)
    best = min((r for r in records if r.status == RecordStatus.OK), key=lambda r: r.latency_s)
    with session_scope(sessions) as s:
        tuning = get_tuning(s, tuning_id)
        assert tuning is not None and tuning.best_record_id == best.id
        assert tuning.trials_done == 6

    # Without contenders a tuning measures nothing twice.
    _, after = _tune(sessions, executor, trials=2, count=0)
    new = [r for r in after if r.id not in timed]
    assert len(new) == 2
    assert all(len(r.latencies_s) == REPEATS for r in new if r.status == RecordStatus.OK)
    assert {r.id: len(r.latencies_s) for r in after if r.id in timed} == timed


def test_the_default_is_measured_again_after_a_slow_first_timing(
    sessions: sessionmaker[Session], executor: LocalExecutor
) -> None:
    """The space's default is a contender even where its timing (here set to a second, as
    a burst would leave it) is neither the best nor among the fastest repeats."""
    signature = TaskSignature.model_validate(row_matmul("default_matmul", k=16, n=40, max_m=32))
    _, records = _tune(sessions, executor, trials=6, count=0, signature=signature)
    space = space_for(load(signature), executor.resolve(Target(kind="cpu")))
    default = next(r for r in records if r.config_key == Space.key(space.default()))
    with session_scope(sessions) as s:
        slowed = s.get(Record, default.id)
        assert slowed is not None
        slowed.latencies_s, slowed.latency_s = [1.0] * REPEATS, 1.0
    _, after = _tune(sessions, executor, trials=1, count=2, signature=signature)
    again = next(r for r in after if r.id == default.id)
    assert len(again.latencies_s) == 2 * REPEATS and again.latency_s < 1.0


def _record(s: Session, config: dict[str, int], latencies: list[float], **kw: Any) -> Record:
    upsert_workload(
        s, key=workload_key(load(SIGNATURE)), name="m", signature=SIGNATURE.model_dump()
    )
    return add_record(
        s,
        NewRecord(
            workload_key=workload_key(load(SIGNATURE)),
            target="cpu:x86_64",
            symbols={"M": 64},
            tuning_id=None,
            config=config,
            config_key=Space.key(config),
            features=[],
            feature_version=0,
            status=kw.get("status", RecordStatus.OK),
            latency_s=statistics.median(latencies) if latencies else None,
            latencies_s=latencies,
            build_time_s=None,
            max_error=1e-6,
            error_log=None,
            machine=kw.get("machine", MACHINE),
            artifact_sha256=None,
        ),
    )


def test_contenders_are_the_best_the_default_then_the_fastest_repeats(
    sessions: sessionmaker[Session],
) -> None:
    with session_scope(sessions) as s:
        best = _record(s, {"t": 1}, [2.0, 2.0, 2.0])
        steady = _record(s, {"t": 2}, [2.1, 2.1, 2.1])
        burst = _record(s, {"t": 3}, [1.5, 9.0, 9.0])  # slowed in most of its repeats
        failed = _record(s, {"t": 4}, [], status=RecordStatus.WRONG_ANSWER)
        records = [steady, failed, burst, best]
        assert contenders(records, 2) == [best, burst]
        assert contenders(records, 9) == [best, burst, steady]
        assert contenders(records, 0) == [] == contenders([failed], 3)
        # The space's default comes right after the best, whatever its repeats.
        assert contenders(records, 2, steady.config_key) == [best, steady]
        assert contenders(records, 9, steady.config_key) == [best, steady, burst]
        assert contenders(records, 2, best.config_key) == [best, burst]


def test_settling_folds_the_new_repeats_or_demotes_a_flaky_kernel(
    sessions: sessionmaker[Session],
) -> None:
    with session_scope(sessions) as s:
        lucky = _record(s, {"t": 1}, [1.0, 1.0, 1.1])
        other = _record(s, {"t": 2}, [1.2, 1.2, 1.2])
        key = lucky.workload_key

        def best() -> Record | None:
            return best_record(s, workload_key=key, target="cpu:x86_64")

        slowed = _record(s, {"t": 3}, [1.4, 1.4, 1.4])
        ok = RecordStatus.OK
        settle(
            lucky, CandidateResult(ok, latencies_s=[1.4, 1.5, 1.5], machine=MACHINE, max_error=2e-6)
        )
        assert lucky.latencies_s == [1.0, 1.0, 1.1, 1.4, 1.5, 1.5]
        assert lucky.latency_s == 1.0 and lucky.max_error == 2e-6  # a best only gets better
        settle(slowed, CandidateResult(ok, latencies_s=[0.9, 0.8, 0.9], machine=MACHINE))
        assert slowed.latency_s == 0.9 and len(slowed.latencies_s) == 6
        assert best() is slowed

        # Another device, another thread count, or a failure that may be the machine's:
        # the record is left as it was.
        for result in (
            CandidateResult(RecordStatus.OK, latencies_s=[0.1], machine={**MACHINE, "device": "X"}),
            CandidateResult(RecordStatus.OK, latencies_s=[0.1], machine={**MACHINE, "threads": 2}),
            CandidateResult(RecordStatus.RUN_TIMEOUT, log="slow", machine=MACHINE),
            CandidateResult(RecordStatus.COMPILE_TIMEOUT, log="busy", machine=MACHINE),
        ):
            settle(other, result)
            assert other.latencies_s == [1.2, 1.2, 1.2] and other.status == RecordStatus.OK

        settle(
            other, CandidateResult(RecordStatus.WRONG_ANSWER, log="max error 3", machine=MACHINE)
        )
        assert other.status == RecordStatus.WRONG_ANSWER
        assert other.error_log == "measured again: max error 3"
        assert other.latencies_s == [1.2, 1.2, 1.2]  # its timings stay, it is never best
        settle(slowed, CandidateResult(RecordStatus.RUNTIME_ERROR, log="crashed", machine=MACHINE))
        assert best() is lucky

        with pytest.raises(ValueError, match="only an ok record"):
            add_timings(other, [1.0], None)
        with pytest.raises(ValueError, match="only an ok record"):
            demote(lucky, RecordStatus.OK, "")
