"""GPU schedule of a contraction stage: matmul, batched matmul, dense layers, conv2d
(implicit GEMM) and dequantizing matmuls, through the CPU template's plan (`plan.plan`) and
axis groups (`operands`), so prologues run where tiles are loaded and epilogues where they are
stored.

`mode` picks the kernel:

* `plain`: the fallback kernel (one thread per output, a serial k loop): the naive config;
* `tiled` (`tiles.py`): block tile `bm x bn`, thread tile `tm x tn` in registers, k slices of
  `bk` staged in shared memory; `vec` reads 4-element runs as `float4` where alignment is
  provable; `double` buffers the slices (register prefetch, one barrier per slice);
  `split_k` slices k over grid z with a second kernel summing the slices (for small M x N);
  `async_copy` (with `double`; only on sm_80 and later where a side is a raw read of the
  accumulator's type, e.g. float32 data) copies raw sides' next slices with `cp.async`;
* `gemv` (`gemv.py`): a warp per `gemv_cols` columns, k split over lanes in runs of `gemv_vec`
  (up to 64: at 32 an int4 lane has 4 weight words in flight, not 1),
  `gemv_rows` rows per pass, `gemv_warps` warps per block (for M of 1..8; offered where M is
  symbolic or at most 64);
* `wmma` (`wmma.py`): tensor cores (WMMA 16x16x16, float32 accumulators), block tile
  `wmma_bm x wmma_bn`, k slices of 32 staged in shared memory as 16-bit values,
  `wmma_warps` warps, each `wmma_frags` fragments tall. Offered only where both factor sides
  stage as the same 16-bit float type (`wmma.staged`), the accumulator is float32 and the
  arch has the instructions (float16 from sm_70, bfloat16 from sm_80); its knobs exist only
  then, so the spaces of other contractions are unchanged. `wmma_stages` (2 or 3: a `cp.async`
  pipeline of that many shared buffers per tile) exists only on sm_80 and later where a side
  is a raw 16-bit read that can be copied as it is (a side with a transforming prologue, e.g.
  int4 dequantization, keeps the register path); the check counts every stage's shared memory;
* `wgmma` (`wgmma.py`, sm_90 only, built for sm_90a): Hopper's warpgroup tensor cores where
  `wmma` is offered, block tile `wgmma_bm x wgmma_bn` over `wgmma_groups` warpgroups (each a
  whole number of 64-row slabs), k slices of 64 through a `cp.async` pipeline of
  `wgmma_stages` buffers, `wgmma_in_flight` slices of products left running while the next
  slice starts, blocks ordered in groups of `wgmma_raster` row tiles, and with
  `wgmma_producer` one more warpgroup that only loads (`wgmma_prefetch`, where a side is
  evaluated rather than copied: its reads a slice ahead; `wgmma_tiles`: tiles per block,
  computed in turn; `wgmma_pingpong`: each consumer warpgroup computes whole tiles, the two
  in turn; `wgmma_tma`, where a side is copied as it is: the copy engine brings its tiles,
  one thread issuing them; `wgmma_store`: the tile leaves through shared memory and the copy
  engine). Not the default, but its seeds come
  first in a tuning (H100, 4096^3 float16: 284 us, against 455 for WMMA and 6.4 ms tiled).

Knobs of the modes not chosen must keep their first values (so no two configs are the same
kernel); `canonical` resets them, so that sampling and mutation reach both kernels. `check`
enforces the device limits (`space.limits`: threads, shared memory, a register estimate, grid
y/z extents) and the tiling's divisibility rules. Contractions the plan cannot regroup
exactly (rounding inside the product) use the GPU reduction schedule. A 16-bit sum, whose
terms round before they are summed (`Plan.term`, the MLC-LLM form of an int4 linear), gets
the tiled and GEMV kernels, which round each product; tensor cores cannot.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from tunehub.compiler.analysis import Stage
from tunehub.compiler.ir import Expr, substitute
from tunehub.compiler.loop import Stmt, const, const_value
from tunehub.compiler.schedule.plan import describe, plan, plan_or_reason
from tunehub.compiler.schedule.stage import Context, Schedule, first_values
from tunehub.compiler.simplify import simplified
from tunehub.compiler.space.space import Config, Knob
from tunehub.schemas.target import Target
from tunehub.targets.cuda.schedule.staging import evaluated, staged
from tunehub.targets.cuda.schedule.tiles import SIDES, Shape, Tiled, async_tiles, vectorized
from tunehub.targets.cuda.schedule.tma import tensor_output, tensor_sides
from tunehub.targets.cuda.schedule.wgmma import WgmmaKernel, WgmmaShape, warpgroup_mma
from tunehub.targets.cuda.schedule.wmma import (
    WmmaKernel,
    WmmaShape,
    async_copies,
    tensor_cores,
)
from tunehub.targets.gpu.limits import WARP, block_error, limits_for
from tunehub.targets.gpu.schedule.fallback import naive_kernel
from tunehub.targets.gpu.schedule.gemv import Gemv
from tunehub.targets.gpu.schedule.operands import Operands, operands
from tunehub.targets.gpu.schedule.reduction import Reduction

TILED: dict[str, tuple[Knob, ...]] = {
    "bm": (64, 16, 32, 128),
    "bn": (64, 16, 32, 128),
    "bk": (16, 8, 32),
    "tm": (4, 1, 2, 8),
    "tn": (4, 1, 2, 8),
    "split_k": (1, 2, 4, 8, 16),
    "vec": (False, True),
    "double": (False, True),
}
TILED_ASYNC: dict[str, tuple[Knob, ...]] = {"async_copy": (False, True)}
GEMV: dict[str, tuple[Knob, ...]] = {
    "gemv_cols": (1, 2, 4, 8),
    "gemv_warps": (4, 1, 2, 8),
    "gemv_rows": (1, 2, 4, 8),
    "gemv_vec": (1, 2, 4, 8, 16, 32, 64),
    "gemv_ahead": (False, True),
}
WMMA: dict[str, tuple[Knob, ...]] = {
    "wmma_bm": (64, 128),
    "wmma_bn": (64, 128),
    "wmma_warps": (4, 8),
    "wmma_frags": (2, 1, 4),
}
WMMA_ASYNC: dict[str, tuple[Knob, ...]] = {"wmma_stages": (1, 2, 3)}
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
MODES = ("plain", "tiled", "gemv")
# (bm, bn, stages, in flight, producer, pingpong) of the wgmma seeds, fastest first where
# measured (see `seeds`).
WGMMA_SEEDS = (
    (128, 256, 4, 1, False, False),
    (256, 128, 4, 0, True, False),
    (128, 256, 3, 0, True, False),
    (128, 128, 4, 1, True, True),
    (128, 128, 3, 0, False, False),
)
# (columns, warps, k run) of the GEMV seeds: the first where rows are symbolic or many, all
# where a tuning measures few rows.
GEMV_SEEDS = ((2, 8, 32), (1, 8, 32), (1, 4, 32), (2, 4, 64), (4, 4, 16))
GEMV_ROWS = 8  # the default picks the GEMV kernel up to this many rows
GEMV_MAX_ROWS = 64  # and the space offers it up to this many (or any number of symbolic rows)


class CudaContraction(Schedule):
    """The GPU kernels of a contraction stage (see the module doc; `mode` picks one);
    `Reduction` where the plan does not apply."""

    kind = "contraction"
    summary = "a GPU contraction kernel: tiled SIMT, a GEMV, WMMA or wgmma tensor cores"
    knob_docs: ClassVar[Mapping[str, str]] = {
        "mode": "the kernel: plain (one thread per output), tiled, gemv, wmma or wgmma",
        "bm": "tiled: rows of the block tile",
        "bn": "tiled: columns of the block tile",
        "bk": "tiled: k values per shared-memory slice",
        "tm": "tiled: rows of a thread's register tile",
        "tn": "tiled: columns of a thread's register tile",
        "vec": "tiled: read runs of 4 elements as float4 where alignment is provable",
        "double": "tiled: double-buffer the k slices (prefetch into registers)",
        "split_k": "tiled: k split over grid z, summed by a second kernel (small M x N)",
        "async_copy": "tiled: copy raw sides' next slices with cp.async (sm_80 and later)",
        "gemv_cols": "gemv: columns per warp",
        "gemv_rows": "gemv: rows per pass",
        "gemv_vec": "gemv: k values per lane per run",
        "gemv_warps": "gemv: warps per block",
        "gemv_ahead": "gemv: every run's weights read before the first run's products",
        "wmma_bm": "wmma: rows of the block tile",
        "wmma_bn": "wmma: columns of the block tile",
        "wmma_warps": "wmma: warps per block",
        "wmma_frags": "wmma: 16x16 fragments each warp holds, tall",
        "wmma_stages": "wmma: shared buffers of the cp.async pipeline (1: register path)",
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
    fallback = Reduction()

    def why(self, stage: Stage, target: Target) -> str:
        """The plan's axis groups, or why the GPU reduction schedule runs the stage."""
        found = plan_or_reason(stage)
        if isinstance(found, str):
            return f"the GPU reduction schedule, as no contraction kernel can: {found}"
        cores = "; no tensor cores: they cannot round each term" if found.term else ""
        return f"{self.summary} ({describe(found, stage)}{cores})"

    def knobs(self, stage: Stage, target: Target) -> dict[str, tuple[Knob, ...]]:
        found = plan(stage)
        if found is None:
            return self.fallback.knobs(stage, target)
        ops = operands(stage, found)
        rows = const_value(ops.rows.extent)
        wmma: tuple[str, ...] = ("wmma",) if _tensor_cores(ops, target) else ()
        tiled = {**TILED, **(TILED_ASYNC if async_tiles(ops, target) else {})}
        extra = WMMA if wmma else {}
        if wmma and async_copies(ops, target):
            extra = {**WMMA, **WMMA_ASYNC}
        if wmma and warpgroup_mma(target, ops):
            wmma, extra = (*wmma, "wgmma"), {**extra, **WGMMA}
            if evaluated(ops):
                extra.update(WGMMA_PREFETCH)
            if tensor_sides(ops):
                extra.update(WGMMA_TMA)
            if tensor_output(ops):
                extra.update(WGMMA_STORE)
        if rows is not None and rows > GEMV_MAX_ROWS:  # the weights would be read rows / 8 times
            gemv = {k: v[:1] for k, v in GEMV.items()}
            return {"mode": (*MODES[:2], *wmma), **tiled, **gemv, **extra}
        return {"mode": (*MODES, *wmma), **tiled, **GEMV, **extra}

    def naive(self, stage: Stage, target: Target) -> Config:
        if plan(stage) is None:
            return self.fallback.naive(stage, target)
        return first_values(self.knobs(stage, target))

    def default(self, stage: Stage, target: Target) -> Config:
        found = plan(stage)
        if found is None:
            return self.fallback.default(stage, target)
        ops = operands(stage, found)
        config = self.naive(stage, target)
        rows = const_value(ops.rows.extent)
        if rows is not None and rows <= GEMV_ROWS and ops.k_inner("col"):
            vec = 8 if const_value(ops.k.extent) is not None else 4
            return {**config, "mode": "gemv", "gemv_cols": 2, "gemv_rows": rows, "gemv_vec": vec}
        cols, k = const_value(ops.cols.extent), const_value(ops.k.extent)
        small = rows is not None and cols is not None and rows * cols <= 256 * 256
        config.update(mode="tiled", bk=16, double=True)
        if small:
            config.update(bm=32, bn=32, tm=2, tn=2)
            if k is not None and k >= 1024 and rows * cols <= 128 * 128:  # type: ignore[operator]
                config.update(split_k=4)
        config["vec"] = any(vectorized(ops, side, Shape.of(config)) for side in SIDES)
        if self.check(stage, target, config) is not None:
            config.update(vec=False)
        return config

    def seeds(self, stage: Stage, target: Target, symbols: Mapping[str, int]) -> list[Config]:
        """The usual best shapes, so a short tuning measures them whatever its search draws.
        Where the GEMV kernel is offered in full (few or symbolic rows): 2 columns per warp, 8
        warps, runs of 32 k (H100, int4 4096 x 4096 at M = 1, with a run's reads as vector
        loads: 10.1 us; 4 columns with runs of 16, the seed before them, 13.2); where the
        tuning measures few rows (M bound to 1), its other shapes too (`GEMV_SEEDS`) and
        nothing else. Where rows may be many, fastest first at 4096^3 float16 on an H100
        (epilogues storing column pairs):
        wgmma's 128 x 256 over two warpgroups with a slice in flight (216 us), 256 x 128 and
        128 x 256 fed by a producer warpgroup (212 and 217 us), and 128 x 128 with 3 stages
        (two blocks per SM: 250 us), blocks in row order (ptxas 13.0 keeps their wgmmas
        overlapping: `parse_ptxas`'s `wgmma_serialized`); then WMMA's 128 x 128 tiles of 8
        warps (468 us). Before the last wgmma shape, one not yet measured: 128 x 128 tiles
        in ping-pong (`wgmma_pingpong`: each consumer warpgroup a tile of its own, in turns
        of as many tiles as below, 2 at least). The first GEMV shape comes twice where every
        lane takes as many runs, the second reading every run's weights first
        (`gemv_ahead`). Where a side is evaluated (int4 weights), each producer shape comes
        twice, the second reading a slice ahead (`wgmma_prefetch`); where the tiles are
        counted, the first producer shape comes once more, the last of those in turns, as
        few tiles per block as let every block run at once on the reference GPU of the arch
        (`wgmma_tiles`); where the copy engine can bring a side, each producer form comes
        once more with it (`wgmma_tma`), storing the tile through it too where that is
        offered and fits (`wgmma_store`). None of these is measured on a GPU yet: a tuning
        measures each form beside the shape it extends."""
        found = plan(stage)
        if found is None:
            return []
        knobs = self.knobs(stage, target)
        modes, base = knobs["mode"], first_values(knobs)
        ops = operands(stage, found)
        rows = _bound(ops.rows.extent, symbols)
        few = rows is not None and rows <= GEMV_ROWS
        seeds: list[Config] = []
        if "gemv" in modes and len(knobs["gemv_vec"]) > 1:
            seeds += [{**base, "mode": "gemv", **gemv} for gemv in _gemv_seeds(knobs, rows)]
            ahead = {**seeds[0], "gemv_ahead": True} if seeds else None
            if ahead is not None and Gemv.of(ahead).error(ops) is None:
                seeds.insert(1, ahead)
        if few:
            return seeds
        if "wgmma" in modes:
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
                shape = [{**base, "mode": "wgmma", **wgmma}]
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
        if "wmma" in modes:
            stages = 3 if 3 in knobs.get("wmma_stages", ()) else 1
            wmma = {"wmma_bm": 128, "wmma_bn": 128, "wmma_warps": 8, "wmma_frags": 2}
            seeds.append({**base, "mode": "wmma", **wmma, "wmma_stages": stages})
        return [{k: v for k, v in seed.items() if k in knobs} for seed in seeds]

    def _stored(self, stage: Stage, target: Target, seed: Config) -> Config:
        """`seed` also storing its tiles through the copy engine, where that is offered and
        the output tile fits in shared memory beside the stages."""
        stored = {**seed, "wgmma_store": True}
        if "wgmma_store" in seed and self.check(stage, target, stored) is None:
            return stored
        return seed

    def canonical(self, stage: Stage, target: Target, config: Config) -> Config:
        """The knobs of the other kernel reset. `plain` is left alone: it is one config (the
        naive one, measured first anyway), which random draws then rarely hit."""
        if plan(stage) is None or config["mode"] == "plain":
            return config
        resets = {name: values[0] for name, values in _unused(config).items() if name in config}
        return {**config, **resets}

    def in_rows(self, stage: Stage, target: Target, config: Config, rows: int) -> Config:
        """Inside a fused row the stage is the plain kernel (`lower`): no knob of its own."""
        if plan(stage) is None:
            return self.fallback.in_rows(stage, target, config, rows)
        return self.naive(stage, target)

    def check(self, stage: Stage, target: Target, config: Config) -> str | None:
        found = plan(stage)
        if found is None:
            return self.fallback.check(stage, target, config)
        mode = config["mode"]
        unused = _unused(config).items()
        if any(name in config and config[name] != values[0] for name, values in unused):
            return f"knobs of other modes than {mode} keep their first values"
        ops = operands(stage, found)
        if mode == "wmma":
            return _check_wmma(ops, WmmaShape.of(config), target)
        if mode == "wgmma":
            return _check_wgmma(ops, WgmmaShape.of(config), target)
        if mode == "tiled":
            return _check_tiled(ops, Shape.of(config), target)
        if mode == "gemv":
            gemv = Gemv.of(config)
            error = gemv.error(ops)
            return error or block_error(target, gemv.threads, 0, gemv.registers(ops))
        return None

    def lower(self, stage: Stage, config: Config, ctx: Context, rows: tuple[Expr, ...]) -> Stmt:
        found = plan(stage)
        if found is None:
            return self.fallback.lower(stage, config, ctx, rows)
        if config["mode"] == "plain" or rows:
            return naive_kernel(stage, ctx, rows)
        ops = operands(stage, found, ctx.analysis.program)
        if config["mode"] == "gemv":
            return Gemv.of(config).lower(ops, ctx)
        if config["mode"] == "wmma":
            return WmmaKernel(ops, WmmaShape.of(config), ctx).lower()
        if config["mode"] == "wgmma":
            return WgmmaKernel(ops, WgmmaShape.of(config), ctx).lower()
        return Tiled(ops, Shape.of(config), ctx).lower()


