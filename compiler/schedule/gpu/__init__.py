"""GPU (CUDA) stage schedules: the same `Schedule` interface as the CPU ones, lowering to
loop IR with block and thread bindings (see "GPU concepts" in `compiler.loop`)."""

from compiler.analysis import CONTRACTION, INJECTIVE, REDUCTION
from compiler.schedule.gpu.blocks import fused_rows
from compiler.schedule.gpu.contraction import Contraction
from compiler.schedule.gpu.fallback import Fallback
from compiler.schedule.gpu.injective import Injective
from compiler.schedule.gpu.reduction import Reduction
from compiler.schedule.stage import Schedule

GPU_FALLBACK = Fallback()
GPU_SCHEDULES: dict[str, Schedule] = {
    INJECTIVE: Injective(),
    REDUCTION: Reduction(),
    CONTRACTION: Contraction(),
}

__all__ = ["GPU_FALLBACK", "GPU_SCHEDULES", "fused_rows"]
