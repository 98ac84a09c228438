"""The `tunehub worker` daemon: detect the device, register, heartbeat, serve its queues.

One daemon is one process and runs one job at a time (an RQ `SimpleWorker`: jobs run in the
daemon itself, so the measuring child, the parsed programs and the reference outputs it keeps
survive from one candidate to the next). Parallel builds come from running several daemons, on
one machine or many: they cooperate through the Redis URL alone and never see the database;
results travel back through Redis to the tuner, which stores them.

A daemon registers in the worker registry (`worker.registry`) before its first job and keeps
its entry alive with a heartbeat; its measurements take turns with the machine's others under
the measure lock (`worker.measure_lock`), or its device's, as a measuring slot (`worker.slots`:
`tunehub worker --gpus`).

A Redis outage (a restart, a network cut) costs no daemon: the heartbeat keeps trying, the RQ
loop is started again once Redis answers (`_serve`), and each logs one line when Redis goes
and one when it is back (`outage.Outage`). A job in progress during the outage finishes; its
result may be lost with a restarted Redis, and the tuner sends the candidate again. A name is
free again WORKER_TTL_S after its daemon died (`registry.claim_name`), RQ's own stale entry
included.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import socket
import sys
import time
import uuid
from collections.abc import Sequence
from types import FrameType

from redis import Redis
from redis.exceptions import RedisError
from rq import SimpleWorker

from tunehub.schemas.target import Target
from tunehub.worker import device, logs
from tunehub.worker.backend import local_targets, worker_backend
from tunehub.worker.measure_lock import slot
from tunehub.worker.outage import BACKOFF_MAX_S, Outage
from tunehub.worker.queues import DEFAULT_REDIS_URL, parse_queue, worker_queues
from tunehub.worker.registry import Registration, claim_name, machine_id
from tunehub.worker.slots import plan_slots, run_slots

log = logging.getLogger(__name__)


def run_worker(
    redis_url: str,
    queues: Sequence[str] | None = None,
    threads: int | None = None,
    name: str | None = None,
    burst: bool = False,
) -> None:
    """Serve build and measure queues until SIGTERM/SIGINT (the job in progress finishes
    first; a second signal stops at once) or, with `burst`, until they are empty.

    `queues` defaults to this machine's targets (`backend.local_targets`); `threads` is what the
    worker offers for measurements (default: its cores), and the tuner measures with the
    smallest offer among a target's workers.
    """
    if threads is not None and threads < 1:
        raise ValueError(f"threads must be at least 1, not {threads}")
    own = slot()
    if own is not None and queues:
        raise ValueError("a measuring slot serves its own device's queues: leave queues out")
    here = local_targets() if own is None else worker_backend(own.partition(":")[0]).local_targets()
    names = list(queues) if queues else worker_queues(here)
    targets = _targets_of(names)
    threads = threads or device.cpu_cores()
    name = name or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    redis = Redis.from_url(redis_url)
    now = str(time.time())
    registration = Registration(
        redis,
        {
            "name": name,
            "host": socket.gethostname(),
            "machine": machine_id(),
            "slot": own or "",
            "pid": str(os.getpid()),
            "queues": json.dumps(names),
            "targets": json.dumps([str(t) for t in targets]),
            "threads": str(threads),
            "fingerprints": json.dumps({str(t): device.fingerprint(t, threads) for t in targets}),
            "started_at": now,
        },
    )
    # RQ installs its own handlers when `work` starts; a signal before that still unregisters.
    _exit_on_signals()
    outage = Outage("Redis", log, (RedisError,))
    try:
        outage.call(lambda: claim_name(redis, name))
        outage.call(registration.start)
        log.info("worker %s serving %s", name, ", ".join(names))
        _serve(redis, names, name, burst, outage)
    finally:
        registration.stop()
        redis.close()


def _serve(redis: Redis, queues: Sequence[str], name: str, burst: bool, outage: Outage) -> None:
    """RQ's work loop, started again after Redis failed under it: RQ rides out a refused
    connection only while it waits for a job, and quits on one anywhere else (after a job,
    in its maintenance), so each RQ worker here lives until a stop request, or an error."""
    level = logging.getLevelName(log.getEffectiveLevel())
    while True:
        # The RQ worker has our name: a job's `worker_name` is then a key of the registry.
        rq_worker = SimpleWorker(queues, name=name, connection=redis)
        rq_worker.max_connection_wait_time = BACKOFF_MAX_S
        try:
            # RQ's entry of this name is stale: ours, from before an outage, or a dead
            # predecessor's (`claim_name` waited for it to stop beating). RQ would refuse it
            # for minutes ("There exists an active worker named ...").
            redis.delete(rq_worker.key)
            rq_worker.work(burst=burst, logging_level=level)
        except RedisError as exc:
            _exit_on_signals()  # RQ's handlers would ask a worker that is gone
            outage.failed(exc)
        else:
            _exit_on_signals()
            if burst:
                return
            if rq_worker._shutdown_requested_date is None:
                # RQ quit on an error it logged: start again, but not in a tight loop.
                log.warning("RQ's work loop ended; starting it again")
                time.sleep(BACKOFF_MAX_S)
        if rq_worker._shutdown_requested_date is not None:  # SIGTERM/SIGINT: RQ's warm stop
            return
        outage.call(redis.ping)


def _exit_on_signals() -> None:
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _exit_on_signal)


def _exit_on_signal(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(0)


def main(argv: Sequence[str] | None = None) -> None:
    """`python -m tunehub.worker.daemon`: the daemon without the service stack (the GPU machine
    runs it from a plain checkout); `tunehub worker` is the same with the same options."""
    parser = argparse.ArgumentParser(
        prog="tunehub worker",
        description="Build and measure candidates for the tuners: serve this machine's queues.",
    )
    parser.add_argument(
        "--redis",
        default=os.environ.get("TUNEHUB_REDIS_URL", DEFAULT_REDIS_URL),
        help=f"Redis URL (default: TUNEHUB_REDIS_URL, else {DEFAULT_REDIS_URL})",
    )
    parser.add_argument("--queues", nargs="+", help="queue names (default: this machine's)")
    parser.add_argument("--threads", type=int, help="threads offered for measurements")
    parser.add_argument("--name", help="worker name (default: host-pid-random)")
    parser.add_argument("--burst", action="store_true", help="quit when the queues are empty")
    parser.add_argument("--gpus", help=GPUS_HELP)
    args = parser.parse_args(argv)
    try:
        logs.configure()
        code = serve(args.redis, args.queues, args.threads, args.name, args.burst, args.gpus)
    except ValueError as exc:  # options that do not fit: one line, as every CLI error
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    raise SystemExit(code)


GPUS_HELP = (
    "measure on these GPUs in parallel, a daemon per GPU: `all`, or ids like 0,1 "
    "(default: one daemon, measurements take turns on the machine)"
)


def serve(
    redis_url: str,
    queues: Sequence[str] | None,
    threads: int | None,
    name: str | None,
    burst: bool,
    gpus: str | None,
) -> int:
    """`tunehub worker`: one daemon (`run_worker`), or with `gpus` a measuring slot per GPU
    (`slots.run_slots`); its exit status. ValueError for options that do not fit."""
    if gpus is None:
        run_worker(redis_url, queues, threads, name, burst)
        return 0
    if queues:
        raise ValueError("--gpus: each GPU's daemon serves its own queues: leave --queues out")
    if threads is not None and threads < 1:
        raise ValueError(f"threads must be at least 1, not {threads}")
    planned = plan_slots(gpus)
    log.info("measuring slots: %s", ", ".join(slot.label for slot in planned))
    return run_slots(redis_url, planned, threads=threads, name=name, burst=burst)


def _targets_of(names: Sequence[str]) -> list[Target]:
    """The targets of build/measure queue names; ValueError for any other name (a worker has
    no database credentials, so it cannot run tunings)."""
    targets: list[Target] = []
    for name in names:
        parsed = parse_queue(name)
        if parsed is None:
            raise ValueError(f"{name!r} is not a build or measure queue (tunehub:build:<target>)")
        if parsed[1] not in targets:
            targets.append(parsed[1])
    return targets


if __name__ == "__main__":
    main()
