"""How the SDK's requests ride out short outages: which are sent again, how long they wait, and
what the error says when the time is up.

A request that never reached the server (connection refused while the API restarts), and an
idempotent one (GET) that lost its connection or was answered 502, 503 or 504, is sent again
with exponential backoff for up to `retry_s` seconds in all (TUNEHUB_RETRY_S, default 30; 0
turns it off). So `Client.wait` outlives an API restart. A submission that may have reached
the server is never sent twice. When the time is up, the error says how long and how many
tries it took.
"""

from __future__ import annotations

import os

import httpx

from tunehub.client.errors import ApiError, ClientError

# Retries through outages: the first after RETRY_START_S, each wait twice the last, at most
# RETRY_MAX_DELAY_S (or the server's Retry-After), for RETRY_ENV seconds in all.
RETRY_ENV = "TUNEHUB_RETRY_S"
DEFAULT_RETRY_S = 30.0
RETRY_START_S = 0.1
RETRY_MAX_DELAY_S = 2.0
IDEMPOTENT = frozenset({"GET", "HEAD", "OPTIONS"})
RETRY_STATUSES = frozenset({502, 503, 504})


def default_retry_s() -> float:
    """TUNEHUB_RETRY_S, else DEFAULT_RETRY_S (a value that is not a number: the default)."""
    try:
        return max(0.0, float(os.environ.get(RETRY_ENV, DEFAULT_RETRY_S)))
    except ValueError:
        return DEFAULT_RETRY_S


def retry_after(response: httpx.Response) -> float:
    """The server's `Retry-After` in seconds (0 when it gives none, or a date), at most
    RETRY_MAX_DELAY_S."""
    try:
        return min(float(response.headers.get("retry-after", 0)), RETRY_MAX_DELAY_S)
    except ValueError:
        return 0.0


def gave_up(failure: ClientError, tries: int, seconds: float) -> ClientError:
    """`failure`, saying how long it was retried (as it was if it was not)."""
    if tries == 1:
        return failure
    note = f" (gave up after {tries} tries over {seconds:.0f} s; {RETRY_ENV} sets how long)"
    if isinstance(failure, ApiError):
        return type(failure)(
            failure.status_code, failure.detail, failure.method, failure.path, note
        )
    return type(failure)(f"{failure}{note}")
