"""Prometheus metrics: HTTP requests by route, and the database's tunings and records by status.

Each app has its own registry (two apps in one process, as in tests, never share counters).
Requests are labelled by route *template* (`/v1/tunings/{tuning_id}`), never by the raw path,
so garbage paths cannot blow up the number of series; unmatched ones share `unmatched`.
Tunings and records are counted by the database at scrape time (two grouped queries), so every
API process reports the same numbers, whoever wrote the rows.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector
from redis.exceptions import RedisError
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tunehub.schemas.record import RecordStatus, TuningStatus
from tunehub.server.db.counts import count_records_by_status, count_tunings_by_status
from tunehub.server.db.session import session_scope
from tunehub.server.health import WriteProbe
from tunehub.server.stalls import Stalls

log = logging.getLogger(__name__)

# From a cached best lookup (well under a millisecond) to a slow submission.
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10)


class DatabaseCollector(Collector):
    """`tunehub_tunings{status}` and `tunehub_records{status}`, read at each scrape; a scrape
    while the database is down reports `tunehub_database_up 0` instead of failing, and one
    while it refuses writes `tunehub_database_writable 0` (the readiness write probe); with
    Redis, `tunehub_tunings_stalled` counts the tunings a tuner cannot advance."""

    def __init__(
        self, sessions: sessionmaker[Session], write_probe: WriteProbe, stalls: Stalls | None
    ) -> None:
        self.sessions, self.write_probe, self.stalls = sessions, write_probe, stalls

    def collect(self) -> Iterator[Metric]:
        writable = GaugeMetricFamily(
            "tunehub_database_writable", "Whether the database took the last write probe"
        )
        writable.add_metric([], 1 if self.write_probe.check() == "ok" else 0)
        yield writable
        if self.stalls is not None:
            try:
                count = self.stalls.count()
            except RedisError as exc:
                log.warning("metrics: cannot read the stall marks: %s", exc)
            else:
                yield GaugeMetricFamily(
                    "tunehub_tunings_stalled",
                    "Running tunings their tuner cannot advance (the database refuses it)",
                    value=count,
                )
        up = GaugeMetricFamily("tunehub_database_up", "Whether the last scrape read the database")
        try:
            with session_scope(self.sessions) as s:
                tunings = count_tunings_by_status(s)
                records = count_records_by_status(s)
        except SQLAlchemyError as exc:
            log.warning("metrics: cannot read the database: %s", exc)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        by_tuning = GaugeMetricFamily("tunehub_tunings", "Tunings by status", labels=["status"])
        for tuning_status in TuningStatus:
            by_tuning.add_metric([tuning_status.value], tunings.get(tuning_status, 0))
        yield by_tuning
        by_record = GaugeMetricFamily("tunehub_records", "Records by status", labels=["status"])
        for record_status in RecordStatus:
            by_record.add_metric([record_status.value], records.get(record_status, 0))
        yield by_record


class Metrics:
    """One app's registry and its request metrics."""

    def __init__(
        self, sessions: sessionmaker[Session], write_probe: WriteProbe, stalls: Stalls | None
    ) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "tunehub_http_requests",
            "HTTP requests answered, by method, route template and status code",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "tunehub_http_request_duration_seconds",
            "Time to answer an HTTP request, by method and route template",
            ["method", "route"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.registry.register(DatabaseCollector(sessions, write_probe, stalls))

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        self.requests.labels(method, route, str(status)).inc()
        self.latency.labels(method, route).observe(seconds)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class MetricsMiddleware:
    """Times every HTTP request and counts it by its route template and status (500 when the
    app raised without answering)."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500

        async def send_and_note(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_and_note)
        finally:
            # The router records the matched route in the scope it was handed (this one).
            route = getattr(scope.get("route"), "path", None) or "unmatched"
            self.metrics.observe(scope["method"], route, status, time.perf_counter() - start)
