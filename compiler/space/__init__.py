"""Schedule spaces: the knobs of a program on a target, their constraints and sampling."""

from tunehub.compiler.ir import Program
from tunehub.compiler.space.program import ProgramSpace
from tunehub.compiler.space.space import Config, Knob, Space
from tunehub.schemas.target import Target


def space_for(program: Program, target: Target) -> ProgramSpace:
    """The schedule space of `program` on `target`."""
    return ProgramSpace(program, target)


__all__ = ["Config", "Knob", "ProgramSpace", "Space", "space_for"]
