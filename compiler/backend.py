"""What the compiler asks of a target kind: its language and renderer, its stage schedules,
how a fused row group is laid out, the kernel it packages, and its device features.

Each kind's `compiler` facet (`tunehub.targets.<kind>.compiler.BACKEND`, found through
`schemas.target.kinds`) implements this; the compiler never tests a kind by name.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from tunehub.compiler import attention
from tunehub.compiler.analysis import CONTRACTION, REDUCTION, Analysis, RowGroup, Stage
from tunehub.compiler.ir import Expr
from tunehub.compiler.kernel import Kernel, KernelArg
from tunehub.compiler.loop import Function, Stmt
from tunehub.compiler.schedule.union import Union
from tunehub.schemas.target import Target, kind_of

if TYPE_CHECKING:
    from tunehub.compiler.cost_model.cost_model import Estimate
    from tunehub.compiler.render.cstyle import CStyleRenderer
    from tunehub.compiler.schedule.stage import Context, Schedule
    from tunehub.compiler.space.space import Config, Knob

# Lowers the member stages of a fused row group at a row's index expressions.
RowBodies = Callable[[tuple[Expr, ...]], list[Stmt]]

# The class whose templates compute a stage of another where none of its own applies: a
# contraction the plan cannot regroup exactly is the reduction it also is.
WIDER = {CONTRACTION: REDUCTION}


class CompilerBackend(ABC):
    """One target kind, as the compiler sees it: `schedules`, the templates of each stage
    class (`analysis.KINDS`, and `attention.ATTENTION` for whole attention chains) in the
    order the union offers them (a new kernel is one template module and its entry here),
    and the `fallback` that computes any stage (every schedule's naive config lowers to it)."""

    language: str  # the kernels' language: `Kernel.language`, and the artifact's
    renderer: type[CStyleRenderer]
    schedules: Mapping[str, Sequence[Schedule]]
    fallback: Schedule

    def schedule(self, stage: Stage) -> Union:
        """The schedule of `stage` on this kind: the union of its class's templates that
        apply (`schedule.union`); where none does, those of the class it also belongs to
        (`WIDER`), else the fallback."""
        return self._union(stage.kind)

    def _union(self, kind: str) -> Union:
        wider = WIDER.get(kind)
        otherwise = self.fallback if wider is None else self._union(wider)
        return Union(self.schedules.get(kind, ()), otherwise)

    # Whether the analysis splits each variance into two sums that need no mean
    # (`analysis.analyze`'s `one_pass`): where a fused row runs sibling sums in one loop.
    one_pass: bool = False

    def chains(self, analysis: Analysis, target: Target) -> tuple[Stage, ...]:
        """The attention stages (`compiler.attention.chains`) of `analysis` that a template of
        this kind's `attention.ATTENTION` class computes in one pass."""
        templates = self.schedules.get(attention.ATTENTION, ())
        return tuple(
            chain
            for chain in attention.chains(analysis)
            if any(t.why_not(chain, target) is None for t in templates)
        )

    # Whether a reduction stores its costly terms into the output that computes them again,
    # which reads them back (`analysis.analyze`'s `keep_terms`): where every reduction
    # schedule stores them (`schedule.stage.keep`).
    keep_terms: bool = False

    # Knobs of a fused row group besides `fuse` (in a space: `g<n>.<name>`; first values
    # while the group is not fused), and one line on each.
    group_knobs: Mapping[str, tuple[Knob, ...]] = {}
    group_knob_docs: Mapping[str, str] = {}

    def group_error(
        self, analysis: Analysis, group: RowGroup, target: Target, knobs: Config
    ) -> str | None:
        """Why a fused group's own knob values (`group_knobs`, unprefixed) are invalid."""
        return None

    def group_default(self, analysis: Analysis, group: RowGroup, target: Target) -> Config:
        """The fused group's own knob values in the space's default."""
        return {name: values[0] for name, values in self.group_knobs.items()}

    @abstractmethod
    def fused_rows(self, ctx: Context, group: RowGroup, knobs: Config, members: RowBodies) -> Stmt:
        """The statement computing a fused row group: its `rows` leading axes iterated once,
        each row running every member stage (`members(index)`), laid out by the group's own
        knob values (`knobs`)."""

    def kernel(self, fn: Function) -> Kernel:
        """`fn` rendered, with its calling convention (the C ABI of `compiler.kernel`)."""
        return Kernel(self.language, self.renderer().render(fn), fn.name, arguments(fn), fn.symbols)

    def device_features(
        self, fn: Function, target: Target, symbols: Mapping[str, int]
    ) -> dict[str, float]:
        """The device columns of a feature vector (`features.DEVICE_FEATURES`) this kind
        can estimate from the loop IR; the rest stay 0."""
        return {}

    def zero_data_estimate(self) -> Estimate | None:
        """A latency estimate the search may rank candidates by before any timing of this
        kind exists (the roofline of a CPU core); None where none is validated."""
        return None


def arguments(fn: Function) -> tuple[KernelArg, ...]:
    args = tuple(KernelArg(b.name, b.shape, b.dtype, "input") for b in fn.inputs)
    return args + tuple(KernelArg(b.name, b.shape, b.dtype, "output") for b in fn.outputs)


def compiler_backend(target: Target | str) -> CompilerBackend:
    """The compiler facet of a target (or of a kind, by name)."""
    backend: CompilerBackend = kind_of(target if isinstance(target, str) else target.kind).facet(
        "compiler"
    )
    return backend


def schedule_for(stage: Stage, target: Target) -> Union:
    """The schedule of `stage` on `target`."""
    return compiler_backend(target).schedule(stage)


def render(fn: Function, kind: str = "cpu") -> str:
    """Source text of `fn` in the language of target kind `kind`."""
    return compiler_backend(kind).renderer().render(fn)
