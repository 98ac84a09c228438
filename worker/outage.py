"""Riding out a dependency's outage (Redis, the database): wait with backoff, say so once.

Every daemon loop and the tuner's executor treat a refused connection the same way: keep
running, retry after a pause that doubles up to BACKOFF_MAX_S, and log one line when the
dependency goes away and one when it is back, however long the outage lasts.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TypeVar

BACKOFF_FIRST_S = 0.25
BACKOFF_MAX_S = 4.0

T = TypeVar("T")


class Outage:
    """The state of one dependency as one loop sees it."""

    def __init__(
        self,
        what: str,
        log: logging.Logger,
        errors: tuple[type[BaseException], ...],
        stop: threading.Event | None = None,
    ) -> None:
        self.what, self.log, self.errors = what, log, errors
        self.stop = stop or threading.Event()
        self.down = False
        self._pause_s = BACKOFF_FIRST_S

    def failed(self, exc: BaseException) -> None:
        """A call failed with `exc`: note it (logged once per outage) and pause."""
        if not self.down:
            self.log.warning("%s is unavailable (%s); retrying until it is back", self.what, exc)
        self.down = True
        self.stop.wait(self._pause_s)
        self._pause_s = min(2 * self._pause_s, BACKOFF_MAX_S)

    def ok(self) -> bool:
        """A call succeeded; whether that ended an outage."""
        ended = self.down
        if ended:
            self.log.warning("%s is back", self.what)
        self.down = False
        self._pause_s = BACKOFF_FIRST_S
        return ended

    def call(self, function: Callable[[], T]) -> T:
        """`function()`, retried through outages until it succeeds (or `stop` is set: then
        the last error is raised)."""
        while True:
            try:
                value = function()
            except self.errors as exc:
                if self.stop.is_set():
                    raise
                self.failed(exc)
                continue
            self.ok()
            return value
