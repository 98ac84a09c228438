"""The Hopper warpgroup tensor-core template (`mode="wgmma"`, sm_90 only, built for sm_90a;
the kernel is `wgmma`): where `wmma` applies, block tile `wgmma_bm x wgmma_bn` over
`wgmma_groups` warpgroups (each a whole number of 64-row slabs), k slices of 64 through a
`cp.async` pipeline of `wgmma_stages` buffers, `wgmma_in_flight` slices of products left
running while the next slice starts, blocks ordered in groups of `wgmma_raster` row tiles, and
with `wgmma_producer` one more warpgroup that only loads (`wgmma_prefetch`, where a side is
evaluated rather than copied: its reads a slice ahead; `wgmma_tiles`: tiles per block,
computed in turn; `wgmma_pingpong`: each consumer warpgroup computes whole tiles, the two in
turn; `wgmma_tma`, where a side is copied as it is: the copy engine brings its tiles, one
thread issuing them; `wgmma_store`: the tile leaves through shared memory and the copy
engine). Not the default, but its seeds come first in a tuning after the GEMV's (H100,
4096^3 float16: 284 us, against 455 for WMMA and 6.4 ms tiled).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from tunehub.compiler.analysis import Stage
from tunehub.compiler.loop import Stmt, const_value
from tunehub.compiler.schedule.stage import Context, first_values
from tunehub.compiler.space.space import Config, Knob
from tunehub.schemas.target import Target
from tunehub.targets.cuda.schedule.staging import evaluated
from tunehub.targets.cuda.schedule.tma import tensor_output, tensor_sides
from tunehub.targets.cuda.schedule.wgmma import WgmmaKernel
from tunehub.targets.cuda.schedule.wgmma_shape import WgmmaShape, warpgroup_mma
from tunehub.targets.cuda.schedule.wmma import no_tensor_cores
from tunehub.targets.gpu.limits import block_error, limits_for
from tunehub.targets.gpu.schedule.contraction import Planned, bound, grid_error, planned
from tunehub.targets.gpu.schedule.operands import Operands

WGMMA: dict[str, tuple[Knob, ...]] = {
    "wgmma_bm": (128, 64, 256),
    "wgmma_bn": (128, 64, 256),
    "wgmma_groups": (1, 2),
    "wgmma_stages": (3, 2, 4, 5, 6),
    "wgmma_in_flight": (0, 1),
    "wgmma_raster": (1, 8),
    "wgmma_producer": (False, True),
    "wgmma_tiles": (1, 2, 4, 8, 16),
    "wgmma_pingpong": (False, True),
}
WGMMA_PREFETCH: dict[str, tuple[Knob, ...]] = {"wgmma_prefetch": (False, True)}
WGMMA_TMA: dict[str, tuple[Knob, ...]] = {"wgmma_tma": (False, True)}
WGMMA_STORE: dict[str, tuple[Knob, ...]] = {"wgmma_store": (False, True)}
# (bm, bn, stages, in flight, producer, pingpong) of the seeds, fastest first where measured
# (see `WgmmaContraction.seeds`).
WGMMA_SEEDS = (
    (128, 256, 4, 1, False, False),
    (256, 128, 4, 0, True, False),
    (128, 256, 3, 0, True, False),
    (128, 128, 4, 1, True, True),
    (128, 128, 3, 0, False, False),
)


class WgmmaContraction(Planned):
    """The wgmma kernel (see the module doc)."""

    kind = "wgmma"
    priority = 2  # its seeds come after the GEMV's, before WMMA's
    summary = "wgmma warpgroup tensor cores: 64-row slabs per warpgroup, swizzled shared tiles"
    knob_docs: ClassVar[Mapping[str, str]] = {
        "wgmma_bm": "wgmma: rows of the block tile",
        "wgmma_bn": "wgmma: columns of the block tile",
        "wgmma_groups": "wgmma: consumer warpgroups per block",
        "wgmma_stages": "wgmma: shared buffers of the k-slice pipeline",
        "wgmma_in_flight": "wgmma: slices of products left running while the next starts",
        "wgmma_raster": "wgmma: row tiles per group of the block order (0: row order)",
        "wgmma_producer": "wgmma: one more warpgroup that only loads",
        "wgmma_prefetch": "wgmma: the producer reads an evaluated side's next slice ahead",
        "wgmma_tiles": "wgmma: tiles per block, in turn (the producer runs on into the next)",
        "wgmma_tma": "wgmma: the copy engine (TMA) brings the tiles of the sides copied as is",
        "wgmma_pingpong": "wgmma: each consumer warpgroup computes whole tiles, the two in turn",
        "wgmma_store": "wgmma: the tile leaves through shared memory and the copy engine (TMA)",
    }

    def unfit(self, ops: Operands, target: Target) -> str | None:
        reason = no_tensor_cores(ops, target)
        if reason is None and not warpgroup_mma(target, ops):
            return "no warpgroup MMA on this arch (sm_90 only)"
        return reason

    def knobs(self, stage: Stage, target: Target) -> dict[str, tuple[Knob, ...]]:
        ops = planned(stage)
        knobs = dict(WGMMA)
        if evaluated(ops):
            knobs.update(WGMMA_PREFETCH)
        if tensor_sides(ops):
            knobs.update(WGMMA_TMA)
        if tensor_output(ops):
            knobs.update(WGMMA_STORE)
        return knobs

    def naive(self, stage: Stage, target: Target) -> Config:
        return first_values(self.knobs(stage, target))

    def default(self, stage: Stage, target: Target) -> Config | None:
        return None

    def seeds(self, stage: Stage, target: Target, symbols: Mapping[str, int]) -> list[Config]:
        """Fastest first at 4096^3 float16 on an H100 (epilogues storing column pairs): 128 x
        256 over two warpgroups with a slice in flight (216 us), 256 x 128 and 128 x 256 fed
        by a producer warpgroup (212 and 217 us), and 128 x 128 with 3 stages (two blocks per
        SM: 250 us), blocks in row order (ptxas 13.0 keeps their wgmmas overlapping:
        `parse_ptxas`'s `wgmma_serialized`). Before the last shape, one not yet measured:
        128 x 128 tiles in ping-pong (`wgmma_pingpong`: each consumer warpgroup a tile of its
        own, in turns of as many tiles as below, 2 at least). Where a side is evaluated (int4
        weights), each producer shape comes twice, the second reading a slice ahead
        (`wgmma_prefetch`); where the tiles are counted, the first producer shape comes once
        more, the last of those in turns, as few tiles per block as let every block run at
        once on the reference GPU of the arch (`wgmma_tiles`); where the copy engine can
        bring a side, each producer form comes once more with it (`wgmma_tma`), storing the
        tile through it too where that is offered and fits (`wgmma_store`). None of these is
        measured on a GPU yet: a tuning measures each form beside the shape it extends."""
        ops = planned(stage)
        knobs = self.knobs(stage, target)
        base = first_values(knobs)
        rows = bound(ops.rows.extent, symbols)
        seeds: list[Config] = []
        turned = False  # the first producer shape also comes in turns
        for bm, bn, stages, in_flight, producer, pingpong in WGMMA_SEEDS:
            turns = _turns(ops, bm, bn, rows, knobs["wgmma_tiles"], target)
            wgmma = {
                "wgmma_bm": bm,
                "wgmma_bn": bn,
                "wgmma_groups": 2,
                "wgmma_stages": stages,
                "wgmma_in_flight": in_flight,
                "wgmma_raster": 1,
                "wgmma_producer": producer,
                "wgmma_pingpong": pingpong,
                "wgmma_tiles": max(2, turns) if pingpong else 1,
            }
            shape = [{**base, **wgmma}]
            if producer and "wgmma_prefetch" in knobs:
                shape.append({**shape[-1], "wgmma_prefetch": True})
            if producer and not turned:
                turned = True
                if turns > 1:
                    shape.append({**shape[-1], "wgmma_tiles": turns})
            if producer and "wgmma_tma" in knobs:
                shape += [
                    self._stored(stage, target, {**seed, "wgmma_tma": True}) for seed in shape
                ]
            seeds += shape
        return seeds

    def _stored(self, stage: Stage, target: Target, seed: Config) -> Config:
        """`seed` also storing its tiles through the copy engine, where that is offered and
        the output tile fits in shared memory beside the stages."""
        stored = {**seed, "wgmma_store": True}
        if "wgmma_store" in seed and self.check(stage, target, stored) is None:
            return stored
        return seed

    def check(self, stage: Stage, target: Target, config: Config) -> str | None:
        ops, shape = planned(stage), WgmmaShape.of(config)
        error = shape.error() or grid_error(ops, shape.bm, target)
        if error is not None:
            return error
        return block_error(target, shape.threads, shape.shared_bytes(ops), shape.registers(ops))

    def kernel(self, ops: Operands, config: Config, ctx: Context) -> Stmt:
        return WgmmaKernel(ops, WgmmaShape.of(config), ctx).lower()


def _turns(
    ops: Operands, bm: int, bn: int, rows: int | None, values: tuple[Knob, ...], target: Target
) -> int:
    """The fewest tiles per block (of `values`) that leave no more blocks than the target's
    reference GPU has SMs, so all run at once; 1 where the tiles are not counted (symbolic
    rows with no value given) or already fit."""
    cols, batch = const_value(ops.cols.extent), const_value(ops.batch.extent)
    if rows is None or cols is None or batch is None:
        return 1
    tiles = -(-rows // bm) * -(-cols // bn) * batch
    sms = limits_for(target).sms
    return next((int(t) for t in values if -(-tiles // int(t)) <= sms), int(values[-1]))
