"""The OpenAPI document says which errors each operation answers, and that every one of them is
`{"detail": "<one line>"}` (`ErrorView`), so that generated clients parse errors as the
server sends them.

The errors follow from what an operation is, one rule each: any operation refuses an open
server's clients on other machines (403); every `/v1` operation needs a token (401 without a
valid one, 403 when its scope is too small) and the database (503 when it, or Redis, is
down); one with parameters
or a body can be invalid (422, FastAPI's own array-shaped schema replaced); one with path
parameters names something that may not exist (404); one with a body can be too large (413)
or declare a length that is not a number (400). Errors a route alone answers (409 for a
cancel that comes too late) are declared on the route; the document gives them the same body.

The document (`/openapi.json`) and its interactive page (`/docs`) follow the token rule: with
tokens, they need a read token unless the `public_docs` setting lists them as public.

Query parameters the service parses itself, to answer with its own one-line messages, get
the pattern of what it accepts in the document: `target` (the registry's kinds and variants,
read when the document is built, so plugin kinds are in it) and each `symbol`.
"""

from __future__ import annotations

from typing import Any

from fastapi import Depends, FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.openapi.utils import get_openapi
from fastapi.responses import HTMLResponse, JSONResponse
from fastapi.routing import APIRoute

from tunehub.schemas.api import ErrorView, Scope
from tunehub.schemas.target import text_pattern
from tunehub.server.api.auth import require
from tunehub.server.api.deps import SYMBOL_PATTERN

DESCRIPTIONS = {
    400: "The Content-Length header is not a number",
    401: "No API token, or an invalid or revoked one (servers with TUNEHUB_AUTH=token)",
    403: "The token's scope is too small, or an open server's client is not on its machine",
    404: "What the path names does not exist",
    409: "The request does not fit the current state",
    413: "The request body is over the server's limit",
    422: "Invalid input: a parameter, the body, a signature, a target or symbol values",
    503: "The database or Redis is unavailable",
}
_ERROR_REF = {"$ref": f"#/components/schemas/{ErrorView.__name__}"}
# FastAPI's default 422 models, which describe a body this API never sends.
_FASTAPI_VALIDATION = ("HTTPValidationError", "ValidationError")


OPENAPI_URL = "/openapi.json"
DOCS_URL = "/docs"


def install(app: FastAPI) -> None:
    """Make `app.openapi()` document the errors (built once, on first use, as FastAPI does),
    and serve it and its page under the token rule (the app is made without FastAPI's own)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = document(app)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    access = [Depends(require(Scope.READ, public=lambda settings: settings.public_docs))]

    @app.get(OPENAPI_URL, include_in_schema=False, dependencies=access)
    async def openapi_json() -> JSONResponse:
        return JSONResponse(openapi())

    @app.get(DOCS_URL, include_in_schema=False, dependencies=access)
    async def docs() -> HTMLResponse:
        return get_swagger_ui_html(openapi_url=OPENAPI_URL, title=f"{app.title} API")


def document(app: FastAPI) -> dict[str, Any]:
    """The app's OpenAPI document with every operation's error responses."""
    schema = get_openapi(
        title=app.title,
        version=app.version,
        summary=app.summary,
        description=app.description,
        routes=app.routes,
    )
    patterns = {"target": text_pattern(), "symbol": SYMBOL_PATTERN.pattern}
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    for name in _FASTAPI_VALIDATION:
        components.pop(name, None)
    components[ErrorView.__name__] = ErrorView.model_json_schema()
    for component in components.values():  # a request's `target` in its short form
        target = component.get("properties", {}).get("target")
        if target is not None:
            _constrain(target, patterns["target"])
    for route in api_routes(app):
        for method in route.methods or ():
            operation = schema["paths"][route.path_format][method.lower()]
            for parameter in operation.get("parameters", []):
                if parameter["in"] == "query" and parameter["name"] in patterns:
                    _constrain(parameter["schema"], patterns[parameter["name"]])
            responses = operation.setdefault("responses", {})
            for code in sorted(errors_of(route) | _declared_errors(responses)):
                declared = responses.get(str(code), {})
                if code != 422 and "content" in declared:  # a body of its own (`/readyz`)
                    continue
                responses[str(code)] = {
                    "description": declared.get("description") or DESCRIPTIONS[code],
                    "content": {"application/json": {"schema": _ERROR_REF}},
                }
    return schema


def errors_of(route: APIRoute) -> set[int]:
    """The error statuses `route` may answer by the rules above."""
    dependant = route.dependant
    codes = {403}  # an open server's clients on other machines
    if route.path_format.startswith("/v1/"):
        codes |= {401, 503}
    flat = _flat(dependant)
    if flat["path"]:
        codes.add(404)
    if flat["path"] or flat["query"] or flat["body"]:
        codes.add(422)
    if flat["body"]:
        codes |= {400, 413}
    return codes


def _flat(dependant: Any) -> dict[str, bool]:
    """Whether the route or any of its dependencies reads path, query or body parameters."""
    found = {
        "path": bool(dependant.path_params),
        "query": bool(dependant.query_params),
        "body": bool(dependant.body_params),
    }
    for sub in dependant.dependencies:
        for place, present in _flat(sub).items():
            found[place] = found[place] or present
    return found


def _constrain(schema: dict[str, Any], pattern: str) -> None:
    """Give the strings of a parameter's schema (optional, or a list of them) `pattern`."""
    if schema.get("type") == "string":
        schema["pattern"] = pattern
    for inner in [*schema.get("anyOf", ()), *filter(None, [schema.get("items")])]:
        _constrain(inner, pattern)


def _declared_errors(responses: dict[str, Any]) -> set[int]:
    return {int(code) for code in responses if code.isdigit() and int(code) in DESCRIPTIONS}


def api_routes(app: FastAPI) -> list[APIRoute]:
    """Every API route of the app, through included routers."""
    found = []
    for route in app.routes:
        original = getattr(route, "original_router", None)
        for inner in original.routes if original is not None else [route]:
            if isinstance(inner, APIRoute) and inner.include_in_schema:
                found.append(inner)
    return found
