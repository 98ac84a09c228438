"""`tunehub extract`: read a model's kernels off it as a task set (`schemas.taskset`), for
`tunehub tune` and `tunehub submit` to tune on one budget.

The frontends (and torch or onnx with them) are imported only when the command runs: the
client loads nothing but schemas and runtime at import."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

import click
from rich.table import Table

from tunehub.client.commands.common import UserError, console
from tunehub.schemas.signature import SymbolDecl

if TYPE_CHECKING:
    from tunehub.schemas.taskset import TaskSet

_RANGE = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=([0-9]{1,10})\.\.([0-9]{1,10})")
_EXTRAS = {"onnx": "onnx", "torch": "torch", "google": "onnx"}  # a missing module's extra
_NUMBERS = ("weight", "FLOPs/run", "share", "ops", "count", "FLOPs")


@click.command()
@click.argument("model", required=False, type=click.Path(path_type=Path))
@click.option(
    "--torch",
    "torch_spec",
    metavar="MODULE:FACTORY",
    help="Export a PyTorch module instead: FACTORY() returns (module, example_inputs) or "
    "(module, example_inputs, dynamic_shapes). This imports and runs MODULE.",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(path_type=Path),
    help="Write the task set here (without it, only the summary is printed).",
)
@click.option(
    "--range",
    "range_args",
    multiple=True,
    metavar="NAME=MIN..MAX",
    help="A symbol's range (default: the model's, or 1..4096 where it gives none).",
)
def extract(
    model: Path | None, torch_spec: str | None, output: Path | None, range_args: tuple[str, ...]
) -> None:
    """Read a model's kernels off it as a task set: an ONNX file (MODEL.onnx), TVM TIR text
    as MLC-LLM prints it (any other MODEL), or a PyTorch module (--torch MODULE:FACTORY).

    Identical kernels are one task whose weight counts them; ops that map to no kernel are
    listed with their reasons. Tune the set with `tunehub tune TASKS.json` or submit it with
    `tunehub submit TASKS.json`."""
    from tunehub.frontends.errors import ModelError

    if (model is None) == (torch_spec is None):
        raise UserError("name a MODEL file or --torch MODULE:FACTORY (one of them)")
    ranges = _ranges(range_args)
    try:
        taskset = _read(model, torch_spec, ranges)
    except ModelError as exc:
        raise UserError(str(exc)) from exc
    except ModuleNotFoundError as exc:
        extra = _EXTRAS.get((exc.name or "").split(".")[0])
        if extra is None:
            raise
        raise UserError(f"this needs {extra}: pip install 'tunehub[{extra}]'") from exc
    if output is not None:
        try:
            output.write_text(taskset.model_dump_json(indent=1, exclude_none=True) + "\n")
        except OSError as exc:
            raise UserError(f"cannot write {output}: {exc.strerror or exc}") from exc
    _summary(taskset, output)


COMMANDS = [extract]


def _read(model: Path | None, torch_spec: str | None, ranges: dict[str, SymbolDecl]) -> TaskSet:
    if torch_spec is not None:
        from tunehub.frontends import torch_export

        return torch_export.read(torch_spec, ranges)
    assert model is not None
    if model.suffix == ".onnx":
        from tunehub.frontends import onnx_model

        return onnx_model.read(model, ranges)
    from tunehub.frontends import tir

    try:
        text = model.read_text()
    except OSError as exc:
        raise UserError(f"cannot read {model}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise UserError(f"{model}: not TVMScript: not UTF-8 text") from exc
    return tir.read(text, model.name, ranges)


def _ranges(args: tuple[str, ...]) -> dict[str, SymbolDecl]:
    """`("seq=1..2048",)` -> `{"seq": SymbolDecl(1, 2048)}`."""
    ranges = {}
    for arg in args:
        match = _RANGE.fullmatch(arg.strip())
        if match is None:
            raise UserError(f"--range expects NAME=MIN..MAX, not {arg!r}")
        name, low, high = match.group(1), int(match.group(2)), int(match.group(3))
        if not 1 <= low <= high:
            raise UserError(f"--range {arg}: the range must be 1 <= MIN <= MAX")
        ranges[name] = SymbolDecl(min=low, max=high)
    return ranges


def _summary(taskset: TaskSet, output: Path | None) -> None:
    """How much of the model the set covers, its symbols, its tasks, what was left out, and
    where the set went."""
    flops = taskset.flops
    tasks = len(taskset.tasks)
    if tasks:
        click.echo(
            f"{taskset.source}: {tasks} task{'' if tasks == 1 else 's'}, {flops.share:.1%} of "
            f"the model's {_flops(flops.total)}FLOP covered"
        )
    else:
        click.echo(f"{taskset.source}: no tasks, every op was left out")
    if taskset.symbols:
        ranges = ", ".join(f"{n} {d.min}..{d.max}" for n, d in taskset.symbols.items())
        at = ", ".join(f"{n}={flops.at[n]}" for n in taskset.symbols)
        click.echo(f"symbols: {ranges} (FLOPs counted at {at})")
    out = console()
    if tasks:
        out.print(_tasks_table(taskset))
    if taskset.left_out:
        count = sum(entry.count for entry in taskset.left_out)
        left = Table(title=f"left out: {count} ops")
        for column in ("op", "count", "FLOPs", "reason"):
            left.add_column(column, justify="right" if column in _NUMBERS else "left")
        for entry in taskset.left_out:
            known = "?" if entry.flops is None else _flops(entry.flops)
            left.add_row(entry.op, str(entry.count), known, entry.reason)
        out.print(left)
    if output is not None:
        click.echo(f"wrote {output}")


def _tasks_table(taskset: TaskSet) -> Table:
    """One row per task: weight, FLOPs, share of the model's, how many ops, symbols, key."""
    from tunehub.compiler.canonical import workload_key
    from tunehub.compiler.program import load

    table = Table()
    for column in ("task", "weight", "FLOPs/run", "share", "ops", "symbols", "workload"):
        table.add_column(column, justify="right" if column in _NUMBERS else "left")
    total = taskset.flops.total
    for task in taskset.tasks:
        share = task.weight * task.flops / total if total else 0.0
        table.add_row(
            task.signature.name,
            f"{task.weight:g}",
            _flops(task.flops),
            f"{share:.1%}",
            str(len(task.source_ops)),
            ", ".join(task.signature.symbols) or "-",
            workload_key(load(task.signature))[:12],
        )
    return table


def _flops(value: int) -> str:
    """`136 M`: a count of FLOPs for people."""
    for unit, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if value >= scale:
            return f"{value / scale:.3g} {unit}"
    return str(value)
