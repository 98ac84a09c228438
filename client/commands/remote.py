"""Commands against a tunehub server, through the client SDK: submit, status, best, download,
workers. Each parses its options, makes one SDK call (or a poll) and formats the answer."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import click
from pydantic import ValidationError
from rich.console import Console
from rich.table import Table

from client.commands.common import (
    UserError,
    connect,
    parse_symbols,
    read_signature,
    seconds,
    server_options,
    symbol_option,
)
from schemas.api import DEFAULT_STRATEGY

if TYPE_CHECKING:
    from client.sdk import Client
    from schemas.api import RecordView, TuningView

_TARGET_HELP = "cpu[:ISA] or cuda[:sm_XX]; without ISA/arch: whatever the workers have."


@click.command()
@click.argument("signature_file", type=click.Path(path_type=Path))
@click.option("--target", default="cpu", show_default=True, help=_TARGET_HELP)
@click.option("--trials", type=click.IntRange(min=1), default=64, show_default=True)
@symbol_option("Symbol value to tune for (default: each symbol at 64, clamped).")
@click.option("--strategy", default=DEFAULT_STRATEGY, show_default=True)
@click.option("--wait", "watch", is_flag=True, help="Follow the tuning until it ends.")
@click.option("--json", "as_json", is_flag=True, help="Print the answer as JSON.")
@server_options
def submit(
    signature_file: Path,
    target: str,
    trials: int,
    symbol_args: tuple[str, ...],
    strategy: str,
    watch: bool,
    as_json: bool,
    server: str,
    token: str | None,
) -> None:
    """Submit a tuning to a server; print its id (or the tuning it joined)."""
    document = read_signature(signature_file)
    symbols = parse_symbols(symbol_args)
    with connect(server, token) as client:
        try:
            submitted = client.submit(
                document, target=target, trials=trials, symbols=symbols, strategy=strategy
            )
        except ValueError as exc:  # the request, checked before it is sent
            raise _invalid(exc) from exc
        if not as_json:
            click.echo(
                f"tuning {submitted.id} {submitted.outcome}: {document.get('name')} on "
                f"{submitted.target}, {submitted.trials_total} trials "
                f"(workload {submitted.workload_key})"
            )
        tuning: TuningView = submitted
        if watch:
            tuning = _watch(client, submitted.id, quiet=as_json)
    if as_json:
        click.echo(tuning.model_dump_json())
    elif watch:
        Console().print(tuning_table(tuning))


@click.command()
@click.argument("tuning_id", type=click.IntRange(min=1))
@click.option("--watch", is_flag=True, help="Follow it with a progress bar until it ends.")
@click.option("--json", "as_json", is_flag=True, help="Print the tuning as JSON.")
@server_options
def status(tuning_id: int, watch: bool, as_json: bool, server: str, token: str | None) -> None:
    """Show a tuning's progress and its best kernel so far."""
    with connect(server, token) as client:
        tuning = _watch(client, tuning_id, quiet=as_json) if watch else client.get(tuning_id)
    if as_json:
        click.echo(tuning.model_dump_json())
    else:
        Console().print(tuning_table(tuning))


@click.command()
@click.argument("workload_key", required=False)
@click.option(
    "--signature",
    "signature_file",
    type=click.Path(path_type=Path),
    help="Name the workload by its signature instead of its key.",
)
@click.option("--target", default="cpu", show_default=True, help=_TARGET_HELP)
@symbol_option("Symbol values it was tuned for (default: any, or the tuner's with --signature).")
@click.option("--json", "as_json", is_flag=True, help="Print the record as JSON.")
@server_options
def best(
    workload_key: str | None,
    signature_file: Path | None,
    target: str,
    symbol_args: tuple[str, ...],
    as_json: bool,
    server: str,
    token: str | None,
) -> None:
    """Show the best verified kernel of a workload (KEY, or --signature SIG.json)."""
    if (workload_key is None) == (signature_file is None):
        raise UserError("name the workload by its KEY or by --signature SIG.json (one of them)")
    symbols = parse_symbols(symbol_args) or None
    task = None if signature_file is None else read_signature(signature_file)
    with connect(server, token) as client:
        try:
            record = client.best(workload_key, task=task, target=target, symbols=symbols)
        except ValueError as exc:
            raise _invalid(exc) from exc
    if as_json:
        click.echo(record.model_dump_json())
    else:
        Console().print(record_table(record))


