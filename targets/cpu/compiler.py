"""The CPU target as the compiler sees it: C with OpenMP (`render`), the packed GEMM,
reduction and injective schedules (`schedule/`), and the roofline of a core as the estimate a
search starts from."""

from __future__ import annotations

from tunehub.compiler.analysis import CONTRACTION, INJECTIVE, REDUCTION, RowGroup
from tunehub.compiler.backend import CompilerBackend, RowBodies
from tunehub.compiler.cost_model import roofline
from tunehub.compiler.cost_model.cost_model import Estimate
from tunehub.compiler.loop import Stmt, as_expr, seq, var
from tunehub.compiler.schedule.stage import Context, Loop, nest
from tunehub.compiler.space.space import Config
from tunehub.targets.cpu.render import CRenderer
from tunehub.targets.cpu.schedule.contraction import PackedGemm
from tunehub.targets.cpu.schedule.fallback import Fallback
from tunehub.targets.cpu.schedule.injective import MAX_COLLAPSE, Injective
from tunehub.targets.cpu.schedule.reduction import Reduction


class CpuCompiler(CompilerBackend):
    language = "c"
    renderer = CRenderer

    def __init__(self) -> None:
        self.fallback = Fallback()
        self.schedules = {
            INJECTIVE: Injective(),
            REDUCTION: Reduction(),
            CONTRACTION: PackedGemm(),
        }

    def fused_rows(self, ctx: Context, group: RowGroup, knobs: Config, members: RowBodies) -> Stmt:
        """One parallel loop nest over the rows (its outer axes collapsed), each row
        computing every member stage."""
        first = ctx.analysis.stages[group.first]
        loops = [
            Loop(ctx.fresh(axis), as_expr(size))
            for axis, size in zip(first.axes[: group.rows], first.shape[: group.rows], strict=True)
        ]
        loops[:MAX_COLLAPSE] = [Loop(lp.var, lp.extent, "parallel") for lp in loops[:MAX_COLLAPSE]]
        return nest(loops, seq(members(tuple(var(lp.var) for lp in loops))))

    def zero_data_estimate(self) -> Estimate | None:
        return roofline.estimate


BACKEND = CpuCompiler()
