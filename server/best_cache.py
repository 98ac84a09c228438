"""Best-kernel lookups, the service's hot path: one indexed query (`server.best`), and
answers kept in memory as the response bytes themselves.

Clients ask for the best kernel of a workload far more often than new records arrive, so a
found best is cached for `ttl_s` (the `best_cache_ttl_s` setting) as its JSON, rendered once
exactly as FastAPI renders a `RecordView`: a hit is bytes, no query and no pydantic model.
With Redis, a hit is served only while the workload's generation (`server.generations`) is the
one read before the query: a batch a tuner stored is visible at once on every API process.
Without Redis, a cached answer may be an older verified kernel for up to `ttl_s`, never a
wrong one. Misses are not cached, so a client polling for the first kernel of a workload sees
it as soon as it is stored.

`GET /v1/workloads/{key}/best` is answered before routing when its answer is cached
(`server.api.best_path`): the route tells `BestLookup` which lookup each raw query string
stands for, and `hit` finds it again without parsing anything. When a current answer's TTL
runs out there, it is served on while one lookup in the background reads it again: so a TTL
that ends under load is one query, not every waiting request's trip through the route at
once (and an older best is served for up to `ttl_s` plus that query's time).

`symbols` follow the tuning request's rule: the values given, with every symbol left out at
its default (`server.tuner.resolve_symbols`), so asking with the symbols a tuning was submitted
with finds its result; `None` means any symbol values.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass

from anyio import to_thread
from pydantic import TypeAdapter
from sqlalchemy.orm import Session, sessionmaker

from tunehub.compiler.canonical import workload_key
from tunehub.compiler.ir import Program
from tunehub.compiler.program import load
from tunehub.schemas.api import BestView
from tunehub.schemas.signature import TaskSignature
from tunehub.schemas.target import Target
from tunehub.server.best import best_for_device, no_kernel
from tunehub.server.db.session import session_scope
from tunehub.server.db.sql import canonical_json
from tunehub.server.db.workloads import get_workload, workload_symbols
from tunehub.server.errors import InvalidRequest, NotFound
from tunehub.server.generations import GenerationReader
from tunehub.server.tuner import resolve_symbols

# What FastAPI itself renders a route's `BestView` with, so cached bytes are what an uncached
# answer would have been, to the byte.
_BEST_JSON = TypeAdapter(BestView)
# Raw query strings, and answers, remembered at most (each dict is dropped when full).
MAX_QUERIES = 4096
MAX_ANSWERS = 4096

CacheKey = tuple[str, str, str | None, str | None]  # workload, target, symbols, device


@dataclass(frozen=True)
class _Lookup:
    """What a lookup looks up (`fill_in`: `symbols` are as given and get their defaults;
    `device`: the caller's device model, preferred)."""

    key: str
    target: Target
    symbols: Mapping[str, int] | None
    device: str | None
    fill_in: bool


@dataclass(frozen=True)
class _Answer:
    """A cached answer: its bytes, the workload's generation read before its query, when its
    TTL ends, and the lookup that reads it again."""

    generation: int | None
    body: bytes
    expires: float
    lookup: _Lookup


class BestLookup:
    """Finds the fastest verified record of a workload for a target (and symbol values, and
    preferably measured on the caller's device model), as the JSON of its `BestView`."""

    def __init__(
        self,
        sessions: sessionmaker[Session],
        ttl_s: float,
        generations: GenerationReader | None = None,
    ) -> None:
        self.sessions = sessions
        self.ttl_s = ttl_s
        self.generations = generations
        self._answers: dict[CacheKey, _Answer] = {}
        # (workload key, raw query string of a by-key request) -> the lookup it stands for.
        self._queries: dict[tuple[str, bytes], CacheKey] = {}
        self._refreshing: dict[CacheKey, asyncio.Task[None]] = {}

    async def by_key(
        self,
        key: str,
        target: Target,
        symbols: Mapping[str, int] | None,
        device: str | None = None,
        query: bytes | None = None,
    ) -> bytes:
        """The best record of workload `key` (measured on `device`, preferably: its
        `fallback` says why not); `NotFound` (with the reason) when there is none. `query`:
        the raw query string that asked, so that `hit` answers it next time."""
        lookup = _Lookup(key, target, symbols, device, fill_in=True)
        cache_key = _cache_key(lookup)
        if query is not None:
            if len(self._queries) >= MAX_QUERIES:
                self._queries.clear()
            self._queries[key, query] = cache_key
        return await self._cached(cache_key, lookup)

    async def by_signature(
        self,
        task: TaskSignature,
        target: Target,
        symbols: Mapping[str, int] | None,
        device: str | None = None,
    ) -> bytes:
        """As `by_key`, for the workload of `task` (validated: SignatureError)."""
        key, resolved = await to_thread.run_sync(_key_and_symbols, task, symbols)
        lookup = _Lookup(key, target, resolved, device, fill_in=False)
        return await self._cached(_cache_key(lookup), lookup)

    async def hit(self, key: str, query: bytes) -> bytes | None:
        """The cached answer to `GET /v1/workloads/{key}/best?{query}` while its generation
        is current (past its TTL too, while it is read again); None for anything else (the
        route then answers, and caches what it found)."""
        cache_key = self._queries.get((key, query))
        if cache_key is None:
            return None
        answer = self._answers.get(cache_key)
        if answer is None or answer.generation != await self._generation(key):
            return None
        if time.monotonic() >= answer.expires and cache_key not in self._refreshing:
            self._refreshing[cache_key] = asyncio.create_task(self._refresh(cache_key, answer))
        return answer.body

    async def _cached(self, cache_key: CacheKey, lookup: _Lookup) -> bytes:
        generation = await self._generation(lookup.key)  # read before the query
        answer = self._answers.get(cache_key)
        fresh = answer is not None and time.monotonic() < answer.expires
        if answer is not None and fresh and answer.generation == generation:
            return answer.body
        return await self._read(cache_key, lookup, generation)

    async def _read(self, cache_key: CacheKey, lookup: _Lookup, generation: int | None) -> bytes:
        """Run `lookup`, cache what it finds with `generation` (read before it), and return
        its bytes."""
        view = await to_thread.run_sync(self._lookup, lookup)
        body = _BEST_JSON.dump_json(view, by_alias=True)
        if self.ttl_s > 0:
            if len(self._answers) >= MAX_ANSWERS:
                self._answers.clear()
            expires = time.monotonic() + self.ttl_s
            self._answers[cache_key] = _Answer(generation, body, expires, lookup)
        return body

    async def _refresh(self, cache_key: CacheKey, stale: _Answer) -> None:
        """Read an answer whose TTL ended again; when that fails (the database is down, say),
        forget it, so that the route answers next with what went wrong."""
        try:
            generation = await self._generation(stale.lookup.key)
            await self._read(cache_key, stale.lookup, generation)
        except Exception:
            self._answers.pop(cache_key, None)
        finally:
            self._refreshing.pop(cache_key, None)

    async def _generation(self, key: str) -> int | None:
        """The workload's generation (`server.generations`); None without Redis."""
        return None if self.generations is None else await self.generations.current(key)

    def _lookup(self, lookup: _Lookup) -> BestView:
        """The lookup itself."""
        key, target, symbols = lookup.key, lookup.target, lookup.symbols
        with session_scope(self.sessions) as s:
            if symbols is not None and lookup.fill_in:
                symbols = _resolve(_program_of(s, key), symbols)
            if symbols is not None:  # as the workload names them
                symbols = workload_symbols(s, key, symbols)
            found = best_for_device(
                s, workload_key=key, target=target, symbols=symbols, device=lookup.device
            )
            if found.record is not None:
                view = BestView.model_validate(found.record)
                return view.model_copy(update={"fallback": found.fallback})
            if get_workload(s, key) is None:
                raise NotFound(f"no workload {key}")
        raise NotFound(no_kernel(key, target, symbols))


def _cache_key(lookup: _Lookup) -> CacheKey:
    symbols = None if lookup.symbols is None else canonical_json(lookup.symbols)
    return lookup.key, str(lookup.target), symbols, lookup.device


def _key_and_symbols(
    task: TaskSignature, symbols: Mapping[str, int] | None
) -> tuple[str, dict[str, int] | None]:
    program = load(task)
    return workload_key(program), None if symbols is None else _resolve(program, symbols)


def _program_of(s: Session, key: str) -> Program:
    workload = get_workload(s, key)
    if workload is None:
        raise NotFound(f"no workload {key}")
    return load(workload.signature)


def _resolve(program: Program, symbols: Mapping[str, int]) -> dict[str, int]:
    try:
        return resolve_symbols(program, symbols)
    except ValueError as exc:
        raise InvalidRequest(f"symbols: {exc}") from None
