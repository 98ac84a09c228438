"""The CPU target as the compiler sees it: C with OpenMP (`render`), the packed GEMM (on
fmas, or on the target's dot-product engines), reduction, injective and flash-attention
schedules (`schedule/`), and the roofline of a core as the estimate a search starts from."""

from __future__ import annotations

from collections.abc import Mapping

from tunehub.compiler.analysis import CONTRACTION, INJECTIVE, REDUCTION, Analysis, RowGroup
from tunehub.compiler.attention import ATTENTION
from tunehub.compiler.backend import CompilerBackend, RowBodies
from tunehub.compiler.cost_model import roofline
from tunehub.compiler.cost_model.cost_model import Estimate
from tunehub.compiler.loop import Stmt
from tunehub.compiler.schedule.stage import Context
from tunehub.compiler.space.space import Config, Knob
from tunehub.schemas.target import Target
from tunehub.targets.cpu.render import CRenderer
from tunehub.targets.cpu.schedule import rows
from tunehub.targets.cpu.schedule.attention import FlashAttention
from tunehub.targets.cpu.schedule.contraction import PackedGemm
from tunehub.targets.cpu.schedule.engine import DotGemm
from tunehub.targets.cpu.schedule.fallback import Fallback
from tunehub.targets.cpu.schedule.injective import Injective
from tunehub.targets.cpu.schedule.reduction import Reduction


class CpuCompiler(CompilerBackend):
    language = "c"
    renderer = CRenderer
    one_pass = True  # a fused row merges sibling sums' loops (`schedule.rows.siblings`)
    keep_terms = True  # every reduction schedule stores kept terms (`schedule.stage.keep`)

    def __init__(self) -> None:
        self.fallback = Fallback()
        self.schedules = {
            INJECTIVE: [Injective()],
            REDUCTION: [Reduction()],
            CONTRACTION: [PackedGemm(), DotGemm()],
            ATTENTION: [FlashAttention()],
        }

    group_knobs: Mapping[str, tuple[Knob, ...]] = {
        "prefetch": (False, True),
        "pipeline": (0, 16, 64),
    }
    group_knob_docs: Mapping[str, str] = {
        "prefetch": "prefetch the next row's inputs, a cache line at a time, while this row's "
        "results are stored",
        "pipeline": "rows in blocks of this many, each row's first stage computed in step with "
        "the last stage of the row before (0, or loops with no common chunks: row after row)",
    }

    def group_error(
        self, analysis: Analysis, group: RowGroup, target: Target, knobs: Config
    ) -> str | None:
        if knobs["pipeline"] and knobs["prefetch"]:
            return "pipeline: a pipelined row loads the next row itself (prefetch adds nothing)"
        return None

    def group_default(self, analysis: Analysis, group: RowGroup, target: Target) -> Config:
        return {"prefetch": False, "pipeline": 64}

    def fused_rows(self, ctx: Context, group: RowGroup, knobs: Config, members: RowBodies) -> Stmt:
        """One parallel loop nest over the rows (`schedule.rows`)."""
        return rows.fused_rows(ctx, group, knobs, members)

    def zero_data_estimate(self) -> Estimate | None:
        return roofline.estimate


BACKEND = CpuCompiler()
