"""What the GPU contraction templates share, and the plain one.

A GPU kind lists one template per contraction kernel (CUDA: plain, tiled, gemv, wmma, wgmma,
`targets.cuda.compiler`); the union of those that apply (`compiler.schedule.union`) is the
stage's schedule, its `mode` knob picking the kernel. Each template (`Planned`) applies where
the CPU template's plan regroups the stage exactly (`plan.plan`): matmuls, batched matmuls,
dense layers, conv2d (implicit GEMM) and dequantizing matmuls alike, seen through the plan's
axis groups (`operands`), so prologues run where tiles are loaded and epilogues where they
are stored. Contractions the plan cannot regroup exactly (rounding inside the product) are
the reductions they also are (`compiler.backend.WIDER`): the GPU reduction schedule. A 16-bit
sum, whose terms round before they are summed (`Plan.term`, the MLC-LLM form of an int4
linear), gets the tiled and GEMV kernels, which round each product; tensor cores cannot.

`check` enforces the device limits (`limits`: threads, shared memory, a register estimate,
grid y/z extents, `grid_error`) and each tiling's divisibility rules. Inside a fused row group
a contraction is the plain kernel: no knob of its own.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping

from tunehub.compiler.analysis import Stage
from tunehub.compiler.ir import Expr, substitute
from tunehub.compiler.loop import Stmt, const, const_value
from tunehub.compiler.schedule.plan import describe, plan, plan_or_reason
from tunehub.compiler.schedule.stage import Context, Schedule
from tunehub.compiler.simplify import simplified
from tunehub.compiler.space.space import Config, Knob
from tunehub.schemas.target import Target
from tunehub.targets.gpu.limits import limits_for
from tunehub.targets.gpu.schedule.fallback import naive_kernel
from tunehub.targets.gpu.schedule.operands import Operands, operands


class Planned(Schedule):
    """A GPU contraction template: it applies where the plan does (and `unfit` finds nothing
    against it), and lowers its kernel from the stage's operands (`kernel`)."""

    def why_not(self, stage: Stage, target: Target) -> str | None:
        found = plan_or_reason(stage)
        if isinstance(found, str):
            return found
        return self.unfit(operands(stage, found), target)

    def unfit(self, ops: Operands, target: Target) -> str | None:
        """Why the kernel cannot compute these operands on `target`, or None."""
        return None

    def in_rows(self, stage: Stage, target: Target, config: Config, rows: int) -> Config | None:
        """Inside a fused row the stage is the plain kernel (`lower`): the union's naive."""
        return None

    def lower(self, stage: Stage, config: Config, ctx: Context, rows: tuple[Expr, ...]) -> Stmt:
        if rows:
            return naive_kernel(stage, ctx, rows)
        found = plan(stage)
        assert found is not None, "a contraction template lowers only where the plan applies"
        return self.kernel(operands(stage, found, ctx.analysis.program), config, ctx)

    @abstractmethod
    def kernel(self, ops: Operands, config: Config, ctx: Context) -> Stmt:
        """The kernel computing `ops` under `config` (the template's own knobs)."""


class PlainContraction(Planned):
    """The fallback kernel (one thread per output, a serial k loop): the naive config."""

    kind = "plain"
    mode_doc = "one thread per output"
    summary = "one thread per output, a serial k loop"
    resets_others = False  # one config, the naive one (see `Schedule.resets_others`)

    def why(self, stage: Stage, target: Target) -> str:
        """With the plan's axis groups, which every contraction template of the stage tiles."""
        found = plan(stage)
        assert found is not None
        return f"{self.summary} ({describe(found, stage)})"

    def knobs(self, stage: Stage, target: Target) -> dict[str, tuple[Knob, ...]]:
        return {}

    def naive(self, stage: Stage, target: Target) -> Config:
        return {}

    def default(self, stage: Stage, target: Target) -> Config | None:
        return None

    def in_rows(self, stage: Stage, target: Target, config: Config, rows: int) -> Config | None:
        return config

    def kernel(self, ops: Operands, config: Config, ctx: Context) -> Stmt:
        return naive_kernel(ops.stage, ctx, ())


def planned(stage: Stage) -> Operands:
    """The operands of a stage a `Planned` template applies to (the union asks no other)."""
    found = plan(stage)
    assert found is not None, "a contraction template is asked only where the plan applies"
    return operands(stage, found)


def bound(extent: Expr, symbols: Mapping[str, int]) -> int | None:
    """`extent` at the symbol values `symbols`, if that makes it a constant."""
    values: dict[str, Expr] = {name: const(value) for name, value in symbols.items()}
    return const_value(simplified(substitute(extent, values), set()))


def grid_error(ops: Operands, bm: int, target: Target, split: int = 1) -> str | None:
    """Why row tiles of `bm` (grid y) or batch x split-k slices (grid z) exceed the grid."""
    limits = limits_for(target)
    rows, batch = const_value(ops.rows.extent), const_value(ops.batch.extent)
    if rows is not None and -(-rows // bm) > limits.grid_yz:
        return f"{-(-rows // bm)} row tiles (grid y holds {limits.grid_yz})"
    if batch is not None and batch * split > limits.grid_yz:
        return f"{batch * split} batch x split-k slices (grid z holds {limits.grid_yz})"
    return None
