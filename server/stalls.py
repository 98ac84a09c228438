"""Stalled tunings: those a tuner cannot advance because the database refuses it (its disk
full, read-only, unreachable), with the reason, until it advances again.

The mark lives in Redis, not in the tuning's row: the database that stalls a tuning is the
one that cannot take a mark. A tuner whose tuning stopped on a database fault marks it
(`mark`); while the tuner daemon's own database calls keep failing it keeps the marks alive
(`refresh`); the first batch the tuning stores clears it (`clear`). Each mark expires
STALL_TTL_S after it was last kept alive, so a tuner that died leaves none behind (its
tuning's lease then runs out, and `GET /v1/tunings/{id}` tells the rest).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

from redis import Redis
from redis.exceptions import RedisError

from tunehub.schemas.record import TuningStatus
from tunehub.server.db.models import Tuning

KEY_PREFIX = "tunehub:stalled:"
STALL_TTL_S = 60

log = logging.getLogger(__name__)


class Stalls:
    """The stall marks of tunings, in one Redis. Writes are best effort: a Redis error is
    logged, never raised (the mark is a report, not state)."""

    def __init__(self, redis: Redis) -> None:
        self.redis = redis

    def mark(self, tuning_ids: Iterable[int], reason: str) -> None:
        try:
            with self.redis.pipeline(transaction=False) as pipe:
                for tuning_id in tuning_ids:
                    pipe.set(KEY_PREFIX + str(tuning_id), reason, ex=STALL_TTL_S)
                pipe.execute()
        except RedisError as exc:
            log.warning("could not mark tunings stalled: %s", exc)

    def refresh(self) -> None:
        """Keep every mark alive another STALL_TTL_S: the database still refuses."""
        try:
            keys = list(self.redis.scan_iter(match=KEY_PREFIX + "*", count=1000))
            with self.redis.pipeline(transaction=False) as pipe:
                for key in keys:
                    pipe.expire(key, STALL_TTL_S)
                pipe.execute()
        except RedisError as exc:
            log.warning("could not keep the stall marks: %s", exc)

    def clear(self, tuning_ids: Iterable[int]) -> None:
        keys = [KEY_PREFIX + str(tuning_id) for tuning_id in tuning_ids]
        try:
            if keys:
                self.redis.delete(*keys)
        except RedisError as exc:
            log.warning("could not clear stall marks: %s", exc)

    def reasons(self, tuning_ids: Sequence[int]) -> dict[int, str]:
        """The reasons of those of `tuning_ids` that are stalled (one MGET); raises RedisError."""
        if not tuning_ids:
            return {}
        values = self.redis.mget([KEY_PREFIX + str(tuning_id) for tuning_id in tuning_ids])
        return {
            tuning_id: value.decode() if isinstance(value, bytes) else str(value)
            for tuning_id, value in zip(tuning_ids, values, strict=True)
            if value is not None
        }

    def count(self) -> int:
        """How many tunings are stalled now; raises RedisError."""
        return sum(1 for _ in self.redis.scan_iter(match=KEY_PREFIX + "*", count=1000))


def stalled_reasons(stalls: Stalls | None, tunings: Sequence[Tuning]) -> dict[int, str]:
    """Why each running tuning of `tunings` is stalled, if it is (one MGET, none when no
    tuning runs): none without Redis, or while Redis fails (the mark is a report; a view is
    served without it)."""
    running = [t.id for t in tunings if t.status == TuningStatus.RUNNING]
    if stalls is None or not running:
        return {}
    try:
        return stalls.reasons(running)
    except RedisError:
        return {}
