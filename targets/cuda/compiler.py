"""The CUDA target as the compiler sees it: CUDA C++ (`render`) with one kernel launch per
stage or fused row group (`launches`, laid out as every GPU kind's: `targets.gpu.backend`),
the shared GPU schedules (`targets.gpu.schedule`) and CUDA's own WMMA, wgmma and `cp.async`
templates (`schedule/`), device limits per arch (`limits`) and the device columns of the
features (`features`)."""

from __future__ import annotations

from collections.abc import Mapping

from tunehub.compiler.analysis import CONTRACTION, INJECTIVE, REDUCTION
from tunehub.compiler.attention import ATTENTION
from tunehub.compiler.backend import arguments
from tunehub.compiler.kernel import Kernel
from tunehub.compiler.loop import Function
from tunehub.schemas.target import Target
from tunehub.targets.cuda import features
from tunehub.targets.cuda.launches import launches, metadata
from tunehub.targets.cuda.limits import arch_limits
from tunehub.targets.cuda.render import CUDARenderer
from tunehub.targets.cuda.schedule.async_tiles import CudaTiledContraction
from tunehub.targets.cuda.schedule.wgmma_template import WgmmaContraction
from tunehub.targets.cuda.schedule.wmma import WmmaContraction
from tunehub.targets.gpu.backend import GpuCompiler
from tunehub.targets.gpu.limits import DeviceLimits
from tunehub.targets.gpu.schedule.attention import SimtAttention
from tunehub.targets.gpu.schedule.contraction import PlainContraction
from tunehub.targets.gpu.schedule.fallback import Fallback
from tunehub.targets.gpu.schedule.gemv import GemvContraction
from tunehub.targets.gpu.schedule.injective import Injective
from tunehub.targets.gpu.schedule.reduction import Reduction


class CudaCompiler(GpuCompiler):
    language = "cuda"
    renderer = CUDARenderer

    def __init__(self) -> None:
        self.fallback = Fallback()
        self.schedules = {
            INJECTIVE: [Injective()],
            REDUCTION: [Reduction()],
            CONTRACTION: [
                PlainContraction(),
                CudaTiledContraction(),
                GemvContraction(),
                WmmaContraction(),
                WgmmaContraction(),
            ],
            ATTENTION: [SimtAttention()],
        }

    def limits(self, target: Target) -> DeviceLimits:
        return arch_limits(target)

    def kernel(self, fn: Function) -> Kernel:
        """With the launches of `fn` (grid, block, shared memory, workspaces) as metadata."""
        launch = metadata(fn, launches(fn))
        source = self.renderer().render(fn)
        return Kernel(self.language, source, fn.name, arguments(fn), fn.symbols, launch)

    def device_features(
        self, fn: Function, target: Target, symbols: Mapping[str, int]
    ) -> dict[str, float]:
        return features.device_features(fn, target, symbols)


BACKEND = CudaCompiler()
