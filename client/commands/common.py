"""What every `tunehub` command shares: one-line errors with exit codes, reading signature
files, `NAME=VALUE` symbols, the server options and the client they open, number formats."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TypeVar

import click

if TYPE_CHECKING:
    from client.sdk import Client

SERVER_ENV, TOKEN_ENV = "TUNEHUB_SERVER", "TUNEHUB_TOKEN"
F = TypeVar("F", bound=Callable[..., Any])


class CliError(click.ClickException):
    """An error shown as one line, `error: ...`, never with a traceback."""

    def show(self, file: IO[Any] | None = None) -> None:
        click.echo(f"error: {one_line(self.message)}", err=True)


class UserError(CliError):
    """A mistake in the command's input (a file, a signature, an option): exit 2."""

    exit_code = 2


class InternalError(CliError):
    """Something in tunehub failed: exit 1."""

    exit_code = 1


def server_options(command: F) -> F:
    """`--server` and `--token`, from TUNEHUB_SERVER and TUNEHUB_TOKEN by default."""
    from client.sdk import DEFAULT_SERVER

    command = click.option(
        "--token",
        envvar=TOKEN_ENV,
        help=f"API token, when the server needs one (default: ${TOKEN_ENV}).",
    )(command)
    return click.option(
        "--server",
        envvar=SERVER_ENV,
        default=DEFAULT_SERVER,
        show_default=True,
        help=f"The tunehub server's URL (or ${SERVER_ENV}).",
    )(command)


@contextmanager
def connect(server: str, token: str | None) -> Iterator[Client]:
    """A client of `server`; its errors become one-line CLI errors: the server's 4xx answers
    are the user's (exit 2), anything else tunehub's or the network's (exit 1)."""
    from client.sdk import ApiError, Client, ClientError

    try:
        with Client(server, token) as client:
            yield client
    except ApiError as exc:
        error = UserError if 400 <= exc.status_code < 500 else InternalError
        raise error(str(exc)) from exc
    except ClientError as exc:
        raise InternalError(str(exc)) from exc


def read_signature(path: Path) -> dict[str, Any]:
    """The JSON document in `path` (validated where it is used); UserError when unreadable."""
    try:
        document = json.loads(path.read_text())
    except OSError as exc:
        raise UserError(f"cannot read {path}: {exc.strerror or exc}") from exc
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: invalid JSON: {exc}") from exc
    except RecursionError as exc:  # the json module recurses once per level of nesting
        raise UserError(f"{path}: invalid JSON: nested too deeply") from exc
    if not isinstance(document, dict):
        raise UserError(f"{path}: a task signature is a JSON object")
    return document


def parse_symbols(args: tuple[str, ...]) -> dict[str, int]:
    """`("M=64",)` -> `{"M": 64}`; UserError for anything else."""
    given = {}
    for arg in args:
        name, sep, value = arg.partition("=")
        if not sep or not name.strip() or not value.strip().lstrip("-").isdigit():
            raise UserError(f"--symbol expects NAME=INTEGER, not {arg!r}")
        given[name.strip()] = int(value)
    return given


def symbol_option(help_text: str) -> Callable[[F], F]:
    return click.option(
        "--symbol", "symbol_args", multiple=True, metavar="NAME=VALUE", help=help_text
    )


def seconds(value: float | None) -> str:
    """A duration for people: `1.23 ms`; `-` for none."""
    if value is None:
        return "-"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if value >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value / 1e-9:.3g} ns"


def one_line(text: str) -> str:
    return " ".join(text.split())
