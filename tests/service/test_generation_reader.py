"""The API's reader of best generations on a real Redis: bumps followed through the channel,
and, while its subscription is lost, the counters read instead, until it subscribes again."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import anyio
from redis import Redis
from redis.asyncio import Redis as AsyncRedis

from tunehub.server.generations import BestGenerations, GenerationReader

KEY = "ab" * 32
FOLLOW_S = 10.0


async def _until(check: Callable[[], Awaitable[bool]], what: str) -> None:
    deadline = time.monotonic() + FOLLOW_S
    while not await check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


def test_bumps_are_followed_and_a_lost_subscription_is_read_through(redis_url: str) -> None:
    bumps = BestGenerations(Redis.from_url(redis_url))

    async def scenario() -> None:
        reader = GenerationReader(AsyncRedis.from_url(redis_url))
        try:
            assert await reader.current(KEY) == 0  # read: nothing bumped yet
            await _until(lambda: _subscribed(reader), "the subscription")
            assert await reader.current(KEY) == 0  # read again, now remembered
            bumps.bump(KEY)
            await _until(lambda: _equals(reader, 1), "the bump's message")

            # The subscription goes (its message lost with it); the bump is still seen, read
            # from the counter until the reader is subscribed again, then remembered.
            with Redis.from_url(redis_url) as admin:
                admin.execute_command("CLIENT", "KILL", "TYPE", "pubsub")
                bumps.redis.incr("tunehub:best-generation:" + KEY)  # a bump no one hears
            await _until(lambda: _equals(reader, 2), "the unheard bump")
            await _until(lambda: _subscribed(reader), "a new subscription")
            bumps.bump(KEY)
            await _until(lambda: _equals(reader, 3), "a bump after resubscribing")
        finally:
            await reader.aclose()

    anyio.run(scenario)
    bumps.redis.close()


async def _subscribed(reader: GenerationReader) -> bool:
    return reader._subscription != 0


async def _equals(reader: GenerationReader, generation: int) -> bool:
    return await reader.current(KEY) == generation
