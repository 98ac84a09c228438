"""Schedule spaces: the knobs of a program on a target, their constraints and sampling."""

from compiler.ir import Program
from compiler.space.program import ProgramSpace
from compiler.space.space import Config, Knob, Space
from schemas.target import Target


def space_for(program: Program, target: Target) -> ProgramSpace:
    """The schedule space of `program` on `target`."""
    return ProgramSpace(program, target)


__all__ = ["Config", "Knob", "ProgramSpace", "Space", "space_for"]
