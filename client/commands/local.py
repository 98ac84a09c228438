"""Commands on this machine's own tunings, in its local database (`~/.tunehub/local.db` by
default; `docs/cli.md`): `tune` signatures here, and export the best `kernel` it found.

They run the tuner in this process (`server.tuner.LocalExecutor`): the service stack is
imported inside each command, so the client loads none of it until one runs.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import click

from tunehub.client.commands.common import (
    DEVICE_OPTION,
    LOCAL_DB_HELP,
    SIGNATURE_OPTION,
    TIME_LIMIT_OPTION,
    TUNE_SYMBOL_HELP,
    InternalError,
    UserError,
    caller_device,
    console,
    load_document,
    load_signature,
    local_sessions,
    local_url,
    parse_symbols,
    parse_target,
    read_tasks,
    seconds,
    show_dispatch,
    symbol_option,
    symbol_tasks,
    symbols_text,
    target_here,
    warn_small_budget,
)
from tunehub.client.commands.state import tuned_values
from tunehub.client.commands.summaries import (
    library_code,
    many_json,
    many_table,
    summary_json,
    summary_table,
    tuner_progress_bar,
)
from tunehub.schemas.api import DEFAULT_STRATEGY, STRATEGY_NAMES, RecordView

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from tunehub.compiler.ir import Program
    from tunehub.runtime.dispatch import KernelFiles
    from tunehub.server.tuner import Progress


@click.command()
@click.argument("signature_files", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--target", "target_text", default="cpu", show_default=True, help="cpu[:ISA]")
@click.option(
    "--trials",
    type=click.IntRange(min=1),
    default=64,
    show_default=True,
    help="Trial budget (with several signatures, shared by all of them).",
)
@TIME_LIMIT_OPTION
@click.option(
    "--weights",
    "weights_text",
    metavar="W1,W2,...",
    help="With several signatures: how many times each task runs in the model (default 1 each; "
    "a task set carries its own).",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object, no progress bar.")
@click.option("--db", "db_url", help=LOCAL_DB_HELP)
@symbol_option(TUNE_SYMBOL_HELP, lists=True)
@click.option(
    "--threads", type=click.IntRange(min=1), help="Threads kernels run with (default: every core)."
)
@click.option(
    "--strategy", type=click.Choice(STRATEGY_NAMES), default=DEFAULT_STRATEGY, show_default=True
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the search.")
@click.option(
    "--verbose", "show_code", is_flag=True, help="Show the library code timed beside the kernel."
)
def tune(
    signature_files: tuple[Path, ...],
    target_text: str,
    trials: int,
    time_limit_s: float | None,
    weights_text: str | None,
    as_json: bool,
    db_url: str | None,
    symbol_args: tuple[str, ...],
    threads: int | None,
    strategy: str,
    seed: int,
    show_code: bool,
) -> None:
    """Tune task signatures, or a task set (`tunehub extract`), on this machine and report
    naive vs best.

    Several signatures, a task set's tasks, or several symbol values (--symbol M=1,8,32) are
    several tasks on one trial budget: each batch goes to the task expected to cut the weighted
    total latency most, and a task that stops improving stops early.
    """
    from tunehub.compiler.program import load
    from tunehub.server.db.session import session_scope
    from tunehub.server.tuner import (
        LocalExecutor,
        SearchPlan,
        Tuner,
        register_tuning,
        validate_task,
    )
    from tunehub.worker import device
    from tunehub.worker.backend import worker_backend

    found = read_tasks(signature_files, weights_text)
    loaded = [load_document(document, where) for where, document, _ in found]
    weights = [weight for _, _, weight in found]
    target = parse_target(target_text)
    tasks = symbol_tasks([signature for signature, _ in loaded], symbol_args)
    task_weights = [weights[index] for index, _ in tasks]  # every value of a layer: its weight
    warn_small_budget(trials, len(tasks))
    sessions = local_sessions(db_url)
    with LocalExecutor() as executor:
        try:
            target = executor.resolve(target)
            with session_scope(sessions) as s:
                tuning_ids = [
                    register_tuning(
                        s,
                        validate_task(loaded[index][0], symbols),
                        SearchPlan(strategy, trials, time_limit_s),
                        target=target,
                    )
                    for index, symbols in tasks
                ]
        except ValueError as exc:  # SignatureError included
            raise UserError(str(exc)) from exc
        threads = threads or device.cpu_cores()
        tuner = Tuner(
            sessions, executor, threads=threads, seed=seed, feature_workers=device.cpu_cores()
        )
        with tuner_progress_bar(trials, enabled=not as_json) as on_progress:
            try:
                if len(tuning_ids) == 1:
                    summaries = [tuner.run(tuning_ids[0], on_progress)]
                else:
                    summaries = tuner.run_many(
                        tuning_ids,
                        task_weights,
                        trials,
                        _summed(on_progress),
                        time_limit_s=time_limit_s,
                    )
            except Exception as exc:
                ids = ", ".join(map(str, tuning_ids))
                raise InternalError(f"tuning {ids} failed: {exc}") from exc
    baselines = [
        worker_backend(target).library_baselines(
            load(loaded[index][0].model_dump_json()), summary.symbols, threads
        )
        for (index, _), summary in zip(tasks, summaries, strict=True)
    ]
    if len(summaries) == 1:
        if as_json:
            click.echo(json.dumps(summary_json(summaries[0], baselines[0])))
        else:
            console().print(summary_table(loaded[0][0].name, summaries[0], baselines[0]))
            if show_code:
                click.echo(library_code(baselines[0]))
        return
    if as_json:
        click.echo(json.dumps(many_json(summaries, task_weights, baselines)))
    else:
        names = [loaded[index][0].name for index, _ in tasks]
        console().print(many_table(names, summaries, task_weights, baselines))
        if show_code:
            for name, task_baselines in zip(names, baselines, strict=True):
                click.echo(f"# {name}\n{library_code(task_baselines)}")


@click.command()
@click.argument("workload_key", metavar="[KEY]", required=False)
@SIGNATURE_OPTION
@click.option(
    "--target",
    "target_text",
    default="cpu",
    show_default=True,
    help="cpu means this machine's ISA; cpu:ISA names one.",
)
@click.option(
    "-o",
    "--output",
    "out_dir",
    type=click.Path(path_type=Path),
    required=True,
    help="Directory to write the kernel (kernel.so, kernel.c) and metadata.json into.",
)
@click.option("--db", "db_url", help=LOCAL_DB_HELP)
@symbol_option("Symbol values it was tuned for (default: as `tune`).")
@click.option(
    "--dispatch",
    is_flag=True,
    help="Export the best kernel of every tuned symbol value and the table that picks one by "
    "the inputs' shapes (dispatch.json, k0/, k1/, ...).",
)
@DEVICE_OPTION
def kernel(
    workload_key: str | None,
    signature_file: Path | None,
    target_text: str,
    out_dir: Path,
    db_url: str | None,
    symbol_args: tuple[str, ...],
    dispatch: bool,
    device: str | None,
) -> None:
    """Export the best verified kernel of a workload (KEY, a unique prefix of it, or
    --signature SIG.json), or with --dispatch those of every tuned symbol value (load either
    with client.load_kernel)."""
    from tunehub.compiler.program import load
    from tunehub.runtime.directory import save_kernel
    from tunehub.runtime.dispatch import save_dispatch
    from tunehub.server.best import best_for_device, dispatch_table
    from tunehub.server.db.session import session_scope
    from tunehub.server.db.workloads import get_workload, resolve_workload_key

    if dispatch and symbol_args:
        raise UserError("--dispatch exports every tuned symbol value: leave --symbol out")
    # The kernel for this machine's own ISA or GPU; elsewhere, any stored variant.
    target = target_here(parse_target(target_text))
    if (workload_key is None) == (signature_file is None):
        raise UserError("name the workload by its KEY or by --signature SIG.json (one of them)")
    if signature_file is not None:
        workload_key = _workload_key(signature_file)
    assert workload_key is not None  # one of the two, checked above
    device = caller_device(device, target_text)
    url = local_url(db_url)
    with session_scope(local_sessions(url)) as s:
        try:
            workload_key = resolve_workload_key(s, workload_key)
        except LookupError as exc:
            raise UserError(f"{exc} (see `tunehub validate`)") from exc
        workload = get_workload(s, workload_key)
        assert workload is not None  # resolved
        if dispatch:
            table = dispatch_table(s, workload_key, target, device)
            if table is None:
                raise UserError(
                    f"no verified kernel for workload {workload_key[:12]} on {target} in the "
                    f"local database {url}" + tuned_values(s, workload_key)
                )
            kernels = [_stored_kernel(s, entry.record, workload.name) for entry in table.entries]
            save_dispatch(out_dir, table, kernels)
            show_dispatch(out_dir, table)
            return
        symbols = _symbols(load(workload.signature), symbol_args)
        found = best_for_device(
            s, workload_key=workload_key, target=target, symbols=symbols, device=device
        )
        best = found.record
        if best is None or best.artifact_sha256 is None:
            raise UserError(
                f"no verified kernel for workload {workload_key[:12]} on {target} "
                f"with symbols {symbols_text(symbols)} in the local database {url}"
                + tuned_values(s, workload_key)
            )
        save_kernel(out_dir, *_stored_kernel(s, RecordView.model_validate(best), workload.name))
    click.echo(
        f"wrote {out_dir}/ (the kernel and metadata.json): {workload.name} on "
        f"{best.target}, {seconds(best.latency_s)}, from the local database {url}"
    )
    if found.fallback:
        click.echo(f"note: {found.fallback}")


COMMANDS = [tune, kernel]


def _workload_key(path: Path) -> str:
    """The workload key of the signature in `path`."""
    from tunehub.compiler.canonical import workload_key

    return workload_key(load_signature(path)[1])


def _stored_kernel(s: Session, record: RecordView, name: str) -> KernelFiles:
    """The files of `record`'s kernel, from the local database's artifact store."""
    from tunehub.client.sdk import kernel_metadata
    from tunehub.server.db.artifacts import get_artifact
    from tunehub.server.kernels import kernel_meta

    artifact = get_artifact(s, record.artifact_sha256) if record.artifact_sha256 else None
    if artifact is None:
        raise InternalError(f"record {record.id} has no artifact in the database")
    meta = kernel_meta(s, artifact, record.workload_key)
    metadata = kernel_metadata(meta, artifact.sha256, record) | {"name": name}
    return artifact.data, artifact.source, metadata


def _symbols(program: Program, args: tuple[str, ...]) -> dict[str, int]:
    """`("M=64",)` -> every symbol's value to tune for (the tuner's defaults for the rest)."""
    from tunehub.server.tuner import resolve_symbols

    try:
        return resolve_symbols(program, parse_symbols(args))
    except ValueError as exc:
        raise UserError(str(exc)) from exc


def _summed(on_progress: Callable[[Progress], None] | None) -> Callable[[Progress], None] | None:
    """Several tunings on one progress bar: trials done in all of them, the latest best."""
    if on_progress is None:
        return None
    from tunehub.server.tuner import Progress

    done: dict[int, int] = {}
    failed: dict[int, int] = {}

    def update(progress: Progress) -> None:
        done[progress.tuning_id] = progress.trials_done
        failed[progress.tuning_id] = progress.failures
        total = sum(done.values())
        on_progress(
            Progress(
                progress.tuning_id,
                total,
                progress.trials,
                progress.best_latency_s,
                sum(failed.values()),
            )
        )

    return update
