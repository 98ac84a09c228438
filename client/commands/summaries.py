"""How the commands show tunings to people: a bar on stderr while they run, then a table (or
JSON) of how they ended, with the weighted total of several tasks' latencies.

`tune` shows the tuner's own summaries (naive vs best vs the library already installed);
`submit`, `status` and `best` the server's views of a tuning, a group and a record.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import click
from rich.console import Console
from rich.table import Table

from tunehub.client.commands.common import console, seconds, symbols_text
from tunehub.schemas.api import TuningGroupView

if TYPE_CHECKING:
    from rich.progress import Progress as Bar

    from tunehub.schemas.api import RecordView, TuningView
    from tunehub.server.tuner import Progress, TuningSummary
    from tunehub.worker.backend import Baseline


# While they run


@contextmanager
def tuner_progress_bar(
    trials: int, *, enabled: bool
) -> Iterator[Callable[[Progress], None] | None]:
    """A rich progress bar on stderr, fed by the tuner's progress callback."""
    if not enabled:
        yield None
        return
    with _bar("tuning", "best {task.fields[best]}  failed {task.fields[failed]}") as bar:
        task = bar.add_task("tuning", total=trials, best="-", failed=0)

        def update(progress: Progress) -> None:
            best = seconds(progress.best_latency_s)
            bar.update(task, completed=progress.trials_done, best=best, failed=progress.failures)

        yield update


@contextmanager
def progress_bar(
    *, enabled: bool = True
) -> Iterator[Callable[[TuningView | TuningGroupView], None] | None]:
    """A rich progress bar on stderr, fed with the views `Client.wait` (or `wait_group`)
    polls; a group's best is its weighted total."""
    if not enabled:
        yield None
        return
    with _bar(
        "{task.fields[what]} {task.fields[id]}", "{task.fields[status]}  best {task.fields[best]}"
    ) as bar:
        task = bar.add_task("tuning", total=None, what="tuning", id="", status="", best="-")

        def update(view: TuningView | TuningGroupView) -> None:
            if isinstance(view, TuningGroupView):
                what, best = "tuning group", _group_best(view)
            else:
                what, best = "tuning", view.best.latency_s if view.best else None
            bar.update(
                task,
                total=view.trials_total,
                completed=view.trials_done,
                what=what,
                id=view.id,
                status=str(view.status),
                best=seconds(best),
            )

        yield update


@contextmanager
def going_on(what: str, ident: int) -> Iterator[None]:
    """Ctrl-C while following a tuning (or group) stops the following, not the tuning: say
    so, and how to cancel it."""
    from tunehub.client.commands.common import Interrupted

    try:
        yield
    except KeyboardInterrupt:
        cancel = f"tunehub cancel {'--group ' if what != 'tuning' else ''}{ident}"
        raise Interrupted(
            f"stopped watching: {what} {ident} goes on; `{cancel}` cancels it"
        ) from None


def _bar(label: str, detail: str) -> Bar:
    """The bar both kinds show on stderr: `label`, the bar, trials done of all, `detail` (the
    fields of its task) and the time elapsed."""
    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
    from rich.progress import Progress as Bar

    return Bar(
        TextColumn(label),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn(detail),
        TimeElapsedColumn(),
        console=Console(stderr=True),
    )


# How the tuner's tunings ended (`tune`)


def summary_json(summary: TuningSummary, libraries: list[Baseline]) -> dict[str, Any]:
    """A tuning's outcome as `tune --json` prints it: every number a script compares."""
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
        "library": asdict(libraries[0]) if libraries else None,
        "libraries": [asdict(b) for b in libraries],
        "vs_library": _versus(summary, libraries),
        "failures": summary.failures,
    }


def summary_table(name: str, summary: TuningSummary, libraries: list[Baseline]) -> Table:
    """A tuning's outcome as a two-column table: naive vs best vs the library, and why."""
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
        *_library_rows(summary, libraries),
        ("failures", failures),
        ("config", json.dumps(best.config) if best else "-"),
        ("artifact", (best.artifact_sha256 if best else None) or "-"),
        ("tuning", f"{summary.tuning_id} ({summary.status})"),
    ]
    for label, value in rows:
        table.add_row(label, value)
    return table


def many_json(
    summaries: list[TuningSummary], weights: list[float], baselines: list[list[Baseline]]
) -> dict[str, Any]:
    """Several tasks' outcomes as one JSON object: each task's, and their weighted totals."""
    tasks = [
        {**summary_json(summary, libraries), "weight": weight}
        for summary, weight, libraries in zip(summaries, weights, baselines, strict=True)
    ]
    return {
        "tasks": tasks,
        "total_trials": sum(summary.trials for summary in summaries),
        "weighted_latency_s": {
            "naive": _weighted([s.baseline_latency_s for s in summaries], weights),
            "best": _weighted([s.best.latency_s if s.best else None for s in summaries], weights),
        },
    }


