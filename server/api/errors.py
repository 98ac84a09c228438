"""Every error response is `{"detail": "<one line>"}`, with the status the error deserves.

Invalid input is the client's (4xx, with the validator's own message; a value the database
refuses to store, `DataError`, is one too); only an unavailable dependency answers 5xx (503:
Redis or the database is down). Anything else would be a bug.

A 503 names the fault class only ("the database is unavailable"): the driver's text names the
database's host and port, which is the operator's business (the log has it), not a client's.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from fastapi import FastAPI, Request, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from redis.exceptions import RedisError
from sqlalchemy.exc import DataError, OperationalError
from starlette.exceptions import HTTPException

from tunehub.compiler.errors import SignatureError
from tunehub.server.api.openapi import api_routes
from tunehub.server.errors import Conflict, InvalidRequest, NotFound, ServiceError, Unavailable
from tunehub.server.health import database_fault

log = logging.getLogger(__name__)

# A 503 means a dependency is down: daemons ride out such outages in seconds, so clients may.
RETRY_AFTER_S = 5
_RETRY = {"Retry-After": str(RETRY_AFTER_S)}

# A detail quotes user input at times (an unknown target, say): keep it readable.
MAX_DETAIL_CHARS = 500

_STATUS: dict[type[ServiceError], int] = {
    InvalidRequest: status.HTTP_422_UNPROCESSABLE_CONTENT,
    NotFound: status.HTTP_404_NOT_FOUND,
    Conflict: status.HTTP_409_CONFLICT,
    Unavailable: status.HTTP_503_SERVICE_UNAVAILABLE,
}


def error_response(
    status_code: int, detail: str, headers: Mapping[str, str] | None = None
) -> JSONResponse:
    return JSONResponse({"detail": one_line(detail)}, status_code, headers=headers)


def one_line(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_DETAIL_CHARS else text[: MAX_DETAIL_CHARS - 3] + "..."


def validation_message(errors: Sequence[Any]) -> str:
    """The first validation error as `where: what (and N more)`, like the compiler's."""
    if not errors:
        return "invalid request"
    first = errors[0]
    loc = list(first.get("loc", ()))
    if loc and loc[0] == "body":  # the body is what is usually meant; say where in it
        loc = loc[1:]
    # List positions as indexes (`tasks[2].task`), the way messages name a group's tasks.
    where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".")
    where = where or "body"
    message = str(first.get("msg", "invalid"))
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"invalid request: {where}: {message}{more}"


async def _validation(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    return error_response(status.HTTP_422_UNPROCESSABLE_CONTENT, validation_message(exc.errors()))


async def _service(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ServiceError)
    status_code = _STATUS[type(exc)]
    headers = _RETRY if status_code == status.HTTP_503_SERVICE_UNAVAILABLE else None
    return error_response(status_code, str(exc), headers)


async def _signature(_: Request, exc: Exception) -> JSONResponse:
    return error_response(status.HTTP_422_UNPROCESSABLE_CONTENT, str(exc))


async def _http(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, HTTPException)
    headers = exc.headers
    if exc.status_code == status.HTTP_405_METHOD_NOT_ALLOWED:
        # Starlette names the methods of the first route matching the path only.
        headers = {**(headers or {}), "Allow": ", ".join(allowed_methods(request))}
    return error_response(exc.status_code, str(exc.detail), headers)


def allowed_methods(request: Request) -> list[str]:
    """Every method some route of the app answers at the request's path."""
    path = request.scope["path"]
    methods = {
        method
        for route in api_routes(request.app)
        if route.path_regex.match(path)
        for method in route.methods or ()
    }
    return sorted(methods)


def _unavailable(fault: str, exc: Exception) -> JSONResponse:
    log.warning("%s: %s", fault, one_line(str(exc)))
    return error_response(status.HTTP_503_SERVICE_UNAVAILABLE, f"{fault}; retry later", _RETRY)


async def _redis(_: Request, exc: Exception) -> JSONResponse:
    return _unavailable("Redis is unavailable", exc)


async def _database(_: Request, exc: Exception) -> JSONResponse:
    return _unavailable(database_fault(exc), exc)


async def _unstorable(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, DataError)
    log.info("the database refused a value: %s", one_line(str(exc.orig)))
    return error_response(
        status.HTTP_422_UNPROCESSABLE_CONTENT,
        "invalid request: the database cannot store a value of it (out of range, or text it "
        "cannot hold)",
    )


def install(app: FastAPI) -> None:
    """Register the handlers that give every error its status and one-line detail."""
    app.add_exception_handler(RequestValidationError, _validation)
    app.add_exception_handler(HTTPException, _http)
    app.add_exception_handler(SignatureError, _signature)
    for error_class in _STATUS:
        app.add_exception_handler(error_class, _service)
    app.add_exception_handler(RedisError, _redis)
    app.add_exception_handler(OperationalError, _database)
    app.add_exception_handler(DataError, _unstorable)
