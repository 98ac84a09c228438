"""Commands against a tunehub server, through the client SDK: submit, download, workers.
Each parses its options, makes one SDK call (or a poll) and prints the answer (its tables and
progress bars: `summaries`). `status`, `list`, `best` and `cancel` read a server or the local
database (`lookup`)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from pydantic import ValidationError
from rich.table import Table

from tunehub.client.commands.common import (
    DEVICE_OPTION,
    SIGNATURE_OPTION,
    TIME_LIMIT_OPTION,
    TUNE_SYMBOL_HELP,
    InternalError,
    UserError,
    caller_device,
    connect,
    console,
    parse_symbols,
    read_signature,
    read_tasks,
    seconds,
    server_options,
    show_dispatch,
    symbol_option,
    symbol_tasks,
    warn_small_budget,
)
from tunehub.client.commands.summaries import going_on, progress_bar, show_view
from tunehub.schemas.api import DEFAULT_STRATEGY, GroupTask, TuningGroupView
from tunehub.schemas.signature import TaskSignature

if TYPE_CHECKING:
    from tunehub.client.sdk import Client
    from tunehub.schemas.api import TuningView

_TARGET_HELP = "cpu[:ISA] or cuda[:sm_XX]; without ISA/arch: whatever the workers have."


@click.command()
@click.argument("signature_files", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--target", default="cpu", show_default=True, help=_TARGET_HELP)
@click.option(
    "--trials",
    type=click.IntRange(min=1),
    default=64,
    show_default=True,
    help="Trial budget (with several tasks, shared by all of them).",
)
@TIME_LIMIT_OPTION
@symbol_option(TUNE_SYMBOL_HELP, lists=True)
@click.option(
    "--weights",
    "weights_text",
    metavar="W1,W2,...",
    help="With several signatures: how many times each runs in the model (default 1 each; "
    "a task set carries its own).",
)
@click.option("--strategy", default=DEFAULT_STRATEGY, show_default=True)
@click.option("--wait", "watch", is_flag=True, help="Follow the tuning (or group) until it ends.")
@click.option("--json", "as_json", is_flag=True, help="Print the answer as JSON.")
@server_options
def submit(
    signature_files: tuple[Path, ...],
    target: str,
    trials: int,
    time_limit_s: float | None,
    symbol_args: tuple[str, ...],
    weights_text: str | None,
    strategy: str,
    watch: bool,
    as_json: bool,
    server: str,
    token: str | None,
) -> None:
    """Submit a tuning to a server; print its id (or the tuning it joined).

    Several signatures, a task set's tasks (`tunehub extract`), or several symbol values
    (--symbol M=1,8,32) are several tasks: they go as one tuning group that shares the trial
    budget (`tunehub status --group ID`).
    """
    found = read_tasks(signature_files, weights_text)
    signatures = [_signature(document, where) for where, document, _ in found]
    weights = [weight for _, _, weight in found]
    tasks = symbol_tasks(signatures, symbol_args)
    warn_small_budget(trials, len(tasks))
    if len(tasks) > 1:
        try:
            group_tasks = [
                GroupTask(task=signatures[index], symbols=symbols, weight=weights[index])
                for index, symbols in tasks
            ]
        except ValidationError as exc:  # a weight out of bounds
            raise _invalid(exc) from exc
        budget = _Budget(trials, time_limit_s)
        _submit_group(group_tasks, target, budget, strategy, watch, as_json, server, token)
        return
    signature, symbols = signatures[0], tasks[0][1]
    with connect(server, token) as client:
        try:
            submitted = client.submit(
                signature,
                target=target,
                trials=trials,
                symbols=symbols,
                strategy=strategy,
                time_limit_s=time_limit_s,
            )
        except ValueError as exc:  # the request, checked before it is sent
            raise _invalid(exc) from exc
        if not as_json:
            click.echo(
                f"tuning {submitted.id} {submitted.outcome}: {signature.name} on "
                f"{submitted.target}, {submitted.trials_total} trials "
                f"(workload {submitted.workload_key})"
            )
        tuning: TuningView = submitted
        if watch:
            tuning = watch_tuning(client, submitted.id, quiet=as_json)
    if as_json or watch:
        show_view(tuning, as_json)


@dataclass(frozen=True)
class _Budget:
    trials: int
    time_limit_s: float | None


def _submit_group(
    tasks: list[GroupTask],
    target: str,
    budget: _Budget,
    strategy: str,
    watch: bool,
    as_json: bool,
    server: str,
    token: str | None,
) -> None:
    """`submit` of several tasks: one group on one budget."""
    with connect(server, token) as client:
        try:
            group = client.submit_group(
                tasks,
                target=target,
                trials=budget.trials,
                strategy=strategy,
                time_limit_s=budget.time_limit_s,
            )
        except ValueError as exc:
            raise _invalid(exc) from exc
        if not as_json:
            click.echo(
                f"tuning group {group.id} created: {len(tasks)} tasks on {group.target}, "
                f"{group.trials_total} trials in all (tunings "
                f"{', '.join(str(t.id) for t in group.tunings)})"
            )
        if watch:
            group = watch_group(client, group.id, quiet=as_json)
    if as_json or watch:
        show_view(group, as_json)


@click.command()
@click.argument("ref", metavar="SHA256|KEY", required=False)
@SIGNATURE_OPTION
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
@click.option(
    "--dispatch",
    is_flag=True,
    help="With a KEY: the best kernel of every tuned symbol value and the table that picks "
    "one by the inputs' shapes (dispatch.json, k0/, k1/, ...).",
)
@DEVICE_OPTION
@server_options
def download(
    ref: str | None,
    signature_file: Path | None,
    out_dir: Path,
    target: str,
    symbol_args: tuple[str, ...],
    dispatch: bool,
    device: str | None,
    server: str,
    token: str | None,
) -> None:
    """Download an artifact, or a workload's best kernel (or kernels), for client.load_kernel:
    SHA256 of an artifact, KEY of a workload (or a unique prefix), or --signature SIG.json."""
    if (ref is None) == (signature_file is None):
        raise UserError("name what to download by SHA256|KEY or by --signature SIG.json")
    if signature_file is not None:
        ref = _signature_key(signature_file)
    assert ref is not None  # one of the two, checked above
    if dispatch:
        if symbol_args:
            raise UserError("--dispatch downloads every tuned symbol value: leave --symbol out")
        _download_dispatch(ref, out_dir, target, caller_device(device, target), server, token)
        return
    symbols = parse_symbols(symbol_args) or None
    with connect(server, token) as client:
        try:
            client.download(
                ref, out_dir, target=target, symbols=symbols, device=caller_device(device, target)
            )
        except ValueError as exc:
            raise _invalid(exc) from exc
    meta = json.loads((out_dir / "metadata.json").read_text())
    click.echo(
        f"wrote {out_dir}/ (the kernel and metadata.json): artifact {meta['artifact_sha256']}"
        + (f", {seconds(meta['latency_s'])} on {meta['target']}" if "latency_s" in meta else "")
    )


def _download_dispatch(
    key: str, out_dir: Path, target: str, device: str | None, server: str, token: str | None
) -> None:
    """`download --dispatch`: the table of workload `key` and every entry's kernel."""
    from tunehub.client.sdk import kernel_metadata
    from tunehub.runtime.dispatch import save_dispatch

    with connect(server, token) as client:
        try:
            table = client.dispatch(key, target=target, device=device)
        except ValueError as exc:
            raise _invalid(exc) from exc
        kernels = []
        for entry in table.entries:
            if entry.record.artifact_sha256 is None:
                raise InternalError(f"record {entry.record.id} has no artifact")
            artifact = client.artifact(entry.record.artifact_sha256, workload=table.workload_key)
            metadata = kernel_metadata(artifact.meta, artifact.sha256, entry.record)
            kernels.append((artifact.data, None, metadata))
    save_dispatch(out_dir, table, kernels)
    show_dispatch(out_dir, table)


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
    table = Table("name", "host", "slot", "targets", "threads", "last heartbeat")
    for w in found:
        targets = ", ".join(w.targets)
        slot = w.slot or "machine"
        table.add_row(w.name, w.host, slot, targets, str(w.threads), f"{w.last_heartbeat:%X}")
    console().print(table if found else "no living workers")


