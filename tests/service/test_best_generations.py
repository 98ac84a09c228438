"""Cached bests and the tuner's generation counters, on a real Redis and a real database."""

from __future__ import annotations

from typing import Any

import anyio
from redis import Redis
from redis.asyncio import Redis as AsyncRedis
from sqlalchemy.orm import Session, sessionmaker

from tests.signatures import AXPY
from tunehub.compiler.space.space import Space
from tunehub.schemas.api import RecordView
from tunehub.schemas.record import RecordStatus
from tunehub.schemas.signature import TaskSignature
from tunehub.schemas.target import Target
from tunehub.server.best_cache import BestLookup
from tunehub.server.db.records import NewRecord, add_record
from tunehub.server.db.session import session_scope
from tunehub.server.db.tunings import get_tuning
from tunehub.server.db.workloads import upsert_workload
from tunehub.server.generations import BestGenerations, GenerationReader
from tunehub.server.tuner import LocalExecutor, SearchPlan, Tuner, register_tuning, validate_task

# Far longer than the test: whatever a lookup sees fresh, the TTL did not bring.
LONG_TTL_S = 3600.0


def _add_record(s: Session, key: str, target: Target, latency_s: float, tile: str) -> int:
    """An `ok` record stored without a tuner (so without bumping any generation)."""
    fields: dict[str, Any] = {
        "workload_key": key,
        "target": target,
        "symbols": {"N": 64},
        "tuning_id": None,
        "config": {"manual": tile},
        "features": [],
        "feature_version": 0,
        "status": RecordStatus.OK,
        "latency_s": latency_s,
        "latencies_s": [latency_s],
        "build_time_s": None,
        "max_error": 0.0,
        "error_log": None,
        "machine": {},
        "artifact_sha256": None,
    }
    return add_record(s, NewRecord(**fields, config_key=Space.key(fields["config"]))).id


def _best(lookup: BestLookup, key: str, target: Target, redis_url: str | None = None) -> RecordView:
    """The lookup's answer, in an event loop of its own (with a generation reader of that
    loop's when `redis_url` is given, as an API process has)."""

    async def look() -> bytes:
        if redis_url is None:
            return await lookup.by_key(key, target, None)
        lookup.generations = GenerationReader(AsyncRedis.from_url(redis_url))
        try:
            return await lookup.by_key(key, target, None)
        finally:
            await lookup.generations.aclose()

    return RecordView.model_validate_json(anyio.run(look))


def test_a_batch_the_tuner_stores_replaces_a_cached_best_at_once(
    sessions: sessionmaker[Session], redis: Redis, redis_url: str
) -> None:
    generations = BestGenerations(redis)
    lookup = BestLookup(sessions, LONG_TTL_S)
    with LocalExecutor(workers=1) as executor:
        target = executor.resolve(Target(kind="cpu"))
        with session_scope(sessions) as s:
            tuning_id = register_tuning(
                s,
                validate_task(TaskSignature.model_validate(AXPY), {}),
                SearchPlan("random", 1),
                target=target,
            )
            tuning = get_tuning(s, tuning_id)
            assert tuning is not None
            key = tuning.workload_key
            slow = _add_record(s, key, target, 1000.0, "slow")
        assert _best(lookup, key, target, redis_url).id == slow  # cached from now on

        summary = Tuner(sessions, executor, generations=generations).run(tuning_id)

    assert summary.best is not None and summary.best.latency_s < 1000.0
    assert _best(lookup, key, target, redis_url).id == summary.best.record_id

    # The cache still answers while no batch is stored: a record written behind the tuners'
    # back is not seen until the workload's generation moves.
    with session_scope(sessions) as s:
        fastest = _add_record(s, key, target, 1e-12, "fastest")
    assert _best(lookup, key, target, redis_url).id == summary.best.record_id
    generations.bump(key)
    assert _best(lookup, key, target, redis_url).id == fastest


def test_without_redis_the_ttl_alone_bounds_a_cached_best(
    sessions: sessionmaker[Session],
) -> None:
    """The local CLI tuner has no Redis: nothing to bump, and an API without Redis keeps a
    found best for its TTL (the documented bound)."""
    lookup = BestLookup(sessions, LONG_TTL_S)
    key, target = "ab" * 32, Target.parse("cpu:generic")
    with session_scope(sessions) as s:
        upsert_workload(s, key=key, name="w", signature=AXPY)
        slow = _add_record(s, key, target, 1000.0, "slow")
    assert _best(lookup, key, target).id == slow
    with session_scope(sessions) as s:
        _add_record(s, key, target, 1e-12, "fastest")
    assert _best(lookup, key, target).id == slow
