"""Errors the compiler raises. Each carries a one-line message meant for the user."""


class SignatureError(ValueError):
    """The task signature is malformed or semantically invalid."""


class InvalidConfig(ValueError):
    """A schedule config is not valid for its space (rejected before any compiler runs)."""
