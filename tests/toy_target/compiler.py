"""The toy target's compiler facet: every stage through the CPU's fallback (the plain loop
nest), rendered by `ToyRenderer`."""

from __future__ import annotations

from tunehub.compiler.analysis import Stage
from tunehub.compiler.backend import CompilerBackend, RowBodies
from tunehub.compiler.loop import Function, Stmt, as_expr, seq, var
from tunehub.compiler.schedule.stage import Context, Loop, nest
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

    def fused_rows(self, ctx: Context, first: Stage, rows: int, members: RowBodies) -> Stmt:
        loops = [
            Loop(ctx.fresh(axis), as_expr(size))
            for axis, size in zip(first.axes[:rows], first.shape[:rows], strict=True)
        ]
        return nest(loops, seq(members(tuple(var(lp.var) for lp in loops))))


BACKEND = ToyCompiler()
