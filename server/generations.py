"""Best-kernel generations: one counter per workload in Redis, bumped whenever a tuner stores a
batch of its records, so that every API process can tell whether a best it cached is still
the best without asking the database.

`BestLookup` keeps, beside each cached answer, the generation it read *before* its query, and
serves a hit only while the counter still holds that value; the tuner bumps *after* its batch
is committed. So a lookup that raced a batch keeps an older generation than the data it would
have to show and looks again next time (see docs/decisions.md, "Tuning and storage").

Each bump is also published (`CHANNEL`, "<key> <generation>"), and the API's
`GenerationReader` follows the channel: while its subscription is live, a hit compares
against the generations it was told, with no Redis round trip, and a new batch is served on
every API process as soon as Redis delivers the message (well under a millisecond on a quiet
machine). While the subscription is down (Redis restarting), each lookup reads the counters
instead, concurrent lookups sharing one MGET.

Without Redis (`tunehub tune`, an API without `TUNEHUB_REDIS_URL`) there are no generations:
the cache's TTL alone bounds how long an older best is served, as it does while Redis fails.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from redis import Redis
from redis.asyncio import Redis as AsyncRedis
from redis.exceptions import RedisError

KEY_PREFIX = "tunehub:best-generation:"
CHANNEL = "tunehub:best-generations"
# Generations told by the channel, remembered at most (dropped when full: read again).
MAX_KNOWN = 65536
# Resubscribing after a lost subscription: first after this long, then twice as long, at most.
RESUBSCRIBE_S = (0.1, 5.0)
# How long Redis may take to confirm a subscription.
REDIS_CONFIRM_S = 5.0

log = logging.getLogger(__name__)


class BestGenerations:
    """The generation counters of workloads' best kernels, in one Redis."""

    def __init__(self, redis: Redis) -> None:
        self.redis = redis

    def bump(self, workload_key: str) -> None:
        """Say that records of `workload_key` were committed. A Redis error is logged, not
        raised: the records are stored, and caches fall back on their TTL."""
        try:
            generation = self.redis.incr(KEY_PREFIX + workload_key)
            self.redis.publish(CHANNEL, f"{workload_key} {generation}")
        except RedisError as exc:
            log.warning("could not bump the best generation of %s: %s", workload_key, exc)


class GenerationReader:
    """The generations of workloads as the API reads them, from one event loop.

    While subscribed to `CHANNEL`, a generation once read is kept up to date by the bumps'
    messages, and answered from memory. Otherwise, or for a key not read since the
    subscription began, it is read from Redis: at most one MGET is in flight; a reader waits
    for the first one *sent after it asked*, and every key asked meanwhile goes in that one,
    so a reader sees every bump that completed before it asked, as a GET of its own would.
    """

    def __init__(self, redis: AsyncRedis) -> None:
        self.redis = redis
        self._waiting: dict[str, list[asyncio.Future[int | None]]] = {}
        self._reader: asyncio.Task[None] | None = None
        self._failing = False  # logged once per outage, not once per read
        self._known: dict[str, int] = {}  # valid while `_subscription` holds
        self._subscription = 0  # the live subscription's number; 0 while there is none
        self._listener: asyncio.Task[None] | None = None
        # Told of every bump the subscription delivers, and of each new subscription (bumps
        # may have been missed before it): `server.api.status_path` drops its answers.
        self.on_bump: list[Callable[[], None]] = []

    @property
    def live(self) -> bool:
        """Whether the subscription holds: every bump is being told (`on_bump`)."""
        return self._subscription != 0

    def follow(self) -> None:
        """Start following the channel (from the event loop), if not yet."""
        if self._listener is None:
            self._listener = asyncio.create_task(self._listen())

    def _told(self) -> None:
        for callback in self.on_bump:
            callback()

    async def current(self, workload_key: str) -> int | None:
        """The generation of `workload_key` (0 before its first batch); None when Redis
        cannot say, which matches only answers cached while it could not either."""
        self.follow()
        if self._subscription:
            known = self._known.get(workload_key)
            if known is not None:
                return known
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
                subscription = self._subscription  # live when the MGET is sent
                values: list[int | None] = [None] * len(keys)
                try:
                    found = await self.redis.mget([KEY_PREFIX + key for key in keys])
                    values = [0 if value is None else int(value) for value in found]
                    self._failing = False
                    if subscription and subscription == self._subscription:
                        for key, value in zip(keys, values, strict=True):
                            self._learn(key, value)
                except Exception as exc:  # any failure: Redis cannot say (None), never a hang
                    if not self._failing:
                        log.warning(
                            "cannot read best generations (caches fall back on TTL): %s", exc
                        )
                    self._failing = True
                finally:  # every reader of the batch answered, even when this task is cancelled
                    for key, value in zip(keys, values, strict=True):
                        for future in batch[key]:
                            if not future.done():  # its request may have gone
                                future.set_result(value)
        finally:
            self._reader = None

    def _learn(self, key: str, generation: int | None) -> None:
        if generation is None:
            return
        if len(self._known) >= MAX_KNOWN:
            self._known.clear()
        self._known[key] = max(generation, self._known.get(key, 0))

    async def _listen(self) -> None:
        """Follow `CHANNEL` for as long as the app runs, subscribing again after a loss."""
        delay, longest = RESUBSCRIBE_S
        number = 0
        while True:
            pubsub = self.redis.pubsub()
            try:
                await pubsub.subscribe(CHANNEL)
                # Live once Redis confirms: bumps published from then on all arrive here.
                confirmed = await pubsub.get_message(timeout=REDIS_CONFIRM_S)
                if confirmed is None or confirmed.get("type") != "subscribe":
                    raise RedisError("no confirmation of the subscription")
                number += 1
                self._known.clear()
                self._subscription = number
                self._told()
                delay = RESUBSCRIBE_S[0]
                while True:
                    message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
                    if message is not None and message.get("type") == "message":
                        key, _, generation = message["data"].decode().rpartition(" ")
                        self._learn(key, int(generation))
                        self._told()
            except (RedisError, OSError, ValueError) as exc:
                log.info("best generations: subscription lost (%s); reading them meanwhile", exc)
            finally:
                self._subscription = 0
                with contextlib.suppress(RedisError, OSError):
                    await pubsub.aclose()
            await asyncio.sleep(delay)
            delay = min(delay * 2, longest)

    async def aclose(self) -> None:
        """Stop listening and close the connections. The listener is waited for a bounded
        time: cancelled while its subscription was still being set up, redis-py's pubsub
        close never returned (a lookup answered from the cache right after a reader was made
        hung its event loop's shutdown, under load)."""
        if self._listener is not None:
            self._listener.cancel()
            done, _ = await asyncio.wait({self._listener}, timeout=REDIS_CONFIRM_S)
            if not done:
                log.warning("best generations: the listener did not stop; left behind")
        await self.redis.aclose()
