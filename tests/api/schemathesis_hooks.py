"""Schemathesis hooks of `test_schemathesis` (loaded through SCHEMATHESIS_HOOKS): a records
file (`POST /v1/records`, `application/x-ndjson`) is sent as the text generated for it."""

from __future__ import annotations

from typing import Any

import schemathesis


@schemathesis.serializer("application/x-ndjson")
def records_file(ctx: Any, value: Any) -> bytes:
    return value.encode() if isinstance(value, str) else str(value).encode()