def _gemv_seeds(knobs: Mapping[str, tuple[Knob, ...]], rows: int | None) -> list[Config]:
    """The GEMV knobs of the seeds for `rows` rows (None: symbolic): every shape of
    `GEMV_SEEDS` for few rows, taken in one pass; the first for symbolic rows or up to
    `GEMV_MAX_ROWS`; none for more."""
    if rows is not None and rows > GEMV_MAX_ROWS:
        return []
    shapes: tuple[tuple[int, int, int], ...] = GEMV_SEEDS[:1]
    per_pass = 1
    if rows is not None and rows <= GEMV_ROWS:
        shapes, per_pass = GEMV_SEEDS, min(int(r) for r in knobs["gemv_rows"] if int(r) >= rows)
    return [
        {"gemv_cols": cols, "gemv_warps": warps, "gemv_rows": per_pass, "gemv_vec": vec}
        for cols, warps, vec in shapes
    ]


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


def _bound(extent: Expr, symbols: Mapping[str, int]) -> int | None:
    """`extent` at the symbol values `symbols`, if that makes it a constant."""
    values: dict[str, Expr] = {name: const(value) for name, value in symbols.items()}
    return const_value(simplified(substitute(extent, values), set()))


def _unused(config: Config) -> dict[str, tuple[Knob, ...]]:
    """The knobs the config's mode does not use."""
    wgmma = {**WGMMA, **WGMMA_PREFETCH, **WGMMA_TMA, **WGMMA_STORE}
    tensor = {**WMMA, **WMMA_ASYNC, **wgmma}
    return {
        "plain": {**TILED, **TILED_ASYNC, **GEMV, **tensor},
        "tiled": {**GEMV, **tensor},
        "gemv": {**TILED, **TILED_ASYNC, **tensor},
        "wmma": {**TILED, **TILED_ASYNC, **GEMV, **wgmma},
        "wgmma": {**TILED, **TILED_ASYNC, **GEMV, **WMMA, **WMMA_ASYNC},
    }[str(config["mode"])]


