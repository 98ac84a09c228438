"""The stage-schedule interface, and the loop-building pieces every schedule shares.

A `Schedule` turns one analysis `Stage` (see `compiler.analysis`) and its knob values into
loop IR (`compiler.loop`). The program's space is the product of its stages' knobs, each
prefixed with the stage (`s0.parallel`); `compiler.lower` lowers stage after stage.

A target kind lists, per stage class, its *templates*: one `Schedule` per kernel
(`CompilerBackend.schedules`). A stage's schedule is the union of those that apply to it
(`compiler.schedule.union`, itself a `Schedule`), which adds a `mode` knob where several do.
To write a template (e.g. `contraction.py`), subclass `Schedule` and implement:

* `knobs(stage, target)`: every knob's candidate values (the first value need not be the
  naive one);
* `naive(stage, target)`: the config that lowers to the loop nest as written, i.e. exactly
  `plain_nest` (serial, scalar, untiled: the baseline tuned kernels are compared with);
* `default(stage, target)`: a good config without search (None: the template is not the
  kernel a stage gets without search, the union asks the next);
* `check(stage, target, config)`: why a config (already known to hold only listed values)
  is invalid, or None. Anything that would fail to lower or compile must be caught here;
* `canonical(stage, target, config)` (optional): the config with the knobs it leaves unused
  at their first values, where some knobs make others irrelevant, so that sampling and
  mutation reach every form and one kernel has one config;
* `lower(stage, config, ctx, rows)`: the statements computing the stage. `rows` are index
  expressions for the stage's leading axes when an enclosing loop (a fused row group) already
  iterates over them: loop over the remaining axes only, and open no parallel loop then.

and, where it does not fit every stage of its class or shares the class with others,
`why_not`, `offered`, `priority`, `exclusive`, `resets_others` (see each). A template sees
only its own knobs; templates of one class name their knobs apart.

Scratch buffers (packing, per-thread tiles) come from `ctx.scratch`, names of loop variables
and locals from `ctx.fresh`. Values follow `compiler.dtypes`: accumulate in
`compute_dtype(anchor.dtype)`, cast each reduce term with `Cast(anchor.term, body)`, and store
`stage.finish(value, index)` (which rounds and applies the epilogue).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

from tunehub.compiler import dtypes
from tunehub.compiler.analysis import Analysis, Stage
from tunehub.compiler.ir import Binary, Call, Cast, Const, Expr, Extent, Load, Var
from tunehub.compiler.loop import (
    Assign,
    Decl,
    For,
    Namer,
    Stmt,
    Store,
    Workspace,
    add,
    as_expr,
    ceildiv,
    const,
    const_value,
    hoist_loads,
    minimum,
    mul,
    seq,
    stmts,
    sub,
    var,
)
from tunehub.schemas.target import Target

if TYPE_CHECKING:  # the space package loads the backends, which load the schedules
    from tunehub.compiler.space.space import Config, Knob


@dataclass
class Context:
    """What lowering one program needs besides the stage: its analysis, target, a name
    source, and the workspaces collected so far."""

    analysis: Analysis
    target: Target
    namer: Namer
    workspaces: list[Workspace] = field(default_factory=list)

    def fresh(self, base: str) -> str:
        return self.namer(base)

    def scratch(
        self,
        base: str,
        dtype: str,
        shape: tuple[Extent, ...],
        per_thread: bool = False,
        zeroed: bool = False,
    ) -> str:
        """A new workspace buffer; its (fresh) name."""
        name = self.namer(base)
        self.workspaces.append(Workspace(name, dtype, shape, per_thread, zeroed))
        return name


class Schedule(ABC):
    """The knobs of one stage class and how a config of them lowers (see module doc).

    `kind` names the kernel in a word: its value of the union's `mode` knob where its class
    lists several templates (`mode_doc`, if given, follows it in that knob's doc). `summary`
    says in one line what kernel the schedule writes, and `knob_docs` what each of its knobs
    means (`tunehub explain` prints both, and docs/knobs.md lists them)."""

    kind: str
    summary: ClassVar[str] = ""
    knob_docs: ClassVar[Mapping[str, str]] = {}
    mode_doc: ClassVar[str] = ""
    # Where several templates of a class apply, the union asks them for seeds and for the
    # default highest first (list order among equals): the kernels to measure first.
    priority: ClassVar[int] = 0
    # Whether choosing this template resets the other templates' knobs to their first values
    # (`canonical`). False for a template that is one config, the naive one (measured first
    # anyway), which random draws would otherwise pick as often as any whole other kernel.
    resets_others: ClassVar[bool] = True

    def why(self, stage: Stage, target: Target) -> str:
        """One line: why this stage gets this schedule's space."""
        return self.summary

    def title(self, stage: Stage, target: Target) -> str:
        """The schedule's name as `tunehub explain` prints it."""
        return type(self).__name__

    def knob_doc(self, stage: Stage, target: Target, knob: str) -> str:
        """What knob `knob` of `stage`'s config means ("" where undocumented)."""
        return self.knob_docs.get(knob, "")

    def why_not(self, stage: Stage, target: Target) -> str | None:
        """Why this template cannot compute `stage` on `target` (the union leaves it out),
        or None where it can."""
        return None

    def offered(self, stage: Stage, target: Target) -> bool:
        """Whether the union's `mode` offers this template for `stage`. One that applies but
        is not offered keeps its knobs in the space, at their first values only."""
        return True

    @abstractmethod
    def knobs(self, stage: Stage, target: Target) -> dict[str, tuple[Knob, ...]]: ...

    @abstractmethod
    def naive(self, stage: Stage, target: Target) -> Config: ...

    @abstractmethod
    def default(self, stage: Stage, target: Target) -> Config | None: ...

    def seeds(self, stage: Stage, target: Target, symbols: Mapping[str, int]) -> list[Config]:
        """Configs worth measuring early (`Space.seeds`) for a tuning measured at `symbols`;
        invalid ones are dropped."""
        return []

    def exclusive(self, stage: Stage, target: Target, symbols: Mapping[str, int]) -> bool:
        """Whether this template's seeds are the only ones worth measuring at `symbols` (a
        GEMV at a few rows: no tile kernel competes), so the union offers no other's."""
        return False

    def check(self, stage: Stage, target: Target, config: Config) -> str | None:
        return None

    def canonical(self, stage: Stage, target: Target, config: Config) -> Config:
        return config

    def in_rows(self, stage: Stage, target: Target, config: Config, rows: int) -> Config | None:
        """`config` for the stage computed inside a fused row group's loop over its first
        `rows` axes, with the knobs that leave that kernel unchanged (its own parallel
        loops, say) at their first values, so that one kernel has one config. None where the
        template has no kernel of its own there: the union's naive config then."""
        return config

    @abstractmethod
    def lower(self, stage: Stage, config: Config, ctx: Context, rows: tuple[Expr, ...]) -> Stmt: ...


def first_values(knobs: dict[str, tuple[Knob, ...]]) -> Config:
    """Every knob at its first candidate: the naive config of the schedules whose knobs list
    the plain choice first."""
    return {name: values[0] for name, values in knobs.items()}


# ----------------------------------------------------------------------------- loop building


@dataclass(frozen=True)
class Loop:
    """A loop to be built by `nest`: its variable, extent, kind and factor."""

    var: str
    extent: Expr
    kind: str = "serial"
    factor: int = 0
    reduction: tuple[tuple[str, str], ...] = ()


def nest(loops: Sequence[Loop], body: Stmt) -> Stmt:
    """`loops` nested outermost first around `body`."""
    for loop in reversed(loops):
        body = For(
            loop.var, loop.extent, body, loop.kind, factor=loop.factor, reduction=loop.reduction
        )
    return body


@dataclass(frozen=True)
class Split:
    """An axis of `extent` split into `outer` tiles of `tile` and an `inner` remainder loop:
    the index is `outer * tile + inner`, and the inner extent is `tile` except in a partial
    last tile."""

    outer: str
    inner: str
    extent: Expr
    tile: int

    @property
    def outer_extent(self) -> Expr:
        return ceildiv(self.extent, self.tile)

    @property
    def inner_extent(self) -> Expr:
        total = const_value(self.extent)
        if total is not None and total % self.tile == 0:
            return const(self.tile)
        return minimum(const(self.tile), sub(self.extent, mul(var(self.outer), const(self.tile))))

    @property
    def index(self) -> Expr:
        return add(mul(var(self.outer), const(self.tile)), var(self.inner))


def split(ctx: Context, axis: str, extent: Expr, tile: int) -> Split:
    return Split(ctx.fresh(f"{axis}o"), ctx.fresh(f"{axis}i"), extent, tile)


def hoisted(stage: Stage, ctx: Context, loop: Stmt) -> Stmt:
    """`loop`, if it holds a vectorized loop, with the stage's reads that do not change inside
    it held in locals before it (see `loop.hoist_loads`). Scalar loops stay as written."""
    if not isinstance(loop, For) or not any(
        isinstance(s, For) and s.kind == "vectorize" for s in stmts(loop)
    ):
        return loop
    return hoist_loads(loop, ctx.fresh, {ld.tensor for ld in stage.reads()})


# ----------------------------------------------------------------------------- reductions


def identity(op: str, dtype: str) -> Const:
    """The starting value of a reduce `op` accumulated in `dtype` (a compute dtype)."""
    if dtype == "bool":
        return Const(op in ("prod", "min"), dtype)
    if op in ("sum", "prod"):
        return Const(0 if op == "sum" else 1, dtype)
    if dtypes.is_float(dtype):
        return Const(float("-inf") if op == "max" else float("inf"), dtype)
    bits = dtypes.BITS[dtype]
    if dtypes.is_signed(dtype):
        return Const(-(2 ** (bits - 1)) if op == "max" else 2 ** (bits - 1) - 1, dtype)
    return Const(0 if op == "max" else 2**bits - 1, dtype)


def combine(op: str, acc: Expr, term: Expr) -> Expr:
    """`acc` updated with `term` (both of `acc`'s dtype) by reduce `op`."""
    if op in ("sum", "prod"):
        return Binary("+" if op == "sum" else "*", acc, term, acc.dtype)
    return Call(op, (acc, term), acc.dtype)


def accumulator_dtype(stage: Stage) -> str:
    return dtypes.compute_dtype(stage.anchor.dtype)


def term(stage: Stage, index: dict[str, Expr]) -> Expr:
    """One reduce term: the body at `index`, cast to the anchor's term dtype."""
    return Cast(stage.anchor.term, stage.body_at(index))


def keep(stage: Stage, index: Mapping[str, Expr], value: Expr) -> tuple[list[Stmt], Expr]:
    """The statements to run before a term (or a vector of terms from `index` on) is
    accumulated, and the value to accumulate: where the stage keeps its terms
    (`Stage.keeps`), `value` stored into that output at `index` and read back from it."""
    if stage.keeps is None:
        return [], value
    at = tuple(index[a] for a in (*stage.axes, *(r.name for r in stage.anchor.reduce_axes)))
    return [Store(stage.keeps, at, value)], Load(stage.keeps, at, value.dtype)


# ----------------------------------------------------------------------------- the plain nest


def plain_nest(stage: Stage, ctx: Context, rows: tuple[Expr, ...]) -> Stmt:
    """The stage as written: serial loops over its axes, then (for a reduction) an
    accumulator and serial loops over its reduce axes. The naive baseline and the fallback."""
    index = dict(zip(stage.axes, rows, strict=False))
    loops = []
    for axis, size in list(zip(stage.axes, stage.shape, strict=True))[len(rows) :]:
        loops.append(Loop(ctx.fresh(axis), as_expr(size)))
        index[axis] = var(loops[-1].var)
    return nest(loops, reduce_body(stage, ctx, index, []))


def reduce_body(stage: Stage, ctx: Context, index: dict[str, Expr], kinds: list[Loop]) -> Stmt:
    """Compute and store one output element at `index`: for an injective stage the finished
    body; for a reduction an accumulator over the reduce axes, whose loops are given by
    `kinds` (innermost last, by position; missing entries are serial) with `var` ignored."""
    spatial = tuple(index[a] for a in stage.axes)
    if stage.anchor.reduce_op is None:
        return Store(stage.buffer, spatial, stage.finish(stage.body_at(index), index))
    acc = ctx.fresh("acc")
    dtype = accumulator_dtype(stage)
    op = stage.anchor.reduce_op
    reduce_index = dict(index)
    loops = []
    for n, axis in enumerate(stage.anchor.reduce_axes):
        spec = kinds[n] if n < len(kinds) else Loop("", const(0))
        loop_var = ctx.fresh(axis.name)
        reduction = ((op, acc),) if spec.kind in ("parallel", "vectorize") else ()
        loops.append(Loop(loop_var, as_expr(axis.extent), spec.kind, spec.factor, reduction))
        reduce_index[axis.name] = var(loop_var)
    acc_var = Var(acc, dtype)
    stores, value = keep(stage, reduce_index, term(stage, reduce_index))
    update = seq(*stores, Assign(acc, combine(op, acc_var, value)))
    return seq(
        Decl(acc, dtype, init=identity(op, dtype)),
        hoisted(stage, ctx, nest(loops, update)),
        Store(stage.buffer, spatial, stage.finish(acc_var, index)),
    )