COMMANDS = [submit, download, workers]


def watch_tuning(client: Client, tuning_id: int, *, quiet: bool) -> TuningView:
    """`client.wait` with a progress bar on stderr (none when `quiet`)."""
    with progress_bar(enabled=not quiet) as on_progress, going_on("tuning", tuning_id):
        return client.wait(tuning_id, on_progress=on_progress)


def watch_group(client: Client, group_id: int, *, quiet: bool) -> TuningGroupView:
    """`client.wait_group` with a progress bar on stderr (none when `quiet`)."""
    with progress_bar(enabled=not quiet) as on_progress, going_on("tuning group", group_id):
        return client.wait_group(group_id, on_progress=on_progress)


def _signature(document: dict[str, Any], where: str) -> TaskSignature:
    """A task signature document, checked as the server will (its program is the server's to
    validate); UserError (naming `where`) for anything wrong."""
    try:
        return TaskSignature.model_validate(document)
    except ValidationError as exc:
        raise _invalid(exc, f"{where}: invalid signature") from exc


def _signature_key(path: Path) -> str:
    """The workload key of the signature in `path`, computed here."""
    from tunehub.compiler.canonical import workload_key
    from tunehub.compiler.program import load

    try:
        return workload_key(load(read_signature(path)))
    except ValueError as exc:  # SignatureError included
        raise UserError(f"{path}: {exc}") from exc


def _invalid(exc: ValueError, what: str = "invalid request") -> UserError:
    """A request the SDK refused to send (a bad target, signature or count), as one line."""
    if not isinstance(exc, ValidationError):
        return UserError(str(exc))
    error = exc.errors()[0]
    where = ".".join(str(part) for part in error.get("loc", ())) or "request"
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return UserError(f"{what}: {where}: {error['msg']}{more}")
