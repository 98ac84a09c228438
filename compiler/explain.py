"""What the compiler makes of a signature on a target, in words: the stages the analysis found
(which computes became loads of others, which stores of others), the schedule each gets and
why, every knob with its values and meaning, and the size of the space. For `tunehub
explain` and `tunehub validate --verbose`: a user sees why a kernel is as fast as it is, or
why a stage only got a fallback space.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tunehub.compiler.analysis import Analysis, Stage
from tunehub.compiler.backend import compiler_backend, schedule_for
from tunehub.compiler.ir import Program, loads
from tunehub.compiler.space import ProgramSpace, space_for
from tunehub.compiler.space.program import CHAIN_DOC, FUSE_DOC
from tunehub.compiler.space.space import Knob
from tunehub.schemas.target import Target


@dataclass(frozen=True)
class KnobLine:
    name: str  # as in a config: `s0.mr`, `g0.fuse`
    values: tuple[Knob, ...]
    default: Knob
    meaning: str


@dataclass(frozen=True)
class StageLine:
    index: int
    kind: str
    anchor: str
    inlined: tuple[str, ...]  # computes evaluated where this stage reads them (its prologue)
    sums_for: str | None  # the variance this sum (one of two, in one pass) computes
    gives: tuple[str, ...]  # sums computed from this one, with no loop of their own (a mean)
    keeps: str | None  # the output this reduction stores its terms in, read back there
    epilogue: tuple[str, ...]  # computes applied as this stage stores (its epilogue)
    stored_in: str  # the output it writes, or "workspace" for an intermediate
    schedule: str
    why: str


@dataclass(frozen=True)
class Explanation:
    target: Target
    stages: tuple[StageLine, ...]
    groups: tuple[str, ...]  # each fusable row group and attention chain, in words
    knobs: tuple[KnobLine, ...]

    @property
    def space_size(self) -> int:
        """The product of the knobs' choices: an upper bound on the distinct configs, which
        constraints and canonical forms (unused knobs at their first values) cut, often by
        orders of magnitude; counting them exactly would enumerate the product."""
        return math.prod(len(k.values) for k in self.knobs)


def explain(program: Program, target: Target) -> Explanation:
    space = space_for(program, target)
    analysis = space.analysis
    default = space.default()
    knobs = [
        KnobLine(name, values, default[name], _meaning(space, target, name))
        for name, values in space.knobs.items()
    ]
    stages = tuple(_stage_line(program, analysis, stage, target) for stage in analysis.stages)
    groups = tuple(
        f"g{n}: stages {g.first}..{g.last} share {g.rows} row axes"
        for n, g in enumerate(analysis.groups)
    ) + tuple(
        f"a{n}: stages {c.members[0].index}..{c.index} are attention, one pass over the keys"
        for n, c in enumerate(space.chains)
    )
    return Explanation(target, stages, groups, tuple(knobs))


def _stage_line(program: Program, analysis: Analysis, stage: Stage, target: Target) -> StageLine:
    schedule = schedule_for(stage, target)
    return StageLine(
        index=stage.index,
        kind=stage.kind,
        anchor=stage.anchor.name,
        inlined=_inlined_into(program, analysis, stage),
        sums_for=analysis.sums_for.get(stage.anchor.name),
        gives=tuple(m for m, s1 in analysis.means_from.items() if s1 == stage.anchor.name),
        keeps=stage.keeps,
        epilogue=tuple(c.name for c in stage.epilogue),
        stored_in=stage.buffer if stage.output else "workspace",
        schedule=schedule.title(stage, target),
        why=schedule.why(stage, target),
    )


def _inlined_into(program: Program, analysis: Analysis, stage: Stage) -> tuple[str, ...]:
    """The computes the analysis inlined that this stage's anchor or epilogues read, directly
    or through other inlined computes."""
    kept = {s.anchor.name for s in analysis.stages}
    kept |= {c.name for s in analysis.stages for c in s.epilogue} | set(analysis.means_from)
    computes = {c.name: c for c in program.computes}
    found: list[str] = []
    anchor = analysis.sums_for.get(stage.anchor.name, stage.anchor.name)
    todo = [anchor, *(c.name for c in stage.epilogue if c.name in computes)]
    while todo:
        for load in loads(computes[todo.pop()].body):
            if load.tensor in computes and load.tensor not in kept and load.tensor not in found:
                found.append(load.tensor)
                todo.append(load.tensor)
    return tuple(sorted(found, key=list(computes).index))


def _meaning(space: ProgramSpace, target: Target, name: str) -> str:
    prefix, _, knob = name.partition(".")
    if prefix.startswith("g"):
        return FUSE_DOC if knob == "fuse" else compiler_backend(target).group_knob_docs[knob]
    if prefix.startswith("a"):
        chain = space.chains[int(prefix[1:])]
        schedule = space.chain_schedules[int(prefix[1:])]
        return CHAIN_DOC if knob == "fuse" else schedule.knob_doc(chain, target, knob)
    stage = space.analysis.stages[int(prefix[1:])]
    return schedule_for(stage, target).knob_doc(stage, target, knob)


def render_text(explanation: Explanation) -> list[str]:
    """The explanation as lines of text."""
    lines = [f"target {explanation.target}"]
    for s in explanation.stages:
        lines.append(f"stage {s.index}: {s.kind} {s.anchor} -> {s.stored_in}")
        if s.sums_for:
            lines.append(f"  one pass: a sum {s.sums_for} is made of, needing no other sum")
        if s.gives:
            lines.append(f"  gives {', '.join(s.gives)} too (plus n times the row's first term)")
        if s.keeps:
            lines.append(f"  keeps its terms in {s.keeps}, which reads them back: computed once")
        if s.inlined:
            lines.append(f"  inlined where read: {', '.join(s.inlined)}")
        if s.epilogue:
            lines.append(f"  applied as stored: {', '.join(s.epilogue)}")
        lines.append(f"  schedule {s.schedule}: {s.why}")
    lines += [f"group {g}" for g in explanation.groups]
    size = f"at most {explanation.space_size:,} configs, before constraints"
    lines.append(f"knobs ({len(explanation.knobs)}; {size}):")
    width = max((len(k.name) for k in explanation.knobs), default=0)
    for k in explanation.knobs:
        values = ", ".join(str(v) for v in k.values)
        lines.append(f"  {k.name:<{width}}  {k.meaning} [{values}; default {k.default}]")
    return lines
