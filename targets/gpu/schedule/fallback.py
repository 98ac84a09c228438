"""The GPU fallback: one thread per output element, a plain loop over the reduce axes.

It compiles any stage correctly, has no knobs, and is what every GPU schedule's naive config
lowers to (the baseline tuned kernels are compared with)."""

from __future__ import annotations

from tunehub.compiler.analysis import Stage
from tunehub.compiler.ir import Expr
from tunehub.compiler.loop import Stmt
from tunehub.compiler.schedule.stage import Context
from tunehub.compiler.space.space import Config
from tunehub.targets.cpu.schedule import fallback
from tunehub.targets.gpu.schedule.blocks import FALLBACK_THREADS, per_output


class Fallback(fallback.Fallback):
    """The CPU fallback's (empty) space, lowered to a GPU kernel."""

    def lower(self, stage: Stage, config: Config, ctx: Context, rows: tuple[Expr, ...]) -> Stmt:
        return naive_kernel(stage, ctx, rows)


def naive_kernel(stage: Stage, ctx: Context, rows: tuple[Expr, ...]) -> Stmt:
    return per_output(stage, ctx, rows, FALLBACK_THREADS)
