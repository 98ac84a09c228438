"""The CUDA target as the compiler sees it: CUDA C++ (`render`) with one kernel launch per
stage or fused row group (`launches`), SIMT, WMMA, wgmma and GEMV schedules (`schedule/`),
device limits per arch (`limits`) and the device columns of the features (`features`)."""

from __future__ import annotations

from collections.abc import Mapping

from tunehub.compiler.analysis import CONTRACTION, INJECTIVE, REDUCTION, Stage
from tunehub.compiler.backend import CompilerBackend, RowBodies, arguments
from tunehub.compiler.kernel import Kernel
from tunehub.compiler.loop import Function, Stmt
from tunehub.compiler.schedule.stage import Context
from tunehub.schemas.target import Target
from tunehub.targets.cuda import features
from tunehub.targets.cuda.launches import launches, metadata
from tunehub.targets.cuda.render import CUDARenderer
from tunehub.targets.cuda.schedule.blocks import fused_rows
from tunehub.targets.cuda.schedule.contraction import CudaContraction
from tunehub.targets.cuda.schedule.fallback import Fallback
from tunehub.targets.cuda.schedule.injective import Injective
from tunehub.targets.cuda.schedule.reduction import Reduction


class CudaCompiler(CompilerBackend):
    language = "cuda"
    renderer = CUDARenderer

    def __init__(self) -> None:
        self.fallback = Fallback()
        self.schedules = {
            INJECTIVE: Injective(),
            REDUCTION: Reduction(),
            CONTRACTION: CudaContraction(),
        }

    def fused_rows(self, ctx: Context, first: Stage, rows: int, members: RowBodies) -> Stmt:
        """One block per row."""
        return fused_rows(ctx, first, rows, members)

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
