"""The one error a frontend raises for a model it cannot read at all (a malformed file, text
that is not TVMScript, a factory that returns no module): the CLI prints it as one line and
exits 2. An op or function it cannot map is no error: it is left out and listed, with the
reason `reason` gives."""

from __future__ import annotations

from pydantic import ValidationError


class ModelError(ValueError):
    """The model cannot be read; the message says where and why, on one line."""


def reason(exc: Exception) -> str:
    """Why an op or function was left out, on one line: the exception's message, or a
    signature model's first complaint (a name too long, more computes than allowed)."""
    if isinstance(exc, ValidationError):
        error = exc.errors()[0]
        return f"{'.'.join(map(str, error.get('loc', ())))}: {error['msg']}"
    return " ".join(str(exc).split())