def many_table(
    names: list[str],
    summaries: list[TuningSummary],
    weights: list[float],
    baselines: list[list[Baseline]],
) -> Table:
    """One row per task: its signature's name and symbol values, naive vs best vs the
    library, its share."""
    table = Table(title=f"{len(summaries)} tasks on {summaries[0].target}")
    columns = ("task", "symbols", "naive", "best", "speedup", "library", "vs library")
    for column in (*columns, "trials", "weight", "tuning"):
        table.add_column(column, justify="left" if column in ("task", "symbols") else "right")
    rows = zip(names, summaries, weights, baselines, strict=True)
    for name, summary, weight, libraries in rows:
        speedup, versus = _speedup(summary), _versus(summary, libraries)
        table.add_row(
            name,
            symbols_text(summary.symbols),
            seconds(summary.baseline_latency_s),
            seconds(summary.best.latency_s if summary.best else None),
            f"{speedup:.1f}x" if speedup else "-",
            f"{seconds(libraries[0].latency_s)} {libraries[0].library}" if libraries else "-",
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


def _library_rows(summary: TuningSummary, libraries: list[Baseline]) -> list[tuple[str, str]]:
    """The libraries the user already has, and how the tuned kernel compares with the
    fastest of them."""
    if not libraries:
        return []
    fastest = libraries[0].library
    versus = _versus(summary, libraries)
    verdict = "-"
    if versus:
        verdict = f"{versus:.2f}x the {fastest} speed" + (
            "" if versus >= 1 else f": {fastest} is faster here"
        )
    rows = [(b.library, _latency(b.latency_s, summary.flops)) for b in libraries]
    return [*rows, ("vs library", verdict)]


def library_code(libraries: list[Baseline]) -> str:
    """The code each library ran, as `tune --verbose` prints it for a user to time."""
    return "\n".join(f"# {b.library}\n{b.code}" for b in libraries)


def _versus(summary: TuningSummary, libraries: list[Baseline]) -> float | None:
    """How many times faster the best kernel runs than the fastest library (above 1: worth
    it)."""
    if not libraries or summary.best is None:
        return None
    return libraries[0].latency_s / summary.best.latency_s


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


# A server's tunings, groups and records (`submit`, `status`, `best`)


def show_view(view: TuningView | TuningGroupView, as_json: bool) -> None:
    """A tuning or group as `submit` and `status` print it: JSON, or its table."""
    if as_json:
        click.echo(view.model_dump_json())
    elif isinstance(view, TuningGroupView):
        console().print(group_table(view))
    else:
        console().print(tuning_table(view))


def tuning_table(tuning: TuningView) -> Table:
    """A tuning as a two-column table: progress, then its best kernel so far."""
    table = Table(title=f"tuning {tuning.id}", show_header=False)
    table.add_column(style="bold")
    table.add_column()
    rows = [
        ("status", str(tuning.status) + (f": {tuning.error}" if tuning.error else "")),
        ("workload", tuning.workload_key),
        ("target", tuning.target),
        ("symbols", symbols_text(tuning.symbols)),
        ("trials", f"{tuning.trials_done} of {tuning.trials_total} ({tuning.strategy})"),
        *([("time limit", f"{tuning.time_limit_s:g} s")] if tuning.time_limit_s else []),
        *([("stopped", tuning.stop_reason)] if tuning.stop_reason else []),
        ("best", seconds(tuning.best.latency_s) if tuning.best else "-"),
        ("artifact", (tuning.best.artifact_sha256 if tuning.best else None) or "-"),
    ]
    for label, value in rows:
        table.add_row(label, value)
    return table


def group_table(group: TuningGroupView) -> Table:
    """A group as one row per task (its tuning), then the weighted total of their bests."""
    status = str(group.status) + (f": {group.error}" if group.error else "")
    limit = f", time limit {group.time_limit_s:g} s" if group.time_limit_s else ""
    stopped = next((t.stop_reason for t in group.tunings if t.stop_reason), None)
    title = (
        f"tuning group {group.id} on {group.target}: {status}, "
        f"{group.trials_done} of {group.trials_total} trials ({group.strategy}){limit}"
        + (f"; stopped: {stopped}" if stopped else "")
    )
    table = Table(title=title)
    for column in ("tuning", "workload", "symbols", "weight", "status", "trials", "best"):
        table.add_column(column, justify="right" if column in ("weight", "trials") else "left")
    for tuning, weight in zip(group.tunings, group.weights, strict=True):
        table.add_row(
            str(tuning.id),
            tuning.workload_key[:12],
            symbols_text(tuning.symbols),
            f"{weight:g}",
            str(tuning.status),
            str(tuning.trials_done),
            seconds(tuning.best.latency_s) if tuning.best else "-",
        )
    table.add_section()
    table.add_row("weighted total", "", "", "", "", "", seconds(_group_best(group)))
    return table


def record_table(record: RecordView) -> Table:
    """A best record as a two-column table: its latency, config, artifact and origin."""
    table = Table(title=f"best kernel of {record.workload_key[:12]}", show_header=False)
    table.add_column(style="bold")
    table.add_column()
    rows = [
        ("latency", seconds(record.latency_s)),
        ("target", record.target),
        ("symbols", symbols_text(record.symbols)),
        ("config", json.dumps(record.config)),
        ("artifact", record.artifact_sha256 or "-"),
        ("device", ", ".join(filter(None, (record.device, record.driver, record.toolkit)))),
        ("record", f"{record.id} (tuning {record.tuning_id}, {record.created_at:%Y-%m-%d %H:%M})"),
        ("machine", ", ".join(f"{k}={v}" for k, v in sorted(record.machine.items())) or "-"),
    ]
    for label, value in rows:
        table.add_row(label, value)
    return table


def _group_best(group: TuningGroupView) -> float | None:
    """The model's latency as the group stands: every task's best times its weight (None
    until every task has a verified kernel)."""
    bests = [tuning.best.latency_s if tuning.best else None for tuning in group.tunings]
    return _weighted(bests, group.weights)


def _weighted(values: list[float | None], weights: list[float]) -> float | None:
    """The weighted total of several tasks' latencies; None while any of them has none."""
    if any(v is None for v in values):
        return None
    return sum(w * v for w, v in zip(weights, values, strict=True) if v is not None)
