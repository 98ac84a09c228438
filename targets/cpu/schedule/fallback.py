"""The fallback schedule: the stage's loop nest as written, for any stage class that has no
schedule of its own. It has no knobs; every other schedule's naive config lowers to exactly
the same nest (`plain_nest`), so it is also the baseline tuned kernels are compared with."""

from __future__ import annotations

from tunehub.compiler.analysis import Stage
from tunehub.compiler.ir import Expr
from tunehub.compiler.loop import Stmt
from tunehub.compiler.schedule.stage import Context, Schedule, plain_nest
from tunehub.compiler.space.space import Config, Knob
from tunehub.schemas.target import Target


class Fallback(Schedule):
    kind = "fallback"
    summary = "the plain loop nest as written (no knobs)"

    def knobs(self, stage: Stage, target: Target) -> dict[str, tuple[Knob, ...]]:
        return {}

    def naive(self, stage: Stage, target: Target) -> Config:
        return {}

    def default(self, stage: Stage, target: Target) -> Config:
        return {}

    def lower(self, stage: Stage, config: Config, ctx: Context, rows: tuple[Expr, ...]) -> Stmt:
        return plain_nest(stage, ctx, rows)