@click.command()
@click.argument("ref", metavar="SHA256|KEY")
@click.option(
    "-o",
    "--output",
    "out_dir",
    type=click.Path(path_type=Path),
    required=True,
    help="Directory to write the kernel (kernel.so for CPUs) and metadata.json into.",
)
@click.option("--target", default="cpu", show_default=True, help="With a KEY: " + _TARGET_HELP)
@symbol_option("With a KEY: the symbol values it was tuned for.")
@server_options
def download(
    ref: str,
    out_dir: Path,
    target: str,
    symbol_args: tuple[str, ...],
    server: str,
    token: str | None,
) -> None:
    """Download an artifact, or a workload's best kernel, for client.load_kernel."""
    symbols = parse_symbols(symbol_args) or None
    with connect(server, token) as client:
        try:
            client.download(ref, out_dir, target=target, symbols=symbols)
        except ValueError as exc:
            raise _invalid(exc) from exc
    meta = json.loads((out_dir / "metadata.json").read_text())
    click.echo(
        f"wrote {out_dir}/ (the kernel and metadata.json): artifact {meta['artifact_sha256']}"
        + (f", {seconds(meta['latency_s'])} on {meta['target']}" if "latency_s" in meta else "")
    )


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array.")
@server_options
def workers(as_json: bool, server: str, token: str | None) -> None:
    """List the worker daemons serving a server's tunings."""
    with connect(server, token) as client:
        found = client.workers()
    if as_json:
        click.echo(json.dumps([w.model_dump(mode="json") for w in found], indent=2))
        return
    table = Table("name", "host", "targets", "threads", "last heartbeat")
    for w in found:
        targets = ", ".join(w.targets)
        table.add_row(w.name, w.host, targets, str(w.threads), f"{w.last_heartbeat:%X}")
    Console().print(table if found else "no living workers")


COMMANDS = [submit, status, best, download, workers]


def tuning_table(tuning: TuningView) -> Table:
    """A tuning as a two-column table: progress, then its best kernel so far."""
    table = Table(title=f"tuning {tuning.id}", show_header=False)
    table.add_column(style="bold")
    table.add_column()
    symbols = ", ".join(f"{k}={v}" for k, v in tuning.symbols.items()) or "-"
    rows = [
        ("status", str(tuning.status) + (f": {tuning.error}" if tuning.error else "")),
        ("workload", tuning.workload_key),
        ("target", tuning.target),
        ("symbols", symbols),
        ("trials", f"{tuning.trials_done} of {tuning.trials_total} ({tuning.strategy})"),
        ("best", seconds(tuning.best.latency_s) if tuning.best else "-"),
        ("artifact", (tuning.best.artifact_sha256 if tuning.best else None) or "-"),
    ]
    for label, value in rows:
        table.add_row(label, value)
    return table


def record_table(record: RecordView) -> Table:
    table = Table(title=f"best kernel of {record.workload_key[:12]}", show_header=False)
    table.add_column(style="bold")
    table.add_column()
    rows = [
        ("latency", seconds(record.latency_s)),
        ("target", record.target),
        ("symbols", ", ".join(f"{k}={v}" for k, v in record.symbols.items()) or "-"),
        ("config", json.dumps(record.config)),
        ("artifact", record.artifact_sha256 or "-"),
        ("record", f"{record.id} (tuning {record.tuning_id}, {record.created_at:%Y-%m-%d %H:%M})"),
        ("machine", ", ".join(f"{k}={v}" for k, v in sorted(record.machine.items())) or "-"),
    ]
    for label, value in rows:
        table.add_row(label, value)
    return table


def _watch(client: Client, tuning_id: int, *, quiet: bool) -> TuningView:
    """`client.wait` with a progress bar on stderr (none when `quiet`)."""
    with progress_bar(enabled=not quiet) as on_progress:
        return client.wait(tuning_id, on_progress=on_progress)


@contextmanager
def progress_bar(*, enabled: bool = True) -> Iterator[Callable[[TuningView], None] | None]:
    """A rich progress bar on stderr, fed with the tuning views `Client.wait` polls."""
    if not enabled:
        yield None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("tuning {task.fields[id]}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[status]}  best {task.fields[best]}"),
        TimeElapsedColumn(),
        console=Console(stderr=True),
    ) as bar:
        task = bar.add_task("tuning", total=None, id="", status="", best="-")

        def update(tuning: TuningView) -> None:
            best = seconds(tuning.best.latency_s) if tuning.best else "-"
            bar.update(
                task,
                total=tuning.trials_total,
                completed=tuning.trials_done,
                id=tuning.id,
                status=str(tuning.status),
                best=best,
            )

        yield update


def _invalid(exc: ValueError) -> UserError:
    """A request the SDK refused to send (a bad target, signature or count), as one line."""
    if not isinstance(exc, ValidationError):
        return UserError(str(exc))
    error = exc.errors()[0]
    where = ".".join(str(part) for part in error.get("loc", ())) or "request"
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return UserError(f"invalid request: {where}: {error['msg']}{more}")
