"""The tiling of a packed GEMM lowering: what one config decides before any loop is built (the
register tile and block sizes, the axis groups as the loops walk them, k's order and blocks,
which sides are packed), and the decisions the schedule's knobs and checks share with it
(vector lanes, k orders, whether the vector side can be read in place).
"""

from __future__ import annotations

from dataclasses import dataclass

from tunehub.compiler.analysis import Stage
from tunehub.compiler.ir import Expr, loads
from tunehub.compiler.loop import as_expr, const, const_value
from tunehub.compiler.schedule.plan import Group, Plan
from tunehub.compiler.schedule.stage import Loop
from tunehub.compiler.schedule.vectorize import depends, vectorize
from tunehub.compiler.space.space import Config
from tunehub.schemas.target import Target
from tunehub.targets.cpu.isa import vector_widths


def lanes_of(target: Target, acc: str) -> int:
    """Elements of `acc` per vector register (1 where the target has no vectors)."""
    widths = vector_widths(target, acc)
    return widths[-1] if widths else 1


def vector_kind(lanes: int) -> tuple[str, int]:
    """The kind and factor of a loop whose iterations write distinct elements."""
    return ("vectorize", lanes) if lanes > 1 else ("serial", 0)


def vector_loop(name: str, extent: Expr, lanes: int) -> Loop:
    """A loop whose iterations write distinct elements, vectorized by `lanes` where it can."""
    return Loop(name, extent, *vector_kind(lanes))


def unpacked_columns(stage: Stage, found: Plan, vec_side: str, nr: int, lanes: int) -> str | None:
    """Why the vector side cannot be read in place (None if it can): its group must be one
    axis of a constant extent that whole tiles cover, read with contiguous vector loads."""
    axes = found.rhs_axes if vec_side == "rhs" else found.lhs_axes
    if len(axes) != 1 or lanes == 1:
        return "unpacked columns need a single column axis and vector registers"
    (axis,) = axes
    size = stage.shape[stage.axes.index(axis)]
    if not isinstance(size, int) or size % nr:
        return f"unpacked columns need whole {nr}-wide tiles across {axis} ({size})"
    side = found.rhs if vec_side == "rhs" else found.lhs
    if vectorize(side, axis, lanes) is None:
        return f"unpacked columns need contiguous reads along {axis}"
    return None


def k_orders(stage: Stage, lhs: Expr, rhs: Expr) -> dict[str, tuple[str, ...]]:
    """The orders the reduce axes can be flattened in (the sum is the same in any): as the
    signature gives them, and as each factor side reads them most contiguously (the axes it
    indexes in inner tensor dimensions last); equal orders in some forms, so that every
    form of a computation has the same knobs. An NHWC convolution's
    data side reads channels contiguously, its weights the filter window: a k run over the
    channels packs with vector loads, one over the window with strided ones."""
    given = tuple(r.name for r in stage.anchor.reduce_axes)
    return {"given": given, "lhs": _contiguous(lhs, given), "rhs": _contiguous(rhs, given)}


def _contiguous(side: Expr, axes: tuple[str, ...]) -> tuple[str, ...]:
    def depth(axis: str) -> int:  # the innermost dimension (-1: the last) indexed by it
        dims = [
            n - len(ld.indices)
            for ld in loads(side)
            for n, index in enumerate(ld.indices)
            if depends(index, (axis,))
        ]
        return max(dims, default=-len(axes) - 1)

    return tuple(sorted(axes, key=depth))


