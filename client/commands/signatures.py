"""Commands that read a task signature without tuning it: `schema` (the format itself),
`validate` (its workload key and a summary) and `explain` (what the compiler makes of it on a
target). They need no database: only the compiler, imported when they run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import click

from tunehub.client.commands.common import load_signature, parse_target, target_here
from tunehub.schemas.signature import TaskSignature

if TYPE_CHECKING:
    from tunehub.compiler.ir import Program

_TARGET_HELP = "cpu[:ISA] or cuda[:sm_XX] (without ISA: this machine's)"


@click.command()
def schema() -> None:
    """Print the JSON Schema of task signatures (versions 1 and 2)."""
    click.echo(json.dumps(TaskSignature.model_json_schema(), indent=2))


@click.command()
@click.argument("signature_file", type=click.Path(path_type=Path))
@click.option("--verbose", is_flag=True, help="Also explain the stages and knobs (`explain`).")
@click.option("--target", "target_text", default="cpu", show_default=True, help=_TARGET_HELP)
def validate(signature_file: Path, verbose: bool, target_text: str) -> None:
    """Check a task signature; print its workload key and a summary."""
    from tunehub.compiler.canonical import workload_key

    _, program = load_signature(signature_file)
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


@click.command()
@click.argument("signature_file", type=click.Path(path_type=Path))
@click.option("--target", "target_text", default="cpu", show_default=True, help=_TARGET_HELP)
def explain(signature_file: Path, target_text: str) -> None:
    """Say what the compiler makes of a signature: its stages, the schedule each gets and
    why, and every knob of the space with its values and meaning."""
    _, program = load_signature(signature_file)
    _explain(program, target_text)


COMMANDS = [schema, validate, explain]


def _explain(program: Program, target_text: str) -> None:
    from tunehub.compiler.explain import explain, render_text

    for line in render_text(explain(program, target_here(parse_target(target_text)))):
        click.echo(line)


def _shape(shape: tuple[int | str, ...]) -> str:
    return "[" + ", ".join(str(e) for e in shape) + "]"
