"""The tiled SIMT template with CUDA's asynchronous copies (`targets.gpu.schedule.tiles`, plus
`async_copy`): with `double`, on sm_80 and later, a raw side (a plain read of the
accumulator's type: float32 data) is not held in registers: the next slice is copied straight
into the other buffer by `cp.async` (a `vec` run along the tile's lanes as one 16-byte copy,
otherwise element by element, since the tile may be transposed), committed before the current
slice is computed and waited for after it; out-of-range elements are zero-filled by the copy.
A side whose prologue transforms its values keeps the register path. The knob exists only
where a side can be copied on the arch, so the spaces of other contractions are unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import ClassVar

from tunehub.compiler.analysis import Stage
from tunehub.compiler.dtypes import INDEX, itemsize
from tunehub.compiler.ir import Call, Expr, Load, substitute
from tunehub.compiler.loop import Stmt, add, const, seq
from tunehub.compiler.schedule.stage import Context
from tunehub.compiler.space.space import Config, Knob
from tunehub.schemas.target import Target
from tunehub.targets.cuda.limits import ASYNC_COPY, capability
from tunehub.targets.cuda.loop import ASYNC_SIZES, AsyncCopy
from tunehub.targets.gpu.schedule.contraction import planned
from tunehub.targets.gpu.schedule.operands import Operands
from tunehub.targets.gpu.schedule.tiles import SIDES, TILED, Shape, TiledContraction, TiledKernel
from tunehub.targets.gpu.schedule.vectors import VEC

TILED_ASYNC: dict[str, tuple[Knob, ...]] = {"async_copy": (False, True)}


@dataclass(frozen=True)
class AsyncShape(Shape):
    """The tiled kernel's knob values, and whether raw sides are copied by `cp.async`."""

    async_copy: bool = False

    @classmethod
    def of(cls, config: Config) -> AsyncShape:
        return cls(**asdict(Shape.of(config)), async_copy=bool(config.get("async_copy", False)))


def copyable(ops: Operands, side: str) -> Load | None:
    """`side`'s read where the side is that read of data of the accumulator's type (of a size
    `cp.async` copies): its tile can be copied raw."""
    load = ops.raw(side)
    if load is None or load.dtype != ops.acc or itemsize(ops.acc) not in ASYNC_SIZES:
        return None
    return load


def async_tiles(ops: Operands, target: Target) -> bool:
    """Whether `async_copy` has a side to copy on `target`."""
    return capability(target) >= ASYNC_COPY and any(copyable(ops, side) for side in SIDES)


class AsyncTiledKernel(TiledKernel):
    """The tiled kernel, its raw sides copied by `cp.async` where `async_copy` is set."""

    s: AsyncShape

    def _copied(self, side: str) -> Load | None:
        return copyable(self.ops, side) if self.s.async_copy else None

    def _fences(self) -> tuple[list[Stmt], list[Stmt]]:
        return [AsyncCopy("commit")], [AsyncCopy("wait")]

    def _copy(self, side: str, k0: Expr, buffer: Expr) -> Stmt:
        """This thread's share of raw `side`'s tile at k slice `k0` as `cp.async` copies into
        shared `buffer`, out-of-range elements zero-filled: a run along the tile's lanes in
        one copy, a run along k (a transposed tile) element by element."""
        ops = self.ops
        load = self.copied[side]
        assert load is not None
        run = VEC if self.vectors[side] is not None else 1
        start = self.row0 if side == "row" else self.col0
        size = itemsize(ops.acc)
        # (element, count) per copy; runs along k are element by element, 1 apart along k.
        pieces = [(n, 1) for n in range(run)] if ops.k_inner(side) else [(0, run)]
        tile, base = self.tiles[side], self._base(side, buffer)
        stmts: list[Stmt] = []
        for lane, kk in self._slots(side, run):
            position, k = add(start, lane), add(k0, kk)
            cond = self._bounds(side, position, k)
            for n, count in pieces:
                src = substitute(load, self._point(side, position, add(k, const(n))))
                assert isinstance(src, Load)
                valid: Expr | None = None
                if cond is not None:
                    valid = Call("where", (cond, const(count * size), const(0)), INDEX)
                at = add(base, self._offset(side, lane, kk, n))
                stmts.append(AsyncCopy("copy", tile, at, src, count * size, valid))
        return seq(stmts)


class CudaTiledContraction(TiledContraction):
    """The tiled SIMT kernel, with `async_copy` where a side can be copied on the arch."""

    knob_docs: ClassVar[Mapping[str, str]] = {
        **TiledContraction.knob_docs,
        "async_copy": "tiled: copy raw sides' next slices with cp.async (sm_80 and later)",
    }

    def knobs(self, stage: Stage, target: Target) -> dict[str, tuple[Knob, ...]]:
        return {**TILED, **(TILED_ASYNC if async_tiles(planned(stage), target) else {})}

    def shape(self, config: Config) -> AsyncShape:
        return AsyncShape.of(config)

    def copies_error(self, ops: Operands, shape: Shape, target: Target) -> str | None:
        assert isinstance(shape, AsyncShape)
        if shape.async_copy and not (shape.double and async_tiles(ops, target)):
            return "async_copy needs double, sm_80 or later and a side copied raw"
        return None

    def kernel(self, ops: Operands, config: Config, ctx: Context) -> Stmt:
        return AsyncTiledKernel(ops, self.shape(config), ctx).lower()
