"""The toy target's compiler facet: every stage through the CPU's fallback (the plain loop
nest), rendered by `ToyRenderer`."""

from __future__ import annotations

from tunehub.compiler.analysis import RowGroup
from tunehub.compiler.backend import CompilerBackend, RowBodies
from tunehub.compiler.loop import Function, Stmt, as_expr, seq, var
from tunehub.compiler.schedule.stage import Context, Loop, nest
from tunehub.compiler.space.space import Config
from tunehub.targets.cpu.render import CRenderer
from tunehub.targets.cpu.schedule.fallback import Fallback


class ToyRenderer(CRenderer):
    """C with a banner naming the dialect, and no OpenMP or vector pragmas."""

    language = "toyc"

    def preamble(self, fn: Function) -> list[str]:
        return ["/* toyc: tunehub's toy dialect */", *super().preamble(fn)]


class ToyCompiler(CompilerBackend):
    language = "toyc"
    renderer = ToyRenderer

    def __init__(self) -> None:
        self.fallback = Fallback()
        self.schedules = {}

    def fused_rows(self, ctx: Context, group: RowGroup, knobs: Config, members: RowBodies) -> Stmt:
        """The group's rows as serial loops, each row running every member (no knobs)."""
        first = ctx.analysis.stages[group.first]
        loops = [
            Loop(ctx.fresh(axis), as_expr(size))
            for axis, size in zip(first.axes[: group.rows], first.shape[: group.rows], strict=True)
        ]
        return nest(loops, seq(members(tuple(var(lp.var) for lp in loops))))


BACKEND = ToyCompiler()
