"""Every name tunehub uses in Redis (queues, the worker registry, locks, job ids), and the
URL of the Redis they meet at by default.

Built here and nowhere else, so the tuner (which enqueues), the daemons (which consume and
register) and the API (which lists workers) cannot drift apart. A target's work splits over two
queues, because the two halves want different machines' attention: any worker of the target
may build, while measurements on one machine must take turns (see `measure_lock_key`).

    tunehub:build:cpu:x86_64-avx512     tunehub:measure:cpu:x86_64-avx512
    tunehub:build:cuda:sm_90            tunehub:measure:cuda:sm_90

RQ adds its own prefix to the Redis keys of queues (`rq:queue:<name>`); the other keys below
are tunehub's own and are used as they are.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum

from tunehub.schemas.target import Target

# Where the daemons and the service meet unless told otherwise (`TUNEHUB_REDIS_URL`).
DEFAULT_REDIS_URL = "redis://localhost:6379/0"
PREFIX = "tunehub"
# A set of the names of registered workers; each one's details live at `worker_key(name)`.
WORKERS_KEY = f"{PREFIX}:workers"
# The same for tuner daemons (whose queue is the database: `server.tuner.lease`).
TUNERS_KEY = f"{PREFIX}:tuners"


class Phase(StrEnum):
    """The two halves of a candidate's work, each with its own queue per target."""

    BUILD = "build"
    MEASURE = "measure"


def queue_name(phase: Phase, target: Target) -> str:
    """`tunehub:<phase>:<kind>:<isa|arch>`; raises ValueError for an incomplete target (a
    queue serves one instruction set or architecture, never "any cpu")."""
    if not target.complete:
        raise ValueError(f"target {target} is incomplete: a queue needs its isa or arch")
    return f"{PREFIX}:{phase}:{target}"


def worker_queues(targets: Sequence[Target]) -> list[str]:
    """The queues a worker of `targets` serves, in the order it takes work from them: every
    build before any measurement, so a batch's builds finish in parallel on all workers before
    its measurements start taking turns on each machine's measure lock."""
    builds = [queue_name(Phase.BUILD, t) for t in targets]
    return builds + [queue_name(Phase.MEASURE, t) for t in targets]


def parse_queue(name: str) -> tuple[Phase, Target] | None:
    """The phase and target of a build or measure queue name; None for any other name."""
    prefix, _, rest = name.partition(":")
    phase, _, target = rest.partition(":")
    if prefix != PREFIX or phase not in tuple(Phase):
        return None
    try:
        parsed = Target.parse(target)
    except ValueError:
        return None
    return (Phase(phase), parsed) if parsed.complete else None


def worker_key(name: str) -> str:
    """The hash of one registered worker (expires unless its heartbeat renews it)."""
    return f"{PREFIX}:worker:{name}"


def tuner_key(name: str) -> str:
    """The hash of one registered tuner daemon (expires unless its heartbeat renews it)."""
    return f"{PREFIX}:tuner:{name}"


def submit_lock_key(workload_key: str) -> str:
    """The lock that makes an API's check for an active tuning and its creation one step, so
    two API processes never queue the same workload twice."""
    return f"{PREFIX}:lock:submit:{workload_key}"


def measure_lock_key(machine: str) -> str:
    """The lock a measurement holds on `machine` (a boot id: one per running kernel, shared by
    every container of a host), so concurrent timings do not measure each other."""
    return f"{PREFIX}:lock:measure:{machine}"
