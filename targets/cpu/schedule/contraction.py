"""Schedule of a contraction stage: one packed GEMM template for matmul, batched matmul, dense
layers, conv2d (implicit GEMM) and dequantizing matmuls alike.

After prologue inlining a contraction sums `X * Y` over its reduce axes, where the factor side
`X` reads spatial axes the side `Y` does not and vice versa (`products.split_product`). The
template sees three groups of axes, each flattened into one virtual axis (div/mod recovers
the real indices, so any number of axes per group works):

* **rows**: the spatial axes read only by the *broadcast* side, whose values are broadcast
  into vector registers;
* **cols**: the spatial axes read only by the *vector* side, loaded `lanes` (16 fp32 on
  AVX-512) at a time; `vec_side` picks which factor side that is (the default: the side
  holding the output's contiguous last axis, so `rhs` for matmuls, `lhs` for NCHW conv2d);
* **k**: the reduce axes. Spatial axes read by both sides (or neither) are **batch** loops.

Loop structure (BLIS-like; `mc = mb * mr` rows and `nc = nb * nr` columns per block):

    batch.. / jc (col blocks) / ic (row blocks)      <- the first `parallel` of these collapse
      pc (k blocks of kc; none with kc = 0)
        pack the vector side's nc x kc block into nr-wide panels     [panel][k][nr]
        pack the broadcast side's mc x kc block (`pack_rows`)        [panel][k][mr] or
                                                                     [panel][mr][k]
        p / q (row and col panels, `tile_order` says which is outer): the register tile,
          mr x nr/lanes vector accumulators; per k step nr/lanes vector loads (and a
          `prefetch` of the panel that many steps ahead), mr broadcasts, mr * nr/lanes fmas
          not the last k block: accumulators -> per-thread partial sums
          the last: epilogue (bias, relu, residual, casts) and store; a whole tile whose
          columns are the output's last axis stores vectors straight from the accumulators,
          any other tile spills them and stores lane by lane, clipped at the edges

**Packing evaluates the factor expressions** into contiguous panels of the accumulator dtype,
so layouts (NN, NT, TN), conv2d's `where`-guarded padded reads and int4 dequantization all
become the same dense panels, and a dequantized weight is decoded once per packed element,
not once per multiply. Panels are zero-padded to whole tiles, so the register tile never
needs a tail; only the store is clipped. Either side may instead be read in place:
`pack_rows="none"` evaluates the broadcast side in the k loop at a row clamped into range,
`pack_cols=False` vector-loads the vector side where whole tiles cover a single column axis
read contiguously; at small sizes the packing pass is what that saves.

Knob constraints (`check`): the tile's accumulators, its column vectors and one broadcast
must fit the vector registers (32 on AVX-512, 16 elsewhere); `pack_cols=False` needs the
column condition above; `mr = 0`, the naive plain nest, leaves every other knob at its first
value. Non-dividing and symbolic extents need no constraint: blocks and panels are clipped
at run time.

A contraction whose terms round before they are summed (a 16-bit anchor dtype, a 16-bit cast
inside the product, a product in another type than the accumulator) cannot be regrouped as
packed sides; such stages keep the reduction schedule (`PackedGemm` delegates to it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from tunehub.compiler import dtypes
from tunehub.compiler.analysis import Stage
from tunehub.compiler.ir import Expr, loads
from tunehub.compiler.loop import Stmt, as_expr, const_value, product
from tunehub.compiler.schedule.plan import Plan, describe, plan, plan_or_reason
from tunehub.compiler.schedule.stage import (
    Context,
    Schedule,
    first_values,
    plain_nest,
)
from tunehub.compiler.space.space import Config, Knob
from tunehub.schemas.target import Target
from tunehub.targets.cpu.isa import vector_registers
from tunehub.targets.cpu.schedule.gemm.packing import k_inner
from tunehub.targets.cpu.schedule.gemm.relayout import relayouts
from tunehub.targets.cpu.schedule.gemm.template import Template
from tunehub.targets.cpu.schedule.gemm.tiling import k_orders, lanes_of, unpacked_columns
from tunehub.targets.cpu.schedule.reduction import Reduction

ROW_TILES = (0, 1, 2, 4, 6, 8, 12, 14, 16, 24, 28)  # mr; 0 = the plain nest
VECTORS = (1, 2, 3, 4)  # nr / lanes
K_BLOCKS = (0, 64, 128, 256, 384, 512, 1024)  # kc; 0 = the whole k extent
ROW_BLOCKS = (1, 2, 4, 8, 16, 32, 64)  # mb = mc / mr
COL_BLOCKS = (1, 2, 4, 8, 16, 32)  # nb = nc / nr
UNROLLS = (1, 2, 4)
SIDES = ("rhs", "lhs")
ROW_PACKS = ("interleaved", "rows", "none")  # broadcast-side panel layout, or read in place
SMALL_UNPACKED = 128 * 256  # k x columns below which the default reads the vector side in place
PREFETCH = (0, 4, 8, 16)  # k steps ahead in the vector panel; 0 = none


class PackedGemm(Schedule):
    """The packed GEMM template (see the module doc); `Reduction` where it does not apply."""

    kind = "contraction"
    summary = "the packed GEMM template: blocks of packed panels and a register tile of fmas"
    knob_docs: ClassVar[Mapping[str, str]] = {
        "mr": "rows of the register tile (0: the plain loop nest, every other knob unused)",
        "nv": "vectors of columns in the register tile (nr = nv x the ISA's lanes)",
        "kc": "k values per packed block, kept in cache (0: all of k at once)",
        "mb": "register tiles of rows per block (mc = mb x mr)",
        "nb": "register tiles of columns per block (nc = nb x nr)",
        "vec_side": "the factor side loaded as vectors (its axes are the columns)",
        "pack_rows": "the broadcast side's panel layout (interleaved, rows), or read in place",
        "pack_cols": "copy the vector side into panels (False: read it where it is)",
        "parallel": "outer loops (batch, column and row blocks) collapsed into one parallel loop",
        "unroll": "unroll factor of the k loop around the register tile",
        "tile_order": "which register tiles run innermost: a row panel's (rows) or a column's",
        "prefetch": "k steps ahead the vector panel is prefetched (0: none)",
        "k_order": "the reduce axes' order in k: as given, or as the lhs or rhs reads them",
        "relayout": "copy the broadcast side's tensors channels-last and store the output "
        "through a copy with the columns last (an NCHW conv computed as its NHWC form)",
    }
    fallback = Reduction()

    def why(self, stage: Stage, target: Target) -> str:
        """The plan's axis groups and term rounding, or why the reduction schedule runs it."""
        found = plan_or_reason(stage)
        if isinstance(found, str):
            return f"the reduction schedule, as the packed GEMM template cannot: {found}"
        return f"{self.summary} ({describe(found, stage)})"

    def knobs(self, stage: Stage, target: Target) -> dict[str, tuple[Knob, ...]]:
        found = plan(stage)
        if found is None:
            return self.fallback.knobs(stage, target)
        found_axes = len(found.lhs_axes) + len(found.rhs_axes) + len(found.unit_axes)
        n_outer = len(stage.axes) - found_axes + 2  # batch axes, then the col and row blocks
        orders = k_orders(stage, found.lhs, found.rhs) if len(stage.anchor.reduce_axes) > 1 else {}
        return {
            "mr": ROW_TILES,
            "nv": VECTORS,
            "kc": _below(_k_extent(stage), K_BLOCKS),
            "mb": ROW_BLOCKS,
            "nb": COL_BLOCKS,
            "vec_side": SIDES,
            "pack_rows": ROW_PACKS,
            "pack_cols": (True, False),
            "parallel": tuple(range(min(3, n_outer) + 1)),
            "unroll": UNROLLS,
            "tile_order": ("cols", "rows"),
            "prefetch": PREFETCH,
            **({"k_order": tuple(orders)} if orders else {}),
            "relayout": (False, True),
        }

    def naive(self, stage: Stage, target: Target) -> Config:
        if plan(stage) is None:
            return self.fallback.naive(stage, target)
        return first_values(self.knobs(stage, target))

    def seeds(self, stage: Stage, target: Target, symbols: Mapping[str, int]) -> list[Config]:
        """The default; the same with a tile as wide as the columns allow: where the columns
        are a few vectors (a convolution's 64 filters) a tile holding all of them reads each
        broadcast row once (a 3x3 NHWC conv 0.47 -> 0.26 ms, AVX-512). Where k spans several
        axes (a convolution's window), packing gathers, so two more with the wide tile and
        `relayout`: the sides' tensors copied as packing runs along them (an NHWC conv's
        weights filters-last: 0.54 -> 0.48 ms on an AVX-512 Xeon); and, where the default's
        columns span several axes too (an NCHW im2col), the other side broadcast from a
        channels-last copy: a 3x3 NCHW conv then runs as its NHWC form (0.92 -> 0.58 ms).
        Where k is one axis, the default with `relayout` where it changes a layout (an NT
        side read k-last packs its panel rows from a transposed copy): an int4 linear whose
        weights are W[j, k // 8] nibbles 0.91 -> 0.80 ms (inline) and 0.98 -> 0.85 ms (MLC's
        five blocks), AVX-512 EPYC, N = K = 1024, 32 rows; one 64-trial tuning in two found
        it without the seed."""
        found = plan(stage)
        if found is None:
            return []
        default = self.default(stage, target)
        candidates = [self._wide(stage, target, found, default)]
        if len(stage.anchor.reduce_axes) > 1:
            candidates.append(self._wide(stage, target, found, {**default, "relayout": True}))
            other = "lhs" if default["vec_side"] == "rhs" else "rhs"
            flipped = {**default, "vec_side": other, "relayout": True, "pack_rows": "rows"}
            if "k_order" in default:  # as the broadcast side's copy reads k: channels last
                flipped["k_order"] = default["vec_side"]
            columns = found.rhs_axes if default["vec_side"] == "rhs" else found.lhs_axes
            if len(columns) > 1:
                candidates.append(self._wide(stage, target, found, flipped))
        else:
            candidates.append({**default, "relayout": True})
        found_seeds = [default]
        for seed in candidates:
            if seed not in found_seeds and self.check(stage, target, seed) is None:
                found_seeds.append(seed)
        return found_seeds

    def _wide(self, stage: Stage, target: Target, found: Plan, config: Config) -> Config:
        """`config` with a tile as wide as its columns allow and as many rows as fit; as it
        is where that leaves fewer than 4 rows (the column vectors reloaded too often): on
        AVX2's 16 registers a 3x3 NCHW conv of 32 filters would lose its flipped seed, which
        runs 0.19 ms against the default's 0.33 (32 channels, 28 x 28, AMD EPYC)."""
        side = found.rhs_axes if config["vec_side"] == "rhs" else found.lhs_axes
        lanes = lanes_of(target, found.acc)
        nv = min(max(VECTORS), -(-_extent(stage, side) // lanes))  # vectors covering the columns
        mr = max(m for m in ROW_TILES if m * nv + nv + 1 <= vector_registers(target))
        return {**config, "nv": nv, "mr": mr} if mr >= 4 else config

    def default(self, stage: Stage, target: Target) -> Config:
        """What measured best on fp32 matmuls from 128^3 to 1024^3 on AVX-512: an 8 x 2-vector
        tile (6 x 2 where 16 vector registers must hold it, the classic AVX2 microkernel);
        256 x 256 blocks (enough of them for two threads to balance; smaller where the
        output would be one block, `_split_for_threads`); one k block up to
        k = 1024 (its column panels then packed once per column block; 1024^3 ran 4-5%
        faster so than in k blocks of 256, AVX-512 and AVX2 code on a Zen 5), blocks of
        256 past it; each row panel L1-resident while the column panels stream from L2
        with a prefetch 16 k steps ahead; the broadcast side read in place when that takes
        no div/mod, else packed as runs of k where it reads k contiguously (an NHWC im2col,
        float16 rows: a copy, not a transpose) and interleaved otherwise; the vector side
        read in place when its k x columns are small (the packing pass is then the larger
        cost). A side that reads 16-bit data is packed (converted once, not at every use:
        a 256^3 float16 matmul 1.14 -> 0.33 ms, AVX-512)."""
        found = plan(stage)
        if found is None:
            return self.fallback.default(stage, target)
        config = self.naive(stage, target)
        side = "lhs" if stage.axes and stage.axes[-1] in found.lhs_axes else "rhs"
        k_extent = const_value(_k_extent(stage))
        rows = found.lhs_axes if side == "rhs" else found.rhs_axes
        cols = found.rhs_axes if side == "rhs" else found.lhs_axes
        row_side, col_side = (found.lhs, found.rhs) if side == "rhs" else (found.rhs, found.lhs)
        in_place = len(rows) == 1 and len(stage.anchor.reduce_axes) == 1 and _wide(row_side)
        k_runs = k_inner(row_side, tuple(r.name for r in stage.anchor.reduce_axes), rows)
        config.update(
            mr=8 if vector_registers(target) >= 32 else 6,
            nv=2,
            kc=0 if k_extent is not None and k_extent <= 1024 else 256,
            mb=32,
            nb=8,
            vec_side=side,
            pack_rows="none" if in_place else "rows" if k_runs else "interleaved",
            tile_order="rows",
            prefetch=16,
            parallel=max(self.knobs(stage, target)["parallel"]),
        )
        lanes = lanes_of(target, found.acc)
        sizes = (_extent(stage, rows), _extent(stage, cols), _extent(stage, stage.axes))
        _split_for_threads(config, *sizes, lanes)
        if "k_order" in config:  # read the larger side's panel (an im2col) contiguously
            larger = (
                "lhs" if _extent(stage, found.lhs_axes) >= _extent(stage, found.rhs_axes) else "rhs"
            )
            config["k_order"] = larger
        small = k_extent is not None and k_extent * _extent(stage, cols) <= SMALL_UNPACKED
        if (
            small
            and _wide(col_side)
            and unpacked_columns(stage, found, side, 2 * lanes, lanes) is None
        ):
            config["pack_cols"] = False
        return config

    def in_rows(self, stage: Stage, target: Target, config: Config, rows: int) -> Config:
        """Inside a fused row the stage has no parallel loop of its own, always packs its
        columns and copies nothing to another layout (`Template`)."""
        if plan(stage) is None:
            return self.fallback.in_rows(stage, target, config, rows)
        first = self.naive(stage, target)
        return {**config, **{k: first[k] for k in ("parallel", "pack_cols", "relayout")}}

    def check(self, stage: Stage, target: Target, config: Config) -> str | None:
        found = plan(stage)
        if found is None:
            return self.fallback.check(stage, target, config)
        mr, nv = int(config["mr"]), int(config["nv"])
        if mr == 0:
            naive = self.naive(stage, target)
            if any(config[name] != naive[name] for name in naive):
                return "with mr=0 (the plain nest) every other knob keeps its first value"
            return None
        registers = vector_registers(target)
        if mr * nv + nv + 1 > registers:
            return f"a {mr}x{nv} tile needs {mr * nv + nv + 1} vector registers of {registers}"
        if config["relayout"] and relayouts(stage, found, str(config["vec_side"])) == (
            {},
            stage.axes,
        ):
            return "relayout: the broadcast side and the output are already in that layout"
        if not config["pack_cols"]:
            lanes = lanes_of(target, found.acc)
            return unpacked_columns(stage, found, str(config["vec_side"]), nv * lanes, lanes)
        return None

    def lower(self, stage: Stage, config: Config, ctx: Context, rows: tuple[Expr, ...]) -> Stmt:
        found = plan(stage)
        if found is None:
            return self.fallback.lower(stage, config, ctx, rows)
        if int(config["mr"]) == 0:
            return plain_nest(stage, ctx, rows)
        return Template(stage, found, config, ctx, rows).lower()


def _wide(side: Expr) -> bool:
    """Whether a side reads no 16-bit floats (each read of which would be a conversion)."""
    return not any(dtypes.is_half(ld.dtype) for ld in loads(side))


def _k_extent(stage: Stage) -> Expr:
    return product(as_expr(r.extent) for r in stage.anchor.reduce_axes)


def _split_for_threads(config: Config, rows: int, cols: int, points: int, lanes: int) -> None:
    """Halve `config`'s column blocks, then its row blocks, until its parallel loop (batch,
    column and row blocks; `points` output points in all) has two iterations or more: where
    one block holds the whole output (Llama's 64 x 128 value projection, in 8 column
    panels of 16) the loop runs on one thread (154 us against 73 us in two column blocks,
    2 threads, AVX2 EPYC)."""
    batch = points // max(1, rows * cols)

    def blocks() -> int:
        columns = int(config["nb"]) * int(config["nv"]) * lanes
        return batch * -(-cols // columns) * -(-rows // (int(config["mb"]) * int(config["mr"])))

    for knob in ("nb", "mb"):
        while blocks() < 2 and int(config[knob]) > 1:
            config[knob] = int(config[knob]) // 2


def _extent(stage: Stage, axes: tuple[str, ...]) -> int:
    """The number of points of `axes` (a large stand-in for symbolic extents)."""
    total = 1
    for axis in axes:
        size = stage.shape[stage.axes.index(axis)]
        total *= size if isinstance(size, int) else 1 << 20
    return total


def _below(extent: Expr, blocks: tuple[int, ...]) -> tuple[int, ...]:
    """Block sizes smaller than a constant extent (0, the whole extent, always stays)."""
    size = const_value(extent)
    return tuple(b for b in blocks if b == 0 or size is None or b < size)
