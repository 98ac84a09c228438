"""A tuning's last batch: its few best configs measured again, back to back, before it names
its best.

A timing on a shared machine is slowed by its neighbours, in bursts (one repeat of a 0.23 ms
GEMM took 1.5 ms; a burst over most of a candidate's repeats moves its median) and for minutes
(every kernel 40% slower), so a fast config measured at a bad moment loses to a slower one.
The contenders, the best so far, the space's default (its considered guess, often near the
best: a burst over its one measurement must not leave a tuning naming a slower kernel) and the
others whose fastest repeat was fastest (those a burst may have slowed), are built and
measured again in one batch; each record gains the repeats
and keeps the lesser median (`db.records.add_timings`): noise only ever adds time. A contender
whose kernel now computes a wrong answer or crashes is demoted: a kernel that is right only
sometimes can never be the best."""

from __future__ import annotations

from collections.abc import Sequence

from tunehub.schemas.record import RecordStatus
from tunehub.server.db.models import Record
from tunehub.server.db.records import add_timings, demote, device_identity
from tunehub.worker.jobs import CandidateResult

# Records a tuning measures again at its end: a few seconds of builds and timings, against a
# tuning's minute or more.
CONTENDERS = 4

# Failures of a measured-again kernel that say the kernel itself is flaky; the others (a
# build that failed or timed out, a run past its time limit) may be the machine's.
FLAKY = (RecordStatus.WRONG_ANSWER, RecordStatus.RUNTIME_ERROR)


def contenders(records: Sequence[Record], count: int, default_key: str = "") -> list[Record]:
    """The `ok` records worth measuring again, at most `count`: the best (by latency) first,
    then the default's (config key `default_key`), then the others by their fastest
    repeat."""
    timed = [r for r in records if r.status == RecordStatus.OK and r.latencies_s]
    if count < 1 or not timed:
        return []
    best = min(timed, key=lambda r: (r.latency_s, r.id))
    rest = sorted((r for r in timed if r is not best), key=lambda r: (min(r.latencies_s), r.id))
    rest.sort(key=lambda r: r.config_key != default_key)  # stable: the default first
    return [best, *rest[: count - 1]]


def settle(record: Record, result: CandidateResult) -> None:
    """Fold `result`, the record's config measured again, into `record`, unless it says
    nothing about the record: it ran on another device or thread count, or failed in a way
    that need not be the kernel's."""
    if result.machine.get("threads") != record.machine.get("threads"):
        return
    if device_identity(result.machine) != (record.device, record.driver, record.toolkit):
        return
    if result.status is RecordStatus.OK:
        add_timings(record, result.latencies_s, result.max_error)
    elif result.status in FLAKY:
        demote(record, result.status, result.log)
