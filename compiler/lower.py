"""(program, target, config) -> Kernel: run the stage schedules and render the loop IR.

Stages are lowered in order, each by its class's schedule on the target with its own
(unprefixed) knobs; a fused row group becomes one loop over its rows (on CPUs parallel and
collapsed, on CUDA one block per row) holding each of its stages' per-row statements back to
back; a fused attention chain (`compiler.attention`) is its template's one loop nest in
place of its stages, whose workspaces it does without. On CUDA every stage (or fused group)
is a kernel launch of its own. Results that are not outputs live in workspace buffers.
`lower_function` stops at the loop IR (for features and tests); `lower` simplifies its index
arithmetic (`compiler.simplify`) and renders it.
"""

from __future__ import annotations

import re

from tunehub.compiler.analysis import RowGroup, Stage
from tunehub.compiler.backend import compiler_backend
from tunehub.compiler.errors import InvalidConfig
from tunehub.compiler.exact_casts import drop_exact_roundings
from tunehub.compiler.ir import Expr, Program
from tunehub.compiler.kernel import Kernel
from tunehub.compiler.loop import Buffer, Function, Namer, Stmt, Workspace, seq
from tunehub.compiler.schedule.stage import Context
from tunehub.compiler.simplify import simplify
from tunehub.compiler.space import ProgramSpace, space_for
from tunehub.compiler.space.program import chain_knob, group_knob
from tunehub.compiler.space.space import Config
from tunehub.schemas.target import Target


def lower(program: Program, target: Target, config: Config) -> Kernel:
    """The kernel of `program` scheduled by `config`; InvalidConfig if the space rejects it."""
    return kernel_of(lower_function(program, target, config), target.kind)


def kernel_of(fn: Function, kind: str = "cpu") -> Kernel:
    """The kernel of a loop-IR function for a target kind, with its ABI (and launch)
    description. Its index arithmetic is simplified and its 16-bit casts that cannot round
    dropped here, for the compiler's sake; features read the loop IR as scheduled (the
    simplification costs a few lowerings)."""
    return compiler_backend(kind).kernel(simplify(drop_exact_roundings(fn)))


def lower_function(
    program: Program, target: Target, config: Config, space: ProgramSpace | None = None
) -> Function:
    """The loop IR of `program` under `config`."""
    space = space or space_for(program, target)
    reason = space.check(config)
    if reason is not None:
        raise InvalidConfig(reason)
    analysis = space.analysis
    ctx = Context(analysis, target, Namer(signature_names(program)))
    chains = {
        c.members[0].index: (n, c) for n, c in enumerate(space.chains) if config[chain_knob(n)]
    }
    inside = {s.index for _, c in chains.values() for s in c.members}
    ctx.workspaces += [
        Workspace(s.buffer, s.dtype, s.shape) for s in analysis.workspaces if s.index not in inside
    ]
    fused = {g.first: (n, g) for n, g in enumerate(analysis.groups) if config[group_knob(n)]}
    body: list[Stmt] = []
    index = 0
    while index < len(analysis.stages):
        stage = analysis.stages[index]
        if index in chains:
            n, chain = chains[index]
            schedule = space.chain_schedules[n]
            body.append(schedule.lower(chain, space.chain_config(n, config), ctx, ()))
            index = chain.index + 1
        elif index in fused:
            n, group = fused[index]
            body.append(_fused(space, config, ctx, n, group))
            index = group.last + 1
        else:
            body.append(_stage(space, config, ctx, stage, ()))
            index += 1
    inputs = tuple(Buffer(t.name, t.dtype, t.shape) for t in program.inputs)
    outputs = tuple(Buffer(c.name, c.dtype, c.shape) for c in map(program.compute, program.outputs))
    symbols = tuple(s.name for s in program.symbols)
    return Function(entry_name(program), inputs, outputs, symbols, seq(body), tuple(ctx.workspaces))


def _stage(
    space: ProgramSpace, config: Config, ctx: Context, stage: Stage, rows: tuple[Expr, ...]
) -> Stmt:
    return (
        compiler_backend(ctx.target)
        .schedule(stage)
        .lower(stage, space.stage_config(stage, config), ctx, rows)
    )


def _fused(space: ProgramSpace, config: Config, ctx: Context, n: int, group: RowGroup) -> Stmt:
    """Group `n`'s rows iterated once (the target lays them out, by the group's own knobs),
    each row computing every member stage."""
    stages = [space.analysis.stages[i] for i in group.stages]
    return compiler_backend(ctx.target).fused_rows(
        ctx,
        group,
        space.group_config(n, config),
        lambda index: [_stage(space, config, ctx, s, index) for s in stages],
    )


def signature_names(program: Program) -> set[str]:
    """Names a generated one must avoid: symbols (they appear as variables in expressions)
    and tensors (workspaces share their namespace)."""
    names = {s.name for s in program.symbols} | {t.name for t in program.inputs}
    return names | {c.name for c in program.computes}


def entry_name(program: Program) -> str:
    """The C entry point: `tunehub_` and the program name with other characters as `_`."""
    return "tunehub_" + re.sub(r"[^A-Za-z0-9_]", "_", program.name)
