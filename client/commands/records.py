"""`tunehub records export|import` and `tunehub push`: move measurements between databases as
records files (`schemas.records`, `docs/records.md`).

A local database is read and written through `server.records`; a server through
`POST /v1/records` (an admin token). The service stack is imported inside the commands.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import click

from tunehub.client.commands.common import (
    LOCAL_DB_HELP,
    SERVER_ENV,
    TOKEN_ENV,
    UserError,
    connect,
    local_sessions,
)

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from tunehub.schemas.records import ImportSummary

_DB_OPTION = click.option("--db", "db_url", help=LOCAL_DB_HELP)
_TOKEN_OPTION = click.option(
    "--token", envvar=TOKEN_ENV, help=f"An admin API token (default: ${TOKEN_ENV})."
)
_WORKLOADS_OPTION = click.option(
    "--workload",
    "prefixes",
    multiple=True,
    metavar="KEY",
    help="Only this workload (its key or a prefix of it; repeatable). Default: every one.",
)


@click.group()
def records() -> None:
    """Export a database's records to a file, or import one (locally or into a server)."""


@records.command("export")
@_WORKLOADS_OPTION
@click.option(
    "-o",
    "--output",
    type=click.Path(path_type=Path, dir_okay=False),
    help="The file to write (default: standard output).",
)
@_DB_OPTION
def export(prefixes: tuple[str, ...], output: Path | None, db_url: str | None) -> None:
    """Write the records (with their workloads and kernels) as a records file."""
    from tunehub.server.records import RECORD_LINE_START, export_lines

    with local_sessions(db_url)() as s:
        keys = _workload_keys(s, prefixes)
        lines = export_lines(s, keys)
        if output is None:
            for line in lines:
                sys.stdout.write(line + "\n")
            return
        count = 0
        try:
            with output.open("w") as file:
                for line in lines:
                    file.write(line + "\n")
                    count += line.startswith(RECORD_LINE_START)
        except OSError as exc:
            raise UserError(f"cannot write {output}: {exc.strerror or exc}") from exc
    click.echo(f"wrote {output}: {count} records", err=True)


@records.command("import")
@click.argument("file", type=click.Path(path_type=Path, dir_okay=False))
@click.option(
    "--server",
    help=f"Import into this tunehub server instead of a local database (or ${SERVER_ENV}).",
)
@_TOKEN_OPTION
@_DB_OPTION
def import_(file: Path, server: str | None, token: str | None, db_url: str | None) -> None:
    """Add a records file's workloads, kernels and records to a database, skipping those it
    holds (the same workload, target, device, symbols and config)."""
    if server is not None and db_url is not None:
        raise UserError("import into a server (--server) or a database (--db), not both")
    lines = list(_read_lines(file))
    if server is not None:
        summary = _send(server, token, lines)
    else:
        from tunehub.server.errors import InvalidRequest
        from tunehub.server.records import import_records

        try:
            summary = import_records(local_sessions(db_url), lines)
        except InvalidRequest as exc:
            raise UserError(f"{file}: {exc}") from exc
    click.echo(_summary_text(summary))


@click.command()
@click.option(
    "--server",
    envvar=SERVER_ENV,
    required=True,
    help=f"The tunehub server to send to (or ${SERVER_ENV}).",
)
@_TOKEN_OPTION
@_WORKLOADS_OPTION
@_DB_OPTION
def push(server: str, token: str | None, prefixes: tuple[str, ...], db_url: str | None) -> None:
    """Send this machine's tunings (every record of the local database) to a server, which
    keeps what it lacks: `tunehub tune` here, then share the kernels there."""
    from tunehub.server.records import export_lines

    with local_sessions(db_url)() as s:
        lines = list(export_lines(s, _workload_keys(s, prefixes)))
    click.echo(_summary_text(_send(server, token, lines)))


def _workload_keys(s: Session, prefixes: tuple[str, ...]) -> list[str] | None:
    """The workloads `--workload` names, each a key or a prefix (all that start with it);
    None (every workload) without any."""
    from tunehub.server.db.workloads import workloads_with_prefix

    if not prefixes:
        return None
    keys: list[str] = []
    for prefix in prefixes:
        found = workloads_with_prefix(s, prefix, limit=None)
        if not found:
            raise UserError(f"no workload has a key starting with {prefix!r}")
        keys.extend(key for key in found if key not in keys)
    return keys


def _read_lines(file: Path) -> Iterator[str]:
    try:
        with file.open(encoding="utf-8") as opened:
            yield from (line.rstrip("\n") for line in opened)
    except OSError as exc:
        raise UserError(f"cannot read {file}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise UserError(f"{file}: not a records file (not UTF-8 text)") from exc


def _send(server: str, token: str | None, lines: list[str]) -> ImportSummary:
    with connect(server, token) as client:
        return client.import_records(lines)


def _summary_text(summary: ImportSummary) -> str:
    return (
        f"imported {summary.records} records ({summary.duplicates} already there), "
        f"{summary.workloads} workloads, {summary.artifacts} kernels"
    )


COMMANDS = [records, push]
