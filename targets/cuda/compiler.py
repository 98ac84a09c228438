"""The CUDA target as the compiler sees it: CUDA C++ (`render`) with one kernel launch per
stage or fused row group (`launches`), SIMT, WMMA, wgmma and GEMV schedules (`schedule/`),
device limits per arch (`limits`) and the device columns of the features (`features`)."""

from __future__ import annotations

from collections.abc import Mapping

from tunehub.compiler.analysis import CONTRACTION, INJECTIVE, REDUCTION, Analysis, RowGroup
from tunehub.compiler.backend import CompilerBackend, RowBodies, arguments
from tunehub.compiler.kernel import Kernel
from tunehub.compiler.loop import Function, Stmt
from tunehub.compiler.schedule.stage import Context
from tunehub.compiler.space.space import Config, Knob
from tunehub.schemas.target import Target
from tunehub.targets.cuda import features
from tunehub.targets.cuda.launches import launches, metadata
from tunehub.targets.cuda.limits import block_error
from tunehub.targets.cuda.render import CUDARenderer
from tunehub.targets.cuda.schedule.blocks import WARP, fused_rows
from tunehub.targets.cuda.schedule.contraction import CudaContraction
from tunehub.targets.cuda.schedule.fallback import Fallback
from tunehub.targets.cuda.schedule.injective import Injective
from tunehub.targets.cuda.schedule.reduction import Reduction
from tunehub.targets.cuda.schedule.rows import cached_rows, with_cached_rows


class CudaCompiler(CompilerBackend):
    language = "cuda"
    renderer = CUDARenderer

    def __init__(self) -> None:
        self.fallback = Fallback()
        self.schedules = {
            INJECTIVE: [Injective()],
            REDUCTION: [Reduction()],
            CONTRACTION: [CudaContraction()],
        }

    group_knobs: Mapping[str, tuple[Knob, ...]] = {"cache": (False, True)}
    group_knob_docs: Mapping[str, str] = {
        "cache": "hold the rows the group reads more than once in shared memory, copied once",
    }

    def group_error(
        self, analysis: Analysis, group: RowGroup, target: Target, knobs: Config
    ) -> str | None:
        if not knobs["cache"]:
            return None
        rows = cached_rows(analysis, group)
        if not rows:
            return "cache: no input row is read by more than one stage"
        return block_error(target, WARP, sum(r.bytes for r in rows))

    def group_default(self, analysis: Analysis, group: RowGroup, target: Target) -> Config:
        """The rows cached where they can be."""
        cache = self.group_error(analysis, group, target, {"cache": True}) is None
        return {"cache": cache}

    def fused_rows(self, ctx: Context, group: RowGroup, knobs: Config, members: RowBodies) -> Stmt:
        """One block per row; the rows read more than once cached (`schedule.rows`)."""
        first = ctx.analysis.stages[group.first]
        if not knobs["cache"]:
            return fused_rows(ctx, first, group.rows, members)
        rows = cached_rows(ctx.analysis, group)
        return fused_rows(
            ctx, first, group.rows, lambda at: with_cached_rows(ctx, rows, at, members(at))
        )

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