def _tensor_cores(ops: Operands, target: Target) -> bool:
    """Whether the factor sides stage as a 16-bit type the arch's tensor cores take, and
    the sum adds exact products (an MMA cannot round each term, `Plan.term`)."""
    dtype = staged(ops)
    return dtype is not None and ops.term is None and tensor_cores(target, dtype)


def _check_wmma(ops: Operands, shape: WmmaShape, target: Target) -> str | None:
    if not _tensor_cores(ops, target):
        return "no tensor cores for these factor types on this arch"
    error = shape.error()
    if error is not None:
        return error
    if shape.stages > 1 and not async_copies(ops, target):
        return "cp.async stages need sm_80 or later and a side copied raw"
    error = _grid_error(ops, shape.bm, target)
    if error is not None:
        return error
    return block_error(target, shape.threads, shape.shared_bytes(ops), shape.registers())


def _check_wgmma(ops: Operands, shape: WgmmaShape, target: Target) -> str | None:
    if not (_tensor_cores(ops, target) and warpgroup_mma(target, ops)):
        return "no warpgroup tensor cores for these factor types on this arch"
    error = shape.error() or _grid_error(ops, shape.bm, target)
    if error is not None:
        return error
    return block_error(target, shape.threads, shape.shared_bytes(ops), shape.registers(ops))


