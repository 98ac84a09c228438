"""Tuning an attention task: the flash template's kernels are in the space the tuner searches,
measured right after the naive baseline (its seeds come first), each verified against the
reference like every other kernel; the best is the template's or a verified other one."""

from __future__ import annotations

from sqlalchemy.orm import Session, sessionmaker

from tests.signatures import attention
from tunehub.compiler.program import load
from tunehub.compiler.space import space_for
from tunehub.schemas.record import RecordStatus, TuningStatus
from tunehub.schemas.signature import TaskSignature
from tunehub.schemas.target import Target
from tunehub.server.db.records import list_records
from tunehub.server.db.session import session_scope
from tunehub.server.tuner import LocalExecutor, SearchPlan, Tuner, register_tuning, validate_task


def test_a_few_trials_of_attention_measure_the_one_pass_kernel(
    sessions: sessionmaker[Session],
) -> None:
    signature = TaskSignature.model_validate(attention(queries=24, keys=40, mask="bool"))
    with LocalExecutor() as executor:
        target = executor.resolve(Target(kind="cpu"))
        with session_scope(sessions) as s:
            tuning_id = register_tuning(
                s, validate_task(signature, {}), SearchPlan("random", 4), target=target
            )
        summary = Tuner(sessions, executor, batch_size=4).run(tuning_id)
    assert summary.status == TuningStatus.DONE
    space = space_for(load(signature), target)
    with session_scope(sessions) as s:
        records = list_records(s, tuning_id=tuning_id, limit=None)
        assert [r.config for r in records[:2]] == [space.naive(), space.seeds()[0]]
        assert records[1].config["a0.fuse"] is True
        assert all(r.status == RecordStatus.OK for r in records)  # each verified
        assert summary.best is not None
        best = next(r for r in records if r.id == summary.best.record_id)
        assert best.config["a0.fuse"] or best.status == RecordStatus.OK
