"""Best-kernel lookups, the service's hot path: one indexed query, and hits kept in memory.

Clients ask for the best kernel of a workload far more often than new records arrive, so a
found best is cached for `ttl_s` (the `best_cache_ttl_s` setting). With Redis, a hit is served
only while the workload's generation (`server.generations`) is the one read before the query:
a batch a tuner stored is visible at once, and a hit costs one Redis GET, no query. Without
Redis, a cached answer may be an older verified kernel for up to `ttl_s`, never a wrong one.
Misses are not cached, so a client polling for the first kernel of a workload sees it as soon
as it is stored.

`symbols` follow the tuning request's rule: the values given, with every symbol left out at
its default (`server.tuner.resolve_symbols`), so asking with the symbols a tuning was submitted
with finds its result; `None` means any symbol values.
"""

from __future__ import annotations

from collections.abc import Mapping

from anyio import to_thread
from sqlalchemy.orm import Session, sessionmaker

from tunehub.compiler.canonical import workload_key
from tunehub.compiler.ir import Program
from tunehub.compiler.program import load
from tunehub.schemas.api import BestView
from tunehub.schemas.signature import TaskSignature
from tunehub.schemas.target import Target
from tunehub.server.cache import TTLCache
from tunehub.server.db import store
from tunehub.server.db.session import session_scope
from tunehub.server.errors import InvalidRequest, NotFound
from tunehub.server.generations import BestGenerations
from tunehub.server.tuner import resolve_symbols


class BestLookup:
    """Finds the fastest verified record of a workload for a target (and symbol values)."""

    def __init__(
        self,
        sessions: sessionmaker[Session],
        ttl_s: float,
        generations: BestGenerations | None = None,
    ) -> None:
        self.sessions = sessions
        self.generations = generations
        # Each best with the generation of its workload it was read at.
        self._cache: TTLCache[tuple[int | None, BestView]] = TTLCache(ttl_s)

    async def by_key(
        self,
        key: str,
        target: Target,
        symbols: Mapping[str, int] | None,
        device: str | None = None,
    ) -> BestView:
        """The best record of workload `key` (measured on `device`, preferably: its
        `fallback` says why not); `NotFound` (with the reason) when there is none. A cache
        hit costs no query (and, without Redis, no thread)."""
        return await self._cached(key, target, symbols, device, fill_in=True)

    async def by_signature(
        self,
        task: TaskSignature,
        target: Target,
        symbols: Mapping[str, int] | None,
        device: str | None = None,
    ) -> BestView:
        """As `by_key`, for the workload of `task` (validated: SignatureError)."""
        key, resolved = await to_thread.run_sync(_key_and_symbols, task, symbols)
        return await self._cached(key, target, resolved, device, fill_in=False)

    async def _cached(
        self,
        key: str,
        target: Target,
        symbols: Mapping[str, int] | None,
        device: str | None,
        *,
        fill_in: bool,
    ) -> BestView:
        symbols_key = None if symbols is None else store.canonical_json(symbols)
        cache_key = (key, str(target), symbols_key, device)
        generation = None
        if self.generations is not None:  # read before the query (`server.generations`)
            generation = await to_thread.run_sync(self.generations.current, key)
        hit = self._cache.get(cache_key)
        if hit is not None and hit[0] == generation:
            return hit[1]
        view = await to_thread.run_sync(self._lookup, key, target, symbols, device, fill_in)
        self._cache.put(cache_key, (generation, view))
        return view

    def _lookup(
        self,
        key: str,
        target: Target,
        symbols: Mapping[str, int] | None,
        device: str | None,
        fill_in: bool,
    ) -> BestView:
        """The lookup itself; `fill_in`: `symbols` are as given and get their defaults."""
        with session_scope(self.sessions) as s:
            if symbols is not None and fill_in:
                symbols = _resolve(_program_of(s, key), symbols)
            if symbols is not None:  # as the workload names them
                symbols = store.workload_symbols(s, key, symbols)
            found = store.best_for_device(
                s, workload_key=key, target=target, symbols=symbols, device=device
            )
            if found.record is not None:
                view = BestView.model_validate(found.record)
                return view.model_copy(update={"fallback": found.fallback})
            if store.get_workload(s, key) is None:
                raise NotFound(f"no workload {key}")
        raise NotFound(no_kernel(key, target, symbols))


def no_kernel(key: str, target: Target, symbols: Mapping[str, int] | None) -> str:
    """Why a known workload has no kernel to answer with."""
    where = f"{target}" + (f" with {_text(symbols)}" if symbols else "")
    return f"no verified kernel of workload {key} for {where} yet"


def _key_and_symbols(
    task: TaskSignature, symbols: Mapping[str, int] | None
) -> tuple[str, dict[str, int] | None]:
    program = load(task)
    return workload_key(program), None if symbols is None else _resolve(program, symbols)


def _program_of(s: Session, key: str) -> Program:
    workload = store.get_workload(s, key)
    if workload is None:
        raise NotFound(f"no workload {key}")
    return load(workload.signature)


def _resolve(program: Program, symbols: Mapping[str, int]) -> dict[str, int]:
    try:
        return resolve_symbols(program, symbols)
    except ValueError as exc:
        raise InvalidRequest(f"symbols: {exc}") from None


def _text(symbols: Mapping[str, int]) -> str:
    return ", ".join(f"{name}={value}" for name, value in sorted(symbols.items()))