def _check_tiled(ops: Operands, shape: Shape, target: Target) -> str | None:
    if shape.tm > shape.bm or shape.tn > shape.bn:
        return "a thread tile larger than its block tile"
    if shape.threads < WARP:
        return f"{shape.threads} threads per block (at least one warp)"
    for side in SIDES:
        if (shape.width(side) * shape.bk) % shape.threads:
            return f"the {side} tile does not split evenly over {shape.threads} threads"
    if shape.vec and not any(vectorized(ops, side, shape) for side in SIDES):
        return "no tile side can be read as aligned 4-element vectors"
    if shape.async_copy and not (shape.double and async_tiles(ops, target)):
        return "async_copy needs double, sm_80 or later and a side copied raw"
    k = const_value(ops.k.extent)
    if shape.split > 1 and k is not None and (shape.split - 1) * shape.bk >= k:
        return f"split_k={shape.split} leaves slices of k={k} empty"
    error = _grid_error(ops, shape.bm, target, shape.split)
    if error is not None:
        return error
    return block_error(target, shape.threads, shape.shared_bytes(ops), shape.registers())


def _grid_error(ops: Operands, bm: int, target: Target, split: int = 1) -> str | None:
    """Why row tiles of `bm` (grid y) or batch x split-k slices (grid z) exceed the grid."""
    limits = limits_for(target)
    rows, batch = const_value(ops.rows.extent), const_value(ops.batch.extent)
    if rows is not None and -(-rows // bm) > limits.grid_yz:
        return f"{-(-rows // bm)} row tiles (grid y holds {limits.grid_yz})"
    if batch is not None and batch * split > limits.grid_yz:
        return f"{batch * split} batch x split-k slices (grid z holds {limits.grid_yz})"
    return None
