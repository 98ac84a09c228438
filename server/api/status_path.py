"""The status routes' fast path: `GET /v1/tunings...`, `/v1/tuning-groups...` and the
dashboard's pages answered from the response bytes the route gave last, before any routing.

Every dashboard and `tunehub status --watch` polls these routes, and their answers change
only when a tuner stores a batch or a tuning moves on; yet each one cost two ORM queries, a
pydantic view and its JSON (or a template), in threads (profiled: about 0.5 ms of work and
four thread hops per request, some 250 requests a second per API). So the answer a route gave
with 200 is kept, as its status, headers and bytes, and served again to the same path and
query string while it is current:

- a batch stored anywhere makes every kept answer stale: the best generations' channel tells
  each API process (`GenerationReader.on_bump`), as it tells the best-kernel cache;
- an answer is stale `ttl_s` after it was read (the `status_cache_ttl_s` setting): what no
  batch announces (a tuning started, ended, cancelled on another API process, marked
  stalled), and everything while the channel is down, is seen within it;
- the next request for a stale answer reads it again through the route, and the requests
  that come meanwhile get the stale one (so a page that takes long to render does not hold
  fifty pollers after every batch): an answer is at most one route call older than the
  change that made it stale;
- a request of this process that may write (not a GET or HEAD, nor the best-kernel lookup by
  signature: a submission, a cancel, an import) forgets every kept answer: the next ones
  wait for the route, and show the write.

A kept answer of `GZIP_MIN_BYTES` or more goes gzipped to a client that accepts gzip
(browsers, httpx): a live tuning's page is some 100 KB of HTML (its charts and its records),
which every poller's copy cost more than the page's rendering; gzipped once per answer (about
0.4 ms), it is a twelfth. Its kept copy says `Vary: Accept-Encoding`, gzipped or not.

It serves only callers the route would let through (`auth.surely_readable`; the dashboard's
cookie too); everyone else, and every miss, goes to the route, which decides as it always
has. A hit is the bytes, headers and status the route gave: counted under the route's
template by the request metrics.
"""

from __future__ import annotations

import asyncio
import gzip
import time
from dataclasses import dataclass, field

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tunehub.server.api.auth import surely_readable
from tunehub.server.api.deps import Services
from tunehub.server.api.routes.ui import COOKIE
from tunehub.server.generations import GenerationReader

# The routes kept: the tunings' and groups' views, the dashboard's pages (not its static files
# or its login form, which sets a cookie).
KEPT_PREFIXES = ("/v1/tunings", "/v1/tuning-groups", "/ui")
NOT_KEPT = ("/ui/static", "/ui/login", "/ui/logout")
MAX_ANSWERS = 4096
GZIP_MIN_BYTES = 2048
_VARY = (b"vary", b"Accept-Encoding")
_READS = ("GET", "HEAD")
# A POST that only reads: the best kernel of a signature (clients call it at load).
_READING_POSTS = ("/v1/workloads/best",)

# Path, raw query string, and whether the dashboard's cookie came (its pages show a logout).
_Key = tuple[str, bytes, bool]
_Headers = list[tuple[bytes, bytes]]


@dataclass
class _Answer:
    status: int
    headers: _Headers
    body: bytes
    route: object  # the matched route, for the request metrics
    epoch: int  # the cache's epoch when the route began to answer
    expires: float
    gzipped: tuple[_Headers, bytes] | None = field(default=None, repr=False)

    def compressible(self) -> bool:
        return len(self.body) >= GZIP_MIN_BYTES and all(
            name != b"content-encoding" for name, _ in self.headers
        )

    def as_gzip(self) -> tuple[_Headers, bytes]:
        """Its headers and body gzipped, made on the first request that accepts them."""
        if self.gzipped is None:
            body = gzip.compress(self.body, compresslevel=1, mtime=0)
            headers = [(n, v) for n, v in self.headers if n != b"content-length"]
            headers += [
                (b"content-length", str(len(body)).encode()),
                (b"content-encoding", b"gzip"),
            ]
            self.gzipped = (headers, body)
        return self.gzipped


