"""A small in-process TTL cache for read-mostly lookups (best kernels, API tokens).

Entries expire `ttl_s` after they are stored; when `max_entries` is reached the whole cache is
dropped rather than tracking recency, which is cheap and enough for lookups whose working set
is far smaller than the bound. Safe to share between threads: each operation is one dict
operation, atomic under the GIL, and a lost race only costs a repeated lookup.
"""

from __future__ import annotations

import time
from collections.abc import Hashable
from typing import Generic, TypeVar

ValueT = TypeVar("ValueT")


class TTLCache(Generic[ValueT]):
    def __init__(self, ttl_s: float, max_entries: int = 4096) -> None:
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self._entries: dict[Hashable, tuple[float, ValueT]] = {}

    def get(self, key: Hashable) -> ValueT | None:
        """The value stored under `key` unless it has expired (or the cache is disabled)."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        expires, value = entry
        if time.monotonic() >= expires:
            self._entries.pop(key, None)
            return None
        return value

    def put(self, key: Hashable, value: ValueT) -> None:
        if self.ttl_s <= 0:
            return
        if len(self._entries) >= self.max_entries:
            self._entries.clear()
        self._entries[key] = (time.monotonic() + self.ttl_s, value)
