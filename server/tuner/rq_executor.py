"""RQExecutor: candidates built and measured by `tunehub worker` daemons, through Redis.

Each candidate goes through two RQ jobs, sequenced here rather than with RQ dependencies: a
build job on `tunehub:build:<target>`, then (if it built) a measure job, carrying the build's
result, on `tunehub:measure:<target>`. The tuner waits for the batch by polling the jobs; a
finished job's result stays in Redis until the tuner has stored the batch in the database
(`stored` deletes the jobs then), so a worker that dies after finishing a job loses nothing,
and results do not pile up in Redis (RESULT_TTL_S bounds those of a tuner that died first).

Two kinds of failure, never confused:
- the candidate's own (invalid config, compile error, crash, timeout, wrong answer): the job
  functions return them as ordinary `CandidateResult`s, recorded as they are, never retried;
- the infrastructure's: the job raised in the worker (an RQ timeout, a bug, a version skew),
  its worker died holding it (its registration expired: see `worker.registry`), it vanished
  from Redis, or it overran its timeout. The job is sent again, up to `max_attempts` times in
  all for each phase; a candidate that fails that often (one that kills every worker it
  meets, say) is recorded as a compile error (build) or runtime error (measure) whose log
  lists every attempt, so that one candidate cannot stop a tuning.
A queue that no living worker serves for `worker_wait_s` stops the batch with RuntimeError:
the fleet, not the candidates, is missing.

Redis itself going away is neither: the executor waits for it (one log line each way), then
sends again the jobs a restarted Redis lost, at the phase they were in, without counting an
attempt (`_forget_vanished`). The batch goes on; nothing already returned is lost.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from redis import Redis
from redis.exceptions import RedisError
from rq import Queue
from rq.job import Job, JobStatus

from tunehub.schemas.record import RecordStatus
from tunehub.schemas.target import Target
from tunehub.server.tuner.executor import Executor
from tunehub.worker.jobs import CandidateRequest, CandidateResult, build_candidate
from tunehub.worker.measure_lock import measure
from tunehub.worker.outage import Outage
from tunehub.worker.queues import Phase, parse_queue, queue_name
from tunehub.worker.registry import HEARTBEAT_S, WorkerInfo, list_workers

# Job timeouts are the candidate's own limits plus room for what comes around them: lowering
# and features for a build; the reference outputs, the measuring child's start-up and the wait
# for the machine's measure lock for a measurement. The candidate's limits fire first and make
# ordinary records; an RQ timeout means the worker itself got stuck.
BUILD_MARGIN_S = 120
MEASURE_MARGIN_S = 600
# How long a job that overran its timeout may still be reported by a living worker.
OVERRUN_GRACE_S = 60
# Finished results outlive any batch by far: a tuner that is slow to collect loses nothing.
# Stored ones are deleted at once (`RQExecutor.stored`); this bounds those never collected.
RESULT_TTL_S = 6 * 3600
FAILURE_TTL_S = 7 * 24 * 3600  # failed jobs stay for operators to read (`rq info`, dashboards)
MAX_ATTEMPTS = 3
# A queued job absent from its queue this long was taken by a worker that died before it
# marked the job started (RQ moves it to an intermediate list first).
STRANDED_S = 5.0
# After a Redis outage, the workers register again with their next heartbeat.
REREGISTER_S = HEARTBEAT_S + 1

log = logging.getLogger(__name__)

_FAILED = (JobStatus.FAILED, JobStatus.STOPPED, JobStatus.CANCELED)


@dataclass
class _Flight:
    """One candidate on its way through the workers."""

    request: CandidateRequest
    target: Target
    phase: Phase = Phase.BUILD
    job_id: str = ""
    built: CandidateResult | None = None
    failures: list[str] = field(default_factory=list)  # of the current phase
    result: CandidateResult | None = None
    stranded_since: float | None = None


class RQExecutor(Executor):
    """Sends candidates to the worker daemons listening on `redis` (which it does not close).

    `retries` counts the jobs sent again after an infrastructure failure, for monitoring.
    `wait_for_redis` False raises RedisError at once instead of waiting (the API, which
    answers 503 rather than keep a request waiting).
    """

    def __init__(
        self,
        redis: Redis,
        *,
        max_attempts: int = MAX_ATTEMPTS,
        poll_s: float = 0.1,
        worker_wait_s: float = 300.0,
        wait_for_redis: bool = True,
    ) -> None:
        self.redis = redis
        self.wait_for_redis = wait_for_redis
        self.max_attempts = max_attempts
        self.poll_s = poll_s
        self.worker_wait_s = worker_wait_s
        self.retries = 0
        self._unserved_since: dict[str, float] = {}
        self._collected: list[str] = []  # finished jobs whose results `run` returned
        self._outage = Outage("Redis", log, (RedisError,))

    @property
    def parallelism(self) -> int:
        """The living workers that build: each builds one candidate at a time."""
        workers = self._workers()
        return max(1, sum(any(_phase(q) is Phase.BUILD for q in w.queues) for w in workers))

    def resolve(self, target: Target) -> Target:
        """`target` if living workers serve both its queues; for `cpu`/`cuda`, the ISA or arch
        that most living workers measure for."""
        served = _served_targets(self._workers())
        if target.complete:
            if target in served:
                return target
            alive = ", ".join(sorted(map(str, served))) or "none"
            raise ValueError(
                f"no living worker serves {target} (served: {alive}); "
                f"start `tunehub worker` on a {target} machine"
            )
        matches = sorted((t for t in served if t.kind == target.kind), key=str)
        if not matches:
            raise ValueError(
                f"no living worker serves a {target.kind} target: start `tunehub worker`"
            )
        return max(matches, key=served.__getitem__)

    def measure_threads(self, target: Target) -> int:
        """The smallest thread count the living workers of `target` offer for measurements."""
        name = queue_name(Phase.MEASURE, target)
        offers = [w.threads for w in self._workers() if name in w.queues]
        if not offers:
            raise ValueError(f"no living worker measures {target}")
        return min(offers)

    def run(self, requests: Sequence[CandidateRequest]) -> list[CandidateResult]:
        flights = [_Flight(r, Target(**r.target)) for r in requests]
        try:
            while pending := [f for f in flights if f.result is None]:
                try:
                    self._advance(pending)
                except RedisError as exc:
                    if not self.wait_for_redis:
                        raise
                    self._outage.failed(exc)  # logged once; the next `_advance` recovers
                    continue
                if any(f.result is None for f in pending):
                    time.sleep(self.poll_s)
        finally:
            self._withdraw([f for f in flights if f.result is None])
        return [f.result for f in flights if f.result is not None]

    def _advance(self, pending: list[_Flight]) -> None:
        """One step of the batch: after an outage, find the jobs Redis lost; send the flights
        without a job; poll the others."""
        if self._outage.down:
            self.redis.ping()  # raises again while Redis is still down
            self._outage.ok()
            time.sleep(REREGISTER_S)
            self._forget_vanished(pending)
        for flight in pending:
            if not flight.job_id:
                self._send(flight, flight.phase)
        self._poll(pending)

    def _forget_vanished(self, pending: list[_Flight]) -> None:
        """Flights whose jobs a restarted Redis lost are sent again, at the phase they were
        in (a built candidate keeps its build), without counting an attempt: the outage was
        not the candidate's failure."""
        jobs = Job.fetch_many([f.job_id for f in pending if f.job_id], connection=self.redis)
        sent = iter(jobs)
        for flight in pending:
            if flight.job_id and next(sent) is None:
                log.info(
                    "%s job %s was lost with Redis: sending it again", flight.phase, flight.job_id
                )
                flight.job_id, flight.stranded_since = "", None

    def _workers(self) -> list[WorkerInfo]:
        """The living workers, read through Redis outages; after one, read again once the
        workers have had the time to register again."""
        while True:
            try:
                workers = list_workers(self.redis)
            except RedisError as exc:
                if not self.wait_for_redis:
                    raise
                self._outage.failed(exc)
                continue
            if not self._outage.ok():
                return workers
            time.sleep(REREGISTER_S)

    def _send(self, flight: _Flight, phase: Phase) -> None:
        request = flight.request
        queue = Queue(queue_name(phase, flight.target), connection=self.redis)
        if phase is Phase.BUILD:
            timeout = request.build_timeout_s + BUILD_MARGIN_S
            job = queue.enqueue(
                build_candidate,
                request,
                job_timeout=math.ceil(timeout),
                result_ttl=RESULT_TTL_S,
                failure_ttl=FAILURE_TTL_S,
                description=f"build {_describe(request)}",
            )
        else:
            timeout = request.run_timeout_s + MEASURE_MARGIN_S
            job = queue.enqueue(
                measure,
                request,
                flight.built,
                job_timeout=math.ceil(timeout),
                result_ttl=RESULT_TTL_S,
                failure_ttl=FAILURE_TTL_S,
                description=f"measure {_describe(request)}",
            )
        flight.phase, flight.job_id, flight.stranded_since = phase, job.id, None

    def _poll(self, pending: list[_Flight]) -> None:
        jobs = Job.fetch_many([f.job_id for f in pending], connection=self.redis)
        # Read after the jobs: a worker that registered later cannot own one of them yet.
        workers = list_workers(self.redis)
        alive = {w.name for w in workers}
        served = {q for w in workers for q in w.queues}
        for flight, job in zip(pending, jobs, strict=True):
            if job is None:
                self._failed(flight, "the job vanished from Redis (expired or evicted)")
                continue
            status = job.get_status(refresh=False)
            if status == JobStatus.FINISHED:
                self._finished(flight, job)
            elif status in _FAILED:
                result = job.latest_result()
                reason = (result.exc_string if result is not None else None) or status.value
                self._failed(flight, f"on {job.worker_name or '?'}: {reason}")
            elif status == JobStatus.STARTED:
                self._check_started(flight, job, alive)
            elif status == JobStatus.QUEUED:
                self._check_queued(flight, job, served)

    def _finished(self, flight: _Flight, job: Job) -> None:
        value = job.return_value()
        if not isinstance(value, CandidateResult):
            self._failed(flight, f"on {job.worker_name}: returned {type(value).__name__}")
        elif flight.phase is Phase.BUILD and value.status is RecordStatus.OK and not value.measured:
            flight.built, flight.failures = value, []
            self._send(flight, Phase.MEASURE)
            job.delete()  # its result now travels in the measure job
        else:
            flight.result = value
            self._collected.append(job.id)

    def stored(self) -> None:
        """Delete the jobs whose results were stored; best effort: their TTL is the fallback."""
        collected, self._collected = self._collected, []
        try:
            jobs = Job.fetch_many(collected, connection=self.redis)
            with self.redis.pipeline() as pipe:
                for job in jobs:
                    if job is not None:
                        job.delete(pipeline=pipe, remove_from_queue=False)
                pipe.execute()
        except RedisError as exc:
            log.warning("could not delete %d stored results: %s", len(collected), exc)

    def _check_started(self, flight: _Flight, job: Job, alive: set[str]) -> None:
        if job.worker_name not in alive:
            self._lost(flight, job, f"its worker {job.worker_name} died")
            return
        timeout = job.timeout if job.timeout is not None and job.timeout > 0 else None
        if timeout is not None and job.started_at is not None:
            deadline = job.started_at + timedelta(seconds=timeout + OVERRUN_GRACE_S)
            if datetime.now(UTC) > deadline:
                # Its worker lives but is stuck past RQ's own timeout: run it elsewhere.
                self._failed(flight, f"on {job.worker_name}: still running {timeout} s after start")

    def _check_queued(self, flight: _Flight, job: Job, served: set[str]) -> None:
        now = time.monotonic()
        queue = job.origin
        if queue in served:
            self._unserved_since.pop(queue, None)
        elif now - self._unserved_since.setdefault(queue, now) > self.worker_wait_s:
            raise RuntimeError(
                f"no living worker has served {queue} for {self.worker_wait_s:g} s: "
                f"start `tunehub worker` on a {flight.target} machine"
            )
        if self.redis.lpos(Queue(queue, connection=self.redis).key, job.id) is not None:
            flight.stranded_since = None
        elif flight.stranded_since is None:
            flight.stranded_since = now
        elif now - flight.stranded_since > STRANDED_S:
            self._lost(flight, job, "a worker took it and died before starting it")

    def _lost(self, flight: _Flight, job: Job, reason: str) -> None:
        job.delete()  # nobody will finish it; RQ would otherwise requeue it much later
        self._failed(flight, reason)

    def _failed(self, flight: _Flight, reason: str) -> None:
        """An infrastructure failure of the current phase: send it again, or give up."""
        attempt = len(flight.failures) + 1
        flight.failures.append(f"attempt {attempt}, {flight.phase} job {flight.job_id}: {reason}")
        log.warning("%s job %s failed: %s", flight.phase, flight.job_id, reason)
        if attempt < self.max_attempts:
            self.retries += 1
            self._send(flight, flight.phase)
            return
        summary = (
            f"the {flight.phase} failed on the workers {attempt} times (infrastructure errors, "
            "not the candidate's verdict; it may crash its workers):\n" + "\n".join(flight.failures)
        )
        if flight.phase is Phase.BUILD:
            flight.result = CandidateResult(RecordStatus.COMPILE_ERROR, log=summary)
        else:
            assert flight.built is not None
            flight.result = dataclasses.replace(
                flight.built, status=RecordStatus.RUNTIME_ERROR, log=summary, measured=True
            )

    def _withdraw(self, flights: list[_Flight]) -> None:
        """Delete the still-queued jobs of an abandoned batch, so no worker spends time on
        them; best effort, since Redis itself may be why the batch was abandoned."""
        if not flights:
            return
        try:
            for job in Job.fetch_many([f.job_id for f in flights], connection=self.redis):
                if job is not None and job.get_status(refresh=False) == JobStatus.QUEUED:
                    job.delete()
        except RedisError as exc:
            log.warning("could not withdraw the batch's jobs: %s", exc)


def _phase(name: str) -> Phase | None:
    parsed = parse_queue(name)
    return parsed[0] if parsed else None


def _served_targets(workers: Sequence[WorkerInfo]) -> Counter[Target]:
    """Targets whose build and measure queues both have living workers, with how many workers
    measure for each."""
    queues = Counter(q for w in workers for q in w.queues)
    served: Counter[Target] = Counter()
    for name, count in queues.items():
        parsed = parse_queue(name)
        if parsed and parsed[0] is Phase.MEASURE and queue_name(Phase.BUILD, parsed[1]) in queues:
            served[parsed[1]] = count
    return served


def _describe(request: CandidateRequest) -> str:
    """A job's description: short, since RQ would otherwise print every argument."""
    config = ",".join(f"{k}={v}" for k, v in sorted(request.config.items()))
    return f"{request.signature.get('name', '?')} [{config}]"
