"""Stage schedules: one per stage class, each a set of knobs and a lowering to loop IR.

`schedule_for(stage)` picks the schedule of a stage's class; classes without one use the
fallback. Contractions get the packed GEMM template (`contraction.py`), which itself falls
back to the reduction schedule for products it cannot regroup exactly.
"""

from compiler.analysis import CONTRACTION, INJECTIVE, REDUCTION, Stage
from compiler.schedule.contraction import Contraction
from compiler.schedule.fallback import Fallback
from compiler.schedule.injective import Injective
from compiler.schedule.reduction import Reduction
from compiler.schedule.stage import Context, Schedule

FALLBACK = Fallback()
SCHEDULES: dict[str, Schedule] = {
    INJECTIVE: Injective(),
    REDUCTION: Reduction(),
    CONTRACTION: Contraction(),
}


def schedule_for(stage: Stage) -> Schedule:
    return SCHEDULES.get(stage.kind, FALLBACK)


__all__ = ["FALLBACK", "SCHEDULES", "Context", "Schedule", "schedule_for"]
