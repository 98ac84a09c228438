"""The part of a compiler facet every GPU kind shares: its device limits per target (which
the GPU schedules check configs against, `limits.limits_for`), and a fused row group as one
block per row, the rows it reads more than once optionally cached in shared memory (the
group's `cache` knob, `schedule.rows`)."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping

from tunehub.compiler.analysis import Analysis, RowGroup
from tunehub.compiler.backend import CompilerBackend, RowBodies
from tunehub.compiler.loop import Stmt
from tunehub.compiler.schedule.stage import Context
from tunehub.compiler.space.space import Config, Knob
from tunehub.schemas.target import Target
from tunehub.targets.gpu.limits import WARP, DeviceLimits, block_error
from tunehub.targets.gpu.schedule.blocks import fused_rows
from tunehub.targets.gpu.schedule.rows import cached_rows, with_cached_rows


class GpuCompiler(CompilerBackend):
    """A GPU kind's compiler facet: one kernel launch per stage or fused row group."""

    group_knobs: Mapping[str, tuple[Knob, ...]] = {"cache": (False, True)}
    group_knob_docs: Mapping[str, str] = {
        "cache": "hold the rows the group reads more than once in shared memory, copied once",
    }

    @abstractmethod
    def limits(self, target: Target) -> DeviceLimits:
        """What a block may use on `target`'s device (`limits`)."""

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
