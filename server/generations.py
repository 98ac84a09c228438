"""Best-kernel generations: one counter per workload in Redis, bumped whenever a tuner stores a
batch of its records, so that every API process can tell whether a best it cached is still
the best without asking the database.

`BestLookup` keeps, beside each cached answer, the generation it read *before* its query, and
serves a hit only while the counter still holds that value; the tuner bumps *after* its batch
is committed. So a lookup that raced a batch keeps an older generation than the data it would
have to show and looks again next time, and a finished batch is visible at once on every API
process (see docs/decisions.md, "Tuning and storage").

The API reads the counters with `GenerationReader`, from its event loop: concurrent lookups
share Redis round trips, so under load a hit costs a fraction of a GET.

Without Redis (`tunehub tune`, an API without `TUNEHUB_REDIS_URL`) there are no generations:
the cache's TTL alone bounds how long an older best is served, as it does while Redis fails.
"""

from __future__ import annotations

import asyncio
import logging

from redis import Redis
from redis.asyncio import Redis as AsyncRedis
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


class GenerationReader:
    """The generations of workloads as the API reads them, from one event loop.

    At most one MGET is in flight; a reader waits for the first one *sent after it asked*, and
    every key asked meanwhile goes in that one. A reader thus sees every bump that completed
    before it asked, as a GET of its own would, while a thousand concurrent lookups cost a
    handful of round trips instead of a thousand.
    """

    def __init__(self, redis: AsyncRedis) -> None:
        self.redis = redis
        self._waiting: dict[str, list[asyncio.Future[int | None]]] = {}
        self._reader: asyncio.Task[None] | None = None
        self._failing = False  # logged once per outage, not once per read

    async def current(self, workload_key: str) -> int | None:
        """The generation of `workload_key` (0 before its first batch); None when Redis
        cannot say, which matches only answers cached while it could not either."""
        future: asyncio.Future[int | None] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(workload_key, []).append(future)
        if self._reader is None:
            self._reader = asyncio.create_task(self._read())
        return await future

    async def _read(self) -> None:
        try:
            while self._waiting:
                batch, self._waiting = self._waiting, {}
                keys = list(batch)
                values: list[int | None]
                try:
                    found = await self.redis.mget([KEY_PREFIX + key for key in keys])
                    values = [0 if value is None else int(value) for value in found]
                    self._failing = False
                except (RedisError, OSError, ValueError) as exc:
                    if not self._failing:
                        log.warning(
                            "cannot read best generations (caches fall back on TTL): %s", exc
                        )
                    self._failing = True
                    values = [None] * len(keys)
                for key, value in zip(keys, values, strict=True):
                    for future in batch[key]:
                        if not future.done():  # its request may have gone
                            future.set_result(value)
        finally:
            self._reader = None

    async def aclose(self) -> None:
        await self.redis.aclose()
