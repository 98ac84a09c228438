"""The `tunehub` command line: the command group, with its logging options, and every command
of `client/commands/` in it.

Errors are one line, never a traceback: exit 2 for the user's mistakes (a missing file, an
invalid signature, an unknown symbol), 1 for internal failures (`TUNEHUB_DEBUG=1` shows the
traceback), 2 with the extra to install for a command whose packages are missing. The
commands import the service stack inside themselves, so `--help` and `schema` stay fast.
"""

from __future__ import annotations

import logging
import os
import sys

import click

from tunehub.client.commands import (
    cuda,
    extract,
    local,
    lookup,
    records,
    remote,
    services,
    signatures,
)
from tunehub.client.commands.common import UserError, missing_extra, one_line


def main(argv: list[str] | None = None) -> None:
    """The console script `tunehub`."""
    try:
        code = cli.main(args=argv, prog_name="tunehub", standalone_mode=False)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except (click.exceptions.Abort, KeyboardInterrupt):
        click.echo("error: interrupted", err=True)
        sys.exit(130)
    except ModuleNotFoundError as exc:
        extra = missing_extra(exc.name)
        if extra is None or os.environ.get("TUNEHUB_DEBUG"):
            raise
        click.echo(
            f"error: this command needs tunehub[{extra}] ({exc.name} is not installed): "
            f"pip install 'tunehub[{extra}]'",
            err=True,
        )
        sys.exit(2)
    except Exception as exc:
        if os.environ.get("TUNEHUB_DEBUG"):
            raise
        click.echo(f"error: internal error: {type(exc).__name__}: {one_line(str(exc))}", err=True)
        sys.exit(1)
    sys.exit(code if isinstance(code, int) else 0)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="tunehub", prog_name="tunehub", message="%(prog)s %(version)s")
@click.option(
    "-v", "--verbose", count=True, help="Log more (-v: info, -vv: debug); TUNEHUB_LOG_LEVEL too."
)
@click.option("-q", "--quiet", is_flag=True, help="Log errors only.")
def cli(verbose: int, quiet: bool) -> None:
    """tunehub: tune tensor programs for CPUs and GPUs, and keep every result."""
    from tunehub.worker import logs

    if verbose and quiet:
        raise UserError("-v and -q contradict each other: give one")
    if verbose or quiet:  # the environment: services started from here follow it too
        level = "ERROR" if quiet else ("DEBUG" if verbose > 1 else "INFO")
        os.environ[logs.LEVEL_ENV] = level
    try:
        logs.configure(logging.WARNING)
    except ValueError as exc:
        raise UserError(str(exc)) from exc


for command in (
    *signatures.COMMANDS,
    *local.COMMANDS,
    *remote.COMMANDS,
    *lookup.COMMANDS,
    *services.COMMANDS,
    *cuda.COMMANDS,
    *extract.COMMANDS,
    *records.COMMANDS,
):
    cli.add_command(command)
