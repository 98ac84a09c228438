"""Commands that look at tunings and kernels wherever they are, a server or this machine's
local database (`state`): `status`, `list` (tunings, workloads or kernels), `best`, and
`cancel`."""

from __future__ import annotations

import json
from contextlib import nullcontext
from pathlib import Path

import click
from rich.table import Table

from tunehub.client.commands.common import (
    DEVICE_OPTION,
    SIGNATURE_OPTION,
    UserError,
    caller_device,
    console,
    parse_symbols,
    read_signature,
    seconds,
    symbol_option,
    symbols_text,
)
from tunehub.client.commands.state import BestQuery, open_source, source_options
from tunehub.client.commands.summaries import (
    going_on,
    progress_bar,
    record_table,
    show_view,
)
from tunehub.schemas.api import TuningGroupView, TuningView

_TARGET_HELP = "cpu[:ISA] or cuda[:sm_XX]; without ISA/arch: any."


@click.command()
@click.argument("ident", metavar="ID", type=click.IntRange(min=1))
@click.option("--group", "is_group", is_flag=True, help="ID is a tuning group's.")
@click.option("--watch", is_flag=True, help="Follow it with a progress bar until it ends.")
@click.option("--json", "as_json", is_flag=True, help="Print the tuning (or group) as JSON.")
@source_options
def status(
    ident: int,
    is_group: bool,
    watch: bool,
    as_json: bool,
    server: str | None,
    token: str | None,
    db_url: str | None,
) -> None:
    """Show a tuning's (or with --group, a tuning group's) progress and best kernels so far."""
    view: TuningView | TuningGroupView
    what = "tuning group" if is_group else "tuning"
    with (
        going_on(what, ident) if watch else nullcontext(),
        open_source(server, token, db_url) as source,
    ):
        view = source.group(ident) if is_group else source.tuning(ident)
        if watch:
            with progress_bar(enabled=not as_json) as on_progress:
                view = source.wait(view, on_progress)
    show_view(view, as_json)


@click.command(name="list")
@click.option("--workloads", "view", flag_value="workloads", help="List workloads instead.")
@click.option(
    "--kernels",
    "view",
    flag_value="kernels",
    help="List the best kernel of each workload, target and symbol values tuned instead.",
)
@click.option(
    "--limit", type=click.IntRange(min=1), default=20, show_default=True, help="Newest first."
)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array.")
@source_options
def list_command(
    view: str | None,
    limit: int,
    as_json: bool,
    server: str | None,
    token: str | None,
    db_url: str | None,
) -> None:
    """List tunings, newest first (or with --workloads the workloads, with --kernels the best
    kernel of each workload, target and symbol values tuned)."""
    with open_source(server, token, db_url) as source:
        if view == "workloads":
            items = [w.model_dump(mode="json") for w in source.workloads(limit)]
            columns: tuple[str, ...] = ("key", "name", "created_at")
        else:
            tunings = source.tunings(limit)
            items = _kernels(tunings) if view == "kernels" else [_tuning_row(t) for t in tunings]
            columns = tuple(items[0]) if items else ()
    if as_json:
        click.echo(json.dumps(items, indent=2))
        return
    if not items:
        click.echo(f"no {view or 'tunings'} in the {source.where}")
        return
    table = Table(*columns)
    for item in items:
        table.add_row(*(_cell(item[c]) for c in columns))
    console().print(table)


def _tuning_row(t: TuningView) -> dict[str, object]:
    return {
        "tuning": t.id,
        "workload": t.workload_key[:12],
        "target": t.target,
        "symbols": symbols_text(t.symbols),
        "status": str(t.status),
        "trials": f"{t.trials_done}/{t.trials_total}",
        "best": t.best.latency_s if t.best else None,
    }


def _kernels(tunings: list[TuningView]) -> list[dict[str, object]]:
    """Each workload, target and symbol values' best kernel, once (tunings name it)."""
    found: dict[tuple[str, str, str], dict[str, object]] = {}
    for t in tunings:
        if t.best is None:
            continue
        key = (t.workload_key, t.best.target, symbols_text(t.best.symbols))
        found.setdefault(
            key,
            {
                "workload": t.workload_key[:12],
                "target": t.best.target,
                "symbols": key[2],
                "best": t.best.latency_s,
                "artifact": (t.best.artifact_sha256 or "-")[:12],
                "record": t.best.id,
            },
        )
    return list(found.values())


def _cell(value: object) -> str:
    if isinstance(value, float):
        return seconds(value)
    return "-" if value is None else str(value)


@click.command()
@click.argument("ident", metavar="ID", type=click.IntRange(min=1))
@click.option("--group", "is_group", is_flag=True, help="ID is a tuning group's.")
@click.option("--json", "as_json", is_flag=True, help="Print the tuning (or group) as JSON.")
@source_options
def cancel(
    ident: int,
    is_group: bool,
    as_json: bool,
    server: str | None,
    token: str | None,
    db_url: str | None,
) -> None:
    """Cancel a queued or running tuning (or with --group, a group's unfinished tunings): it
    stops at its next batch, keeping what it measured."""
    with open_source(server, token, db_url) as source:
        view = source.cancel_group(ident) if is_group else source.cancel(ident)
    if as_json:
        click.echo(view.model_dump_json())
        return
    what = "tuning group" if is_group else "tuning"
    click.echo(f"{what} {ident} cancelled ({view.trials_done} of {view.trials_total} trials)")


@click.command()
@click.argument("workload_key", metavar="[KEY]", required=False)
@SIGNATURE_OPTION
@click.option("--target", default="cpu", show_default=True, help=_TARGET_HELP)
@symbol_option("Symbol values it was tuned for (default: any, or the tuner's with --signature).")
@DEVICE_OPTION
@click.option("--json", "as_json", is_flag=True, help="Print the record as JSON.")
@source_options
def best(
    workload_key: str | None,
    signature_file: Path | None,
    target: str,
    symbol_args: tuple[str, ...],
    device: str | None,
    as_json: bool,
    server: str | None,
    token: str | None,
    db_url: str | None,
) -> None:
    """Show the best verified kernel of a workload (KEY, or --signature SIG.json)."""
    if (workload_key is None) == (signature_file is None):
        raise UserError("name the workload by its KEY or by --signature SIG.json (one of them)")
    symbols = parse_symbols(symbol_args) or None
    task = None if signature_file is None else read_signature(signature_file)
    with open_source(server, token, db_url) as source:
        query = BestQuery(workload_key, task, target, symbols, caller_device(device, target))
        record = source.best(query)
    if as_json:
        click.echo(record.model_dump_json())
        return
    console().print(record_table(record))
    if record.fallback:
        click.echo(f"note: {record.fallback}")


COMMANDS = [status, list_command, best, cancel]
