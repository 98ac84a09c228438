"""The `tunehub` command line: validate signatures, tune them on this machine, export kernels.

Each command parses its options, calls the compiler and server packages, and formats what they
return. Errors are one line, never a traceback: exit 2 for the user's mistakes (a missing file,
an invalid signature, an unknown symbol), 1 for internal failures (`TUNEHUB_DEBUG=1` shows the
traceback). The service stack is imported inside the commands that need it, so `--help` and
`schema` stay fast.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from pydantic import ValidationError
from rich.console import Console
from rich.table import Table

from tunehub.client.commands import cuda, extract, records, remote, services
from tunehub.client.commands.common import (
    DEVICE_OPTION,
    LOCAL_DB_HELP,
    TIME_LIMIT_OPTION,
    TUNE_SYMBOL_HELP,
    InternalError,
    UserError,
    caller_device,
    local_sessions,
    missing_extra,
    one_line,
    parse_symbols,
    read_signature,
    read_tasks,
    seconds,
    show_dispatch,
    symbol_option,
    symbol_tasks,
    symbols_text,
)
from tunehub.schemas.api import DEFAULT_STRATEGY, STRATEGY_NAMES, RecordView
from tunehub.schemas.signature import TaskSignature
from tunehub.schemas.target import Target

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from tunehub.compiler.ir import Program
    from tunehub.runtime.dispatch import KernelFiles
    from tunehub.server.tuner import Progress, TuningSummary
    from tunehub.worker.backend import Baseline


_TARGET_HELP = "cpu[:ISA] or cuda[:sm_XX] (without ISA: this machine's)"


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


@cli.command()
def schema() -> None:
    """Print the JSON Schema of task signatures (versions 1 and 2)."""
    click.echo(json.dumps(TaskSignature.model_json_schema(), indent=2))


@cli.command()
@click.argument("signature_file", type=click.Path(path_type=Path))
@click.option("--verbose", is_flag=True, help="Also explain the stages and knobs (`explain`).")
@click.option("--target", "target_text", default="cpu", show_default=True, help=_TARGET_HELP)
def validate(signature_file: Path, verbose: bool, target_text: str) -> None:
    """Check a task signature; print its workload key and a summary."""
    from tunehub.compiler.canonical import workload_key

    _, program = _load_signature(signature_file)
    click.echo(f"ok: {program.name}")
    click.echo(f"workload key: {workload_key(program)}")
    for sym in program.symbols:
        click.echo(f"symbol  {sym.name} in [{sym.min}, {sym.max}]")
    for tensor in program.inputs:
        click.echo(f"input   {tensor.name}: {tensor.dtype}{_shape(tensor.shape)}")
    for name in program.outputs:
        out = program.buffer(name)
        click.echo(f"output  {name}: {out.dtype}{_shape(out.shape)}")
    click.echo(f"computes {len(program.computes)}")
    if verbose:
        _explain(program, target_text)


@cli.command()
@click.argument("signature_file", type=click.Path(path_type=Path))
@click.option("--target", "target_text", default="cpu", show_default=True, help=_TARGET_HELP)
def explain(signature_file: Path, target_text: str) -> None:
    """Say what the compiler makes of a signature: its stages, the schedule each gets and
    why, and every knob of the space with its values and meaning."""
    _, program = _load_signature(signature_file)
    _explain(program, target_text)


def _explain(program: Program, target_text: str) -> None:
    from tunehub.compiler.explain import explain, render_text

    for line in render_text(explain(program, _here(_target(target_text)))):
        click.echo(line)


def _here(target: Target) -> Target:
    """An incomplete target completed to this machine's own ISA or GPU where it has one of
    that kind (`cpu` -> `cpu:x86_64-avx2`); as given otherwise."""
    from tunehub.worker.backend import worker_backend

    if target.complete or not worker_backend(target).local_targets():
        return target
    try:
        return worker_backend(target).resolve(target)
    except ValueError as exc:
        raise UserError(str(exc)) from exc


@cli.command()
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
    loaded = [_load_document(document, where) for where, document, _ in found]
    weights = [weight for _, _, weight in found]
    target = _target(target_text)
    tasks = symbol_tasks([signature for signature, _ in loaded], symbol_args)
    task_weights = [weights[index] for index, _ in tasks]  # every value of a layer: its weight
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
        with _progress_bar(trials, enabled=not as_json) as on_progress:
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
        worker_backend(target).library_latency(
            load(loaded[index][0].model_dump_json()), summary.symbols, threads
        )
        for (index, _), summary in zip(tasks, summaries, strict=True)
    ]
    if len(summaries) == 1:
        if as_json:
            click.echo(json.dumps(_summary_json(summaries[0], baselines[0])))
        else:
            Console().print(_summary_table(loaded[0][0].name, summaries[0], baselines[0]))
        return
    if as_json:
        click.echo(json.dumps(_many_json(summaries, task_weights, baselines)))
    else:
        names = [loaded[index][0].name for index, _ in tasks]
        Console().print(_many_table(names, summaries, task_weights, baselines))


@cli.command()
@click.argument("workload_key", metavar="KEY", required=False)
@click.option(
    "--signature",
    "signature_file",
    type=click.Path(path_type=Path),
    help="Name the workload by its signature instead of its key.",
)
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
    target = _here(_target(target_text))
    if (workload_key is None) == (signature_file is None):
        raise UserError("name the workload by its KEY or by --signature SIG.json (one of them)")
    if signature_file is not None:
        workload_key = _workload_key(signature_file)
    assert workload_key is not None  # one of the two, checked above
    device = caller_device(device, target_text)
    with session_scope(local_sessions(db_url)) as s:
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
                    f"no verified kernel for workload {workload_key[:12]} on {target}: "
                    "run `tunehub tune` first"
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
                f"with symbols {symbols}: run `tunehub tune` first"
            )
        save_kernel(out_dir, *_stored_kernel(s, RecordView.model_validate(best), workload.name))
    click.echo(
        f"wrote {out_dir}/ (the kernel and metadata.json): {workload.name} on "
        f"{best.target}, {seconds(best.latency_s)}"
    )
    if found.fallback:
        click.echo(f"note: {found.fallback}")


# Commands defined beside this module: against a server, and the service's own processes.
for command in (
    *remote.COMMANDS,
    *services.COMMANDS,
    *cuda.COMMANDS,
    *extract.COMMANDS,
    *records.COMMANDS,
):
    cli.add_command(command)


# Helpers: input parsing and output formatting.


def _workload_key(path: Path) -> str:
    """The workload key of the signature in `path`."""
    from tunehub.compiler.canonical import workload_key

    return workload_key(_load_signature(path)[1])


def _load_signature(path: Path) -> tuple[TaskSignature, Program]:
    """The signature in `path` and its validated program; UserError for anything wrong."""
    return _load_document(read_signature(path), str(path))


def _load_document(document: dict[str, Any], where: str) -> tuple[TaskSignature, Program]:
    """A signature document and its validated program; UserError (naming `where`) for
    anything wrong."""
    from tunehub.compiler.errors import SignatureError
    from tunehub.compiler.program import load

    try:
        program = load(document)
        return TaskSignature.model_validate(document), program
    except (SignatureError, ValidationError) as exc:
        raise UserError(f"{where}: {exc}") from exc


def _target(text: str) -> Target:
    try:
        return Target.parse(text)
    except ValueError as exc:
        raise UserError(str(exc)) from exc


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


@contextmanager
def _progress_bar(trials: int, *, enabled: bool) -> Iterator[Callable[[Progress], None] | None]:
    """A rich progress bar on stderr, fed by the tuner's progress callback."""
    if not enabled:
        yield None
        return
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        TextColumn,
        TimeElapsedColumn,
    )
    from rich.progress import Progress as Bar

    with Bar(
        TextColumn("tuning"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("best {task.fields[best]}  failed {task.fields[failed]}"),
        TimeElapsedColumn(),
        console=Console(stderr=True),
    ) as bar:
        task = bar.add_task("tuning", total=trials, best="-", failed=0)

        def update(progress: Progress) -> None:
            best = seconds(progress.best_latency_s)
            bar.update(task, completed=progress.trials_done, best=best, failed=progress.failures)

        yield update


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


def _weighted(values: list[float | None], weights: list[float]) -> float | None:
    if any(v is None for v in values):
        return None
    return sum(w * v for w, v in zip(weights, values, strict=True) if v is not None)


def _many_json(
    summaries: list[TuningSummary], weights: list[float], baselines: list[Baseline | None]
) -> dict[str, Any]:
    tasks = [
        {**_summary_json(summary, baseline), "weight": weight}
        for summary, weight, baseline in zip(summaries, weights, baselines, strict=True)
    ]
    return {
        "tasks": tasks,
        "total_trials": sum(summary.trials for summary in summaries),
        "weighted_latency_s": {
            "naive": _weighted([s.baseline_latency_s for s in summaries], weights),
            "best": _weighted([s.best.latency_s if s.best else None for s in summaries], weights),
        },
    }


def _many_table(
    names: list[str],
    summaries: list[TuningSummary],
    weights: list[float],
    baselines: list[Baseline | None],
) -> Table:
    """One row per task: its signature's name and symbol values, naive vs best vs the
    library, its share."""
    table = Table(title=f"{len(summaries)} tasks on {summaries[0].target}")
    columns = ("task", "symbols", "naive", "best", "speedup", "library", "vs library")
    for column in (*columns, "trials", "weight", "tuning"):
        table.add_column(column, justify="left" if column in ("task", "symbols") else "right")
    rows = zip(names, summaries, weights, baselines, strict=True)
    for name, summary, weight, baseline in rows:
        speedup, versus = _speedup(summary), _versus(summary, baseline)
        table.add_row(
            name,
            symbols_text(summary.symbols),
            seconds(summary.baseline_latency_s),
            seconds(summary.best.latency_s if summary.best else None),
            f"{speedup:.1f}x" if speedup else "-",
            seconds(baseline.latency_s) if baseline else "-",
            f"{versus:.2f}x" if versus else "-",
            str(summary.trials),
            f"{weight:g}",
            f"{summary.tuning_id} ({summary.status})",
        )
    naive = _weighted([s.baseline_latency_s for s in summaries], weights)
    best = _weighted([s.best.latency_s if s.best else None for s in summaries], weights)
    overall = f"{naive / best:.1f}x" if naive and best else "-"
    total = str(sum(s.trials for s in summaries))
    table.add_section()
    table.add_row(
        "weighted total", "", seconds(naive), seconds(best), overall, "", "", total, "", ""
    )
    return table


def _summary_json(summary: TuningSummary, baseline: Baseline | None) -> dict[str, Any]:
    best = summary.best
    return {
        "tuning_id": summary.tuning_id,
        "status": str(summary.status),
        "workload_key": summary.workload_key,
        "target": summary.target,
        "symbols": summary.symbols,
        "strategy": summary.strategy,
        "trials": summary.trials,
        "trials_requested": summary.trials_requested,
        "stop_reason": summary.stop_reason,
        "baseline_latency_s": summary.baseline_latency_s,
        "best": None
        if best is None
        else {
            "latency_s": best.latency_s,
            "config": best.config,
            "artifact": best.artifact_sha256,
            "record_id": best.record_id,
        },
        "speedup": _speedup(summary),
        "gflops": _gflops(summary),
        "library": None if baseline is None else asdict(baseline),
        "vs_library": _versus(summary, baseline),
        "failures": summary.failures,
    }


def _summary_table(name: str, summary: TuningSummary, baseline: Baseline | None) -> Table:
    table = Table(title=f"{name} on {summary.target}", show_header=False)
    table.add_column(style="bold")
    table.add_column()
    best = summary.best
    speedup = _speedup(summary)
    failures = ", ".join(f"{kind} {n}" for kind, n in summary.failures.items()) or "none"
    naive = _latency(summary.baseline_latency_s, summary.flops)
    if summary.baseline_latency_s is None and summary.trials:
        naive = "no correct run (timed out or failed)"  # it is always measured first
    rows = [
        ("workload", summary.workload_key),
        ("symbols", symbols_text(summary.symbols)),
        ("trials", f"{summary.trials} of {summary.trials_requested} ({summary.strategy})"),
        *([("stopped", summary.stop_reason)] if summary.stop_reason else []),
        ("naive", naive),
        ("best", _latency(best.latency_s if best else None, summary.flops)),
        ("speedup", f"{speedup:.1f}x over naive" if speedup else "-"),
        *_library_rows(summary, baseline),
        ("failures", failures),
        ("config", json.dumps(best.config) if best else "-"),
        ("artifact", (best.artifact_sha256 if best else None) or "-"),
        ("tuning", f"{summary.tuning_id} ({summary.status})"),
    ]
    for label, value in rows:
        table.add_row(label, value)
    return table


def _library_rows(summary: TuningSummary, baseline: Baseline | None) -> list[tuple[str, str]]:
    """The library the user already has, and how the tuned kernel compares with it."""
    if baseline is None:
        return []
    versus = _versus(summary, baseline)
    verdict = "-"
    if versus:
        verdict = f"{versus:.2f}x the {baseline.library} speed" + (
            "" if versus >= 1 else f": {baseline.library} is faster here"
        )
    return [
        (baseline.library, _latency(baseline.latency_s, summary.flops)),
        ("vs library", verdict),
    ]


def _versus(summary: TuningSummary, baseline: Baseline | None) -> float | None:
    """How many times faster the best kernel runs than the library (above 1: worth it)."""
    if baseline is None or summary.best is None:
        return None
    return baseline.latency_s / summary.best.latency_s


def _speedup(summary: TuningSummary) -> float | None:
    if summary.best is None or not summary.baseline_latency_s:
        return None
    return summary.baseline_latency_s / summary.best.latency_s


def _latency(latency_s: float | None, flops: int | None) -> str:
    """A latency and, for programs with contractions, the GFLOP/s it amounts to: naive and
    best side by side in the same units."""
    if latency_s is None or flops is None:
        return seconds(latency_s)
    return f"{seconds(latency_s)}  ({flops / latency_s / 1e9:.3g} GFLOP/s)"


def _gflops(summary: TuningSummary) -> float | None:
    if summary.best is None or summary.flops is None:
        return None
    return summary.flops / summary.best.latency_s / 1e9


def _shape(shape: tuple[int | str, ...]) -> str:
    return "[" + ", ".join(str(e) for e in shape) + "]"