@dataclass(frozen=True)
class Tiling:
    """How one config tiles one contraction stage (see `contraction` for the knobs): an
    `mr` x `nr` register tile (`nv` vectors of `lanes`), blocks of `mb` x `nb` tiles, the
    row and column groups without the axes an enclosing loop fixes, k in its order and in
    blocks of `kc` (0: one block), and the sides as the loops read them."""

    lanes: int
    acc: str
    term: str | None  # what each product rounds to before it is summed (`Plan.term`)
    mr: int
    nv: int
    mb: int
    nb: int
    pack_rows: str  # the broadcast side's panel layout, or "none": read in place
    pack_cols: bool
    parallel: int  # outer loops collapsed into one parallel loop
    unroll: int
    cols_outer: bool  # the column panels' loop outside the row panels'
    prefetch: int
    fixed: dict[str, Expr]  # axes an enclosing loop (a fused row group) or extent 1 fixes
    row: Group
    col: Group
    row_side: Expr  # the broadcast side
    col_side: Expr  # the vector side
    k: Group
    kc: int
    batch: tuple[tuple[str, Expr], ...]  # the other spatial axes, one loop each
    # With one k block, a thread's consecutive row blocks of one column block read the
    # same column panels: packed once, not once per row block (a convolution's weights
    # are a strided gather, and repacking them per block cost more than the im2col).
    reuse_cols: bool

    @property
    def nr(self) -> int:
        return self.nv * self.lanes

    @property
    def mc(self) -> int:
        return self.mb * self.mr

    @property
    def nc(self) -> int:
        return self.nb * self.nr

    @property
    def k_stride(self) -> Expr:
        """The k extent of a packed panel: one k block, or all of k."""
        return const(self.kc) if self.kc else self.k.extent


def tiling(
    stage: Stage, found: Plan, relaid: Plan, config: Config, lanes: int, rows: tuple[Expr, ...]
) -> Tiling:
    """The tiling of `stage` under `config`, inside a fused row group where `rows` index
    its leading axes. `relaid` is `found` with its sides reading the relayout's copies
    (`found` itself without one): the loops and k's orders read those, while whether the
    vector side can be read in place is the schedule's check's, on the stage's own reads."""
    mr, nv = int(config["mr"]), int(config["nv"])
    vec_side = str(config["vec_side"])
    # A column axis an enclosing row loop fixes is read lane by lane: pack it.
    reason = unpacked_columns(stage, found, vec_side, nv * lanes, lanes)
    pack_cols = bool(config["pack_cols"]) or reason is not None or bool(rows)
    # Axes an enclosing loop already iterates (a fused row group) are fixed, not looped.
    fixed = dict(zip(stage.axes, rows, strict=False))
    fixed.update({a: const(0) for a in found.unit_axes if a not in fixed})
    shape = {a: as_expr(e) for a, e in zip(stage.axes, stage.shape, strict=True)}
    sides = {"lhs": (found.lhs_axes, relaid.lhs), "rhs": (found.rhs_axes, relaid.rhs)}
    (row_axes, row_side) = sides["lhs" if vec_side == "rhs" else "rhs"]
    (col_axes, col_side) = sides[vec_side]
    free_rows = tuple(a for a in row_axes if a not in fixed)
    free_cols = tuple(a for a in col_axes if a not in fixed)
    extents = {r.name: as_expr(r.extent) for r in stage.anchor.reduce_axes}
    order = k_orders(stage, relaid.lhs, relaid.rhs)[str(config.get("k_order", "given"))]
    k = Group(order, tuple(extents[a] for a in order))
    grouped = set(row_axes) | set(col_axes) | set(fixed)
    k_total = const_value(k.extent)
    kc = int(config["kc"])
    kc = kc if kc and (k_total is None or kc < k_total) else 0  # 0: one k block
    return Tiling(
        lanes=lanes,
        acc=found.acc,
        term=found.term,
        mr=mr,
        nv=nv,
        mb=int(config["mb"]),
        nb=int(config["nb"]),
        pack_rows=str(config["pack_rows"]),
        pack_cols=pack_cols,
        parallel=0 if rows else int(config["parallel"]),
        unroll=int(config["unroll"]),
        cols_outer=config["tile_order"] == "cols",
        prefetch=int(config["prefetch"]),
        fixed=fixed,
        row=Group(free_rows, tuple(shape[a] for a in free_rows)),
        col=Group(free_cols, tuple(shape[a] for a in free_cols)),
        row_side=row_side,
        col_side=col_side,
        k=k,
        kc=kc,
        batch=tuple((a, shape[a]) for a in stage.axes if a not in grouped),
        reuse_cols=pack_cols and not kc and not rows,
    )
