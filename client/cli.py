"""The `tunehub` command line: validate signatures, tune them on this machine, export kernels.

Each command parses its options, calls the compiler and server packages, and formats what they
return. Errors are one line, never a traceback: exit 2 for the user's mistakes (a missing file,
an invalid signature, an unknown symbol), 1 for internal failures (`TUNEHUB_DEBUG=1` shows the
traceback). The service stack is imported inside the commands that need it, so `--help` and
`schema` stay fast.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from pydantic import ValidationError
from rich.console import Console
from rich.table import Table

from client.commands import cuda, remote, services
from client.commands.common import (
    InternalError,
    UserError,
    one_line,
    parse_symbols,
    read_signature,
    seconds,
)
from compiler.search import STRATEGIES
from schemas.api import DEFAULT_STRATEGY
from schemas.signature import TaskSignature
from schemas.target import Target

if TYPE_CHECKING:
    from sqlalchemy.orm import Session, sessionmaker

    from compiler.ir import Program
    from server.tuner import Progress, TuningSummary


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
    except Exception as exc:
        if os.environ.get("TUNEHUB_DEBUG"):
            raise
        click.echo(f"error: internal error: {type(exc).__name__}: {one_line(str(exc))}", err=True)
        sys.exit(1)
    sys.exit(code if isinstance(code, int) else 0)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def cli() -> None:
    """tunehub: tune tensor programs for CPUs and GPUs, and keep every result."""


@cli.command()
def schema() -> None:
    """Print the JSON Schema of task signatures (version 1)."""
    click.echo(json.dumps(TaskSignature.model_json_schema(), indent=2))


@cli.command()
@click.argument("signature_file", type=click.Path(path_type=Path))
def validate(signature_file: Path) -> None:
    """Check a task signature; print its workload key and a summary."""
    from compiler.canonical import workload_key

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


@cli.command()
@click.argument("signature_file", type=click.Path(path_type=Path))
@click.option("--target", "target_text", default="cpu", show_default=True, help="cpu[:ISA]")
@click.option("--trials", type=click.IntRange(min=1), default=64, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object, no progress bar.")
@click.option("--db", "db_url", help="Database URL (default: TUNEHUB_DATABASE_URL or ~/.tunehub).")
@click.option(
    "--symbol",
    "symbol_args",
    multiple=True,
    metavar="NAME=VALUE",
    help="Symbol value to tune for (default: each symbol at 64, clamped).",
)
@click.option(
    "--threads", type=click.IntRange(min=1), help="Threads kernels run with (default: every core)."
)
@click.option(
    "--strategy", type=click.Choice(sorted(STRATEGIES)), default=DEFAULT_STRATEGY, show_default=True
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the search.")
def tune(
    signature_file: Path,
    target_text: str,
    trials: int,
    as_json: bool,
    db_url: str | None,
    symbol_args: tuple[str, ...],
    threads: int | None,
    strategy: str,
    seed: int,
) -> None:
    """Tune a task signature on this machine and report naive vs best."""
    from server.db.session import session_scope
    from server.tuner import LocalExecutor, Tuner, submit
    from worker import device

    signature, program = _load_signature(signature_file)
    target, symbols = _target(target_text), _symbols(program, symbol_args)
    sessions = _sessions(db_url)
    with LocalExecutor() as executor:
        try:
            target = executor.resolve(target)
            with session_scope(sessions) as s:
                tuning_id = submit(
                    s,
                    signature=signature,
                    target=target,
                    symbols=symbols,
                    trials=trials,
                    strategy=strategy,
                )
        except ValueError as exc:  # SignatureError included
            raise UserError(str(exc)) from exc
        tuner = Tuner(sessions, executor, threads=threads or device.cpu_cores(), seed=seed)
        with _progress_bar(trials, enabled=not as_json) as on_progress:
            try:
                summary = tuner.run(tuning_id, on_progress)
            except Exception as exc:
                raise InternalError(f"tuning {tuning_id} failed: {exc}") from exc
    if as_json:
        click.echo(json.dumps(_summary_json(summary)))
    else:
        Console().print(_summary_table(signature.name, summary))


@cli.command()
@click.argument("workload_key")
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
    help="Directory to write kernel.so, kernel.c and metadata.json into.",
)
@click.option("--db", "db_url", help="Database URL (default: TUNEHUB_DATABASE_URL or ~/.tunehub).")
@click.option(
    "--symbol",
    "symbol_args",
    multiple=True,
    metavar="NAME=VALUE",
    help="Symbol values it was tuned for (default: as `tune`).",
)
def kernel(
    workload_key: str,
    target_text: str,
    out_dir: Path,
    db_url: str | None,
    symbol_args: tuple[str, ...],
) -> None:
    """Export the best verified kernel of a workload (load it with client.load_kernel)."""
    from client.kernel import save_kernel
    from compiler.program import load
    from server.db import store
    from server.db.session import session_scope
    from server.tuner import LocalExecutor

    target = _target(target_text)
    if target.kind == "cpu" and not target.complete:
        try:
            with LocalExecutor() as executor:
                target = executor.resolve(target)
        except ValueError as exc:
            raise UserError(str(exc)) from exc
    with session_scope(_sessions(db_url)) as s:
        workload = store.get_workload(s, workload_key)
        if workload is None:
            raise UserError(f"unknown workload {workload_key!r} (see `tunehub validate`)")
        symbols = _symbols(load(workload.signature), symbol_args)
        best = store.best_record(s, workload_key=workload_key, target=target, symbols=symbols)
        artifact = None
        if best is not None and best.artifact_sha256 is not None:
            artifact = store.get_artifact(s, best.artifact_sha256)
        if best is None or artifact is None:
            raise UserError(
                f"no verified kernel for workload {workload_key[:12]} on {target} "
                f"with symbols {symbols}: run `tunehub tune` first"
            )
        metadata = {
            **artifact.meta,
            "workload_key": workload_key,
            "name": workload.name,
            "target": best.target,
            "tuned_symbols": symbols,
            "latency_s": best.latency_s,
            "config": best.config,
            "artifact_sha256": artifact.sha256,
            "record_id": best.id,
        }
        save_kernel(out_dir, artifact.data, artifact.source, metadata)
    click.echo(
        f"wrote {out_dir}/ (kernel.so, kernel.c, metadata.json): {workload.name} on "
        f"{best.target}, {seconds(best.latency_s)}"
    )


# Commands defined beside this module: against a server, and the service's own processes.
for command in (*remote.COMMANDS, *services.COMMANDS, *cuda.COMMANDS):
    cli.add_command(command)


# Helpers: input parsing and output formatting.


def _load_signature(path: Path) -> tuple[TaskSignature, Program]:
    """The signature in `path` and its validated program; UserError for anything wrong."""
    from compiler.errors import SignatureError
    from compiler.program import load

    document = read_signature(path)
    try:
        program = load(document)
        return TaskSignature.model_validate(document), program
    except (SignatureError, ValidationError) as exc:
        raise UserError(f"{path}: {exc}") from exc


def _target(text: str) -> Target:
    try:
        return Target.parse(text)
    except ValueError as exc:
        raise UserError(str(exc)) from exc


def _symbols(program: Program, args: tuple[str, ...]) -> dict[str, int]:
    """`("M=64",)` -> every symbol's value to tune for (the tuner's defaults for the rest)."""
    from server.tuner import resolve_symbols

    try:
        return resolve_symbols(program, parse_symbols(args))
    except ValueError as exc:
        raise UserError(str(exc)) from exc


def _sessions(db_url: str | None) -> sessionmaker[Session]:
    """A session factory on the migrated database at `db_url` (or the settings' default)."""
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError, OperationalError

    from server.db.session import make_engine, migrate, session_factory
    from server.settings import get_settings

    url = db_url or get_settings().database_url
    try:
        migrate(url)
        return session_factory(make_engine(url))
    except (ArgumentError, NoSuchModuleError) as exc:
        raise UserError(f"invalid database URL {url!r}: {exc}") from exc
    except OperationalError as exc:
        raise UserError(f"cannot use the database at {url!r}: {exc.orig}") from exc


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


def _summary_json(summary: TuningSummary) -> dict[str, Any]:
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
        "failures": summary.failures,
    }


def _summary_table(name: str, summary: TuningSummary) -> Table:
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
        ("symbols", ", ".join(f"{k}={v}" for k, v in summary.symbols.items()) or "-"),
        ("trials", f"{summary.trials} of {summary.trials_requested} ({summary.strategy})"),
        ("naive", naive),
        ("best", _latency(best.latency_s if best else None, summary.flops)),
        ("speedup", f"{speedup:.1f}x over naive" if speedup else "-"),
        ("failures", failures),
        ("config", json.dumps(best.config) if best else "-"),
        ("artifact", (best.artifact_sha256 if best else None) or "-"),
        ("tuning", f"{summary.tuning_id} ({summary.status})"),
    ]
    for label, value in rows:
        table.add_row(label, value)
    return table


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