class StatusFastPath:
    """ASGI middleware keeping the status routes' answers (see the module)."""

    def __init__(
        self,
        app: ASGIApp,
        services: Services,
        ttl_s: float,
        generations: GenerationReader | None,
    ) -> None:
        self.app, self.services, self.ttl_s = app, services, ttl_s
        self.generations = generations
        if generations is not None:
            generations.on_bump.append(self.drop)
        self._epoch = 0
        self._forgotten = 0  # how many times `forget` ran
        self._answers: dict[_Key, _Answer] = {}
        self._reading: dict[_Key, asyncio.Future[_Answer | None]] = {}

    def drop(self) -> None:
        """Make every kept answer stale (and those being read: they may predate the change)."""
        self._epoch += 1

    def forget(self) -> None:
        """Drop every kept answer: none is served again, stale or not."""
        self.drop()
        self._forgotten += 1
        self._answers.clear()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope["method"] not in _READS and scope["path"] not in _READING_POSTS:
            try:
                await self.app(scope, receive, send)
            finally:
                self.forget()  # it may have written: a submission, a cancel, an import
            return
        path: str = scope["path"]
        if (
            self.ttl_s <= 0
            or scope["method"] != "GET"
            or not path.startswith(KEPT_PREFIXES)
            or path.startswith(NOT_KEPT)
            or not surely_readable(self.services, scope, COOKIE)
        ):
            await self.app(scope, receive, send)
            return
        if self.generations is not None:
            self.generations.follow()
        cookies = b"".join(value for name, value in scope["headers"] if name == b"cookie")
        key = (path, scope["query_string"], COOKIE.encode() in cookies)
        answer = self._answers.get(key)
        if answer is None or not self._current(answer):
            reading = self._reading.get(key)
            if reading is None:
                await self._read(key, scope, receive, send)
                return
            # Being read again: the stale answer meanwhile, else the one being read.
            answer = answer or await asyncio.shield(reading)
            if answer is None:
                await self.app(scope, receive, send)
                return
        scope["route"] = answer.route
        headers, body = answer.headers, answer.body
        if answer.compressible() and _accepts_gzip(scope):
            headers, body = answer.as_gzip()
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    def _current(self, answer: _Answer) -> bool:
        return answer.epoch == self._epoch and time.monotonic() < answer.expires

    async def _read(self, key: _Key, scope: Scope, receive: Receive, send: Send) -> None:
        """Let the route answer, sending its answer on as it comes, and keep it if it is a
        whole 200 without cookies and nothing was forgotten meanwhile (under the epoch it
        began in: stale at once if a change came meanwhile, yet newer than the one before)."""
        epoch, forgotten = self._epoch, self._forgotten
        future: asyncio.Future[_Answer | None] = asyncio.get_running_loop().create_future()
        self._reading[key] = future
        start: Message | None = None
        body: list[bytes] = []

        async def keep(message: Message) -> None:
            nonlocal start
            if message["type"] == "http.response.start":
                start = message
            elif message["type"] == "http.response.body":
                body.append(message.get("body", b""))
            await send(message)

        answer = None
        try:
            await self.app(scope, receive, keep)
            if start is not None and self._keepable(start) and forgotten == self._forgotten:
                answer = _Answer(
                    200,
                    list(start.get("headers", [])),
                    b"".join(body),
                    scope.get("route"),
                    epoch,
                    time.monotonic() + self.ttl_s,
                )
                if answer.compressible():
                    answer.headers.append(_VARY)
                if len(self._answers) >= MAX_ANSWERS:
                    self._answers.clear()
                self._answers[key] = answer
        finally:
            self._reading.pop(key, None)
            future.set_result(answer)

    @staticmethod
    def _keepable(start: Message) -> bool:
        headers = start.get("headers", [])
        return start["status"] == 200 and all(name != b"set-cookie" for name, _ in headers)


def _accepts_gzip(scope: Scope) -> bool:
    """Whether the request's Accept-Encoding names gzip (or `*`) with a weight above 0."""
    for name, value in scope["headers"]:
        if name != b"accept-encoding":
            continue
        for part in value.decode("latin-1").lower().split(","):
            coding, *params = (item.strip() for item in part.split(";"))
            weights = [p.removeprefix("q=") for p in params if p.startswith("q=")]
            if coding in ("gzip", "*") and not (weights and _weight(weights[0]) <= 0):
                return True
    return False


def _weight(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return 0.0
