"""Stage schedules: one per stage class, each a set of knobs and a lowering to loop IR.

`schedule_for(stage, target)` picks the schedule of a stage's class for the target's kind
(CPU here, CUDA in `gpu/`); classes without one use the fallback. CPU contractions get the
packed GEMM template (`contraction.py`), which itself falls back to the reduction schedule
for products it cannot regroup exactly.
"""

from compiler.analysis import CONTRACTION, INJECTIVE, REDUCTION, Stage
from compiler.schedule.contraction import Contraction
from compiler.schedule.fallback import Fallback
from compiler.schedule.gpu import GPU_FALLBACK, GPU_SCHEDULES
from compiler.schedule.injective import Injective
from compiler.schedule.reduction import Reduction
from compiler.schedule.stage import Context, Schedule
from schemas.target import Target

FALLBACK = Fallback()
SCHEDULES: dict[str, Schedule] = {
    INJECTIVE: Injective(),
    REDUCTION: Reduction(),
    CONTRACTION: Contraction(),
}


def schedule_for(stage: Stage, target: Target) -> Schedule:
    if target.kind == "cuda":
        return GPU_SCHEDULES.get(stage.kind, GPU_FALLBACK)
    return SCHEDULES.get(stage.kind, FALLBACK)


__all__ = ["FALLBACK", "SCHEDULES", "Context", "Schedule", "schedule_for"]
