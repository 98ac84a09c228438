"""Errors the service answers a request with, each with a one-line message for the user.

The API maps each class to its HTTP status (`server.api.errors`); the logic raising them does
not know about HTTP.
"""


class ServiceError(Exception):
    """A request the service cannot fulfil, for the reason in the message."""


class InvalidRequest(ServiceError):
    """The request is well-formed but asks for something invalid (422)."""


class NotFound(ServiceError):
    """What the request names does not exist (404)."""


class Conflict(ServiceError):
    """The request does not fit the current state, e.g. cancelling a finished tuning (409)."""


class Unavailable(ServiceError):
    """A dependency the request needs (Redis, the database) is missing or down (503)."""
