"""Readiness checks of the service's dependencies: "ok", or the class of what went wrong.

A check names the fault class only (`database_fault`): `/readyz` needs no token, and the
driver's text names the database's host and port. A database that refuses writes (its disk
full, read-only) still answers reads, so readiness also writes (`WriteProbe`), at most once
per `WRITE_PROBE_S` per process: a probe costs one tiny committed row.
"""

from __future__ import annotations

import threading
import time

from redis import Redis
from redis.exceptions import RedisError
from sqlalchemy import Engine, text, update
from sqlalchemy.exc import SQLAlchemyError

from tunehub.server.db.models import WRITE_PROBE_NAME, WriteProbeRow, utcnow

WRITE_PROBE_S = 5.0

# SQLSTATEs of PostgreSQL (disk_full, read_only_sql_transaction) and SQLite's own words.
_DISK_FULL = ("53100", "disk is full", "no space left")
_READ_ONLY = ("25006", "readonly database", "read-only")


def database_fault(exc: BaseException) -> str:
    """What is wrong with the database, in words any client may read (no driver text)."""
    driver = getattr(exc, "orig", None) or exc
    words = f"{getattr(driver, 'sqlstate', '')} {driver}".lower()
    if any(marker in words for marker in _DISK_FULL):
        return "the database's disk is full"
    if any(marker in words for marker in _READ_ONLY):
        return "the database is read-only"
    return "the database is unavailable"


def check_database(engine: Engine) -> str:
    try:
        with engine.connect() as connection:
            connection.execute(text("SELECT 1"))
    except SQLAlchemyError as exc:
        return f"error: {database_fault(exc)}"
    return "ok"


class WriteProbe:
    """Whether the database takes a write: the probe row rewritten and committed, the answer
    kept for `interval_s` (concurrent checks share one probe)."""

    def __init__(self, engine: Engine, interval_s: float = WRITE_PROBE_S) -> None:
        self.engine, self.interval_s = engine, interval_s
        self._lock = threading.Lock()
        self._checked_at = -float("inf")
        self._state = "ok"

    @property
    def state(self) -> str:
        """The last probe's answer ("ok" before the first)."""
        return self._state

    def check(self) -> str:
        with self._lock:
            if time.monotonic() - self._checked_at >= self.interval_s:
                self._state = self._probe()
                self._checked_at = time.monotonic()
            return self._state

    def _probe(self) -> str:
        try:
            with self.engine.begin() as connection:
                connection.execute(
                    update(WriteProbeRow)
                    .where(WriteProbeRow.name == WRITE_PROBE_NAME)
                    .values(at=utcnow())
                )
        except SQLAlchemyError as exc:
            return f"error: {database_fault(exc)}; it refuses writes"
        return "ok"


def check_redis(redis: Redis) -> str:
    try:
        redis.ping()
    except RedisError:
        return "error: Redis is unavailable"
    return "ok"
