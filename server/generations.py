"""Best-kernel generations: one counter per workload in Redis, bumped whenever a tuner stores a
batch of its records, so that every API process can tell whether a best it cached is still
the best without asking the database.

`BestLookup` keeps, beside each cached best, the generation it read *before* its query, and
serves a hit only while the counter still holds that value; the tuner bumps *after* its batch
is committed. So a lookup that raced a batch keeps an older generation than the data it would
have to show and looks again next time; a finished batch is visible at once, and a hit still
costs one Redis GET instead of a query (see docs/decisions.md, "Tuning and storage").

Without Redis (`tunehub tune`, an API without `TUNEHUB_REDIS_URL`) there are no generations:
the cache's TTL alone bounds how long an older best is served, as it does while Redis fails.
"""

from __future__ import annotations

import logging

from redis import Redis
from redis.exceptions import RedisError

KEY_PREFIX = "tunehub:best-generation:"

log = logging.getLogger(__name__)


class BestGenerations:
    """The generation counters of workloads' best kernels, in one Redis."""

    def __init__(self, redis: Redis) -> None:
        self.redis = redis

    def bump(self, workload_key: str) -> None:
        """Say that records of `workload_key` were committed. A Redis error is logged, not
        raised: the records are stored, and caches fall back on their TTL."""
        try:
            self.redis.incr(KEY_PREFIX + workload_key)
        except RedisError as exc:
            log.warning("could not bump the best generation of %s: %s", workload_key, exc)

    def current(self, workload_key: str) -> int | None:
        """The generation of `workload_key` (0 before its first batch); None when Redis
        cannot say, which matches only values cached while it could not either."""
        try:
            value = self.redis.get(KEY_PREFIX + workload_key)
        except RedisError:
            return None
        return int(value) if value is not None else 0
