"""What a config of the warpgroup kernel is (`wgmma`): the instruction's and the swizzle's
constants, whether a target has the instruction (`warpgroup_mma`), and the knob values with
what they need of the block (`WgmmaShape`: threads, shared memory, registers, and the tilings
the warpgroups cannot take)."""

from __future__ import annotations

from dataclasses import dataclass

from tunehub.compiler.dtypes import itemsize
from tunehub.compiler.ir import loads
from tunehub.compiler.space.space import Config
from tunehub.schemas.target import Target
from tunehub.targets.cuda.limits import capability
from tunehub.targets.cuda.schedule.staging import SIDES, evaluated, register_run, staged
from tunehub.targets.gpu.limits import WARP
from tunehub.targets.gpu.schedule.operands import Operands

WARPGROUP = 4 * WARP  # threads
SLAB = 64  # rows of A per wgmma
K_STEP = 16  # k per wgmma
BK = 64  # k per shared-memory slice
CORE = 8  # a core matrix is 8 x 8 16-bit elements
ATOM = 64  # elements along c of a swizzle atom (128 bytes; 8 rows of them, 1024 bytes)
WGMMA = 90  # the compute capability with wgmma (built for sm_90a)


def warpgroup_mma(target: Target, ops: Operands) -> bool:
    """Whether the target has wgmma and both factor sides stage as one 16-bit float type."""
    return capability(target) == WGMMA and staged(ops) is not None


@dataclass(frozen=True)
class WgmmaShape:
    """The knob values of the warpgroup kernel."""

    bm: int
    bn: int
    groups: int
    stages: int
    in_flight: int = 0  # slices of wgmmas left running while the next slice starts
    raster: int = 1  # row tiles per group of the block order (`StagedTiles._bindings`)
    producer: bool = False  # a warpgroup of its own loads the tiles (see the module doc)
    prefetch: bool = False  # the producer reads a side it evaluates a slice ahead
    tiles: int = 1  # tiles per block, in turn (`StagedTiles._bindings`)
    tma: bool = False  # the copy engine brings the raw sides' tiles (`tensor_sides`)
    pingpong: bool = False  # each consumer warpgroup computes whole tiles, in turn
    store: bool = False  # the tile leaves through shared memory and the copy engine

    @classmethod
    def of(cls, config: Config) -> WgmmaShape:
        return cls(
            int(config["wgmma_bm"]),
            int(config["wgmma_bn"]),
            int(config["wgmma_groups"]),
            int(config["wgmma_stages"]),
            int(config["wgmma_in_flight"]),
            int(config["wgmma_raster"]),
            bool(config["wgmma_producer"]),
            bool(config.get("wgmma_prefetch", False)),
            int(config["wgmma_tiles"]),
            bool(config.get("wgmma_tma", False)),
            bool(config.get("wgmma_pingpong", False)),
            bool(config.get("wgmma_store", False)),
        )

    @property
    def threads(self) -> int:
        return (self.groups + self.producer) * WARPGROUP

    @property
    def loaders(self) -> int:
        return WARPGROUP if self.producer else self.threads

    @property
    def rows(self) -> int:
        """Rows of the block tile a consumer warpgroup computes: its share, or with
        `pingpong` all of them."""
        return self.bm if self.pingpong else self.bm // self.groups

    @property
    def m_tiles(self) -> int:
        return self.rows // SLAB

    @property
    def acc_size(self) -> int:
        """float32 accumulators per thread."""
        return self.m_tiles * self.bn // 2

    def error(self) -> str | None:
        """Why the warpgroups do not tile the block tile, or None."""
        if self.rows % SLAB or self.m_tiles < 1 or self.bm % self.groups:
            return f"bm={self.bm} is not a whole number of {SLAB}-row slabs per warpgroup"
        if self.bn % ATOM or not ATOM <= self.bn <= 256:
            return f"bn={self.bn} is not a multiple of {ATOM} up to 256 (whole swizzle atoms)"
        if self.stages - 1 - self.in_flight < 1:
            return f"{self.stages} stages leave no slice ahead with {self.in_flight} in flight"
        for width in (self.bm, self.bn):
            if (width * BK // CORE) % self.loaders:
                return f"a {width} x {BK} tile does not split evenly over {self.loaders} threads"
        if self.prefetch and not self.producer:
            return "prefetch is the producer warpgroup's: it needs wgmma_producer"
        if self.tiles > 1 and not self.producer:
            return f"{self.tiles} tiles per block need a producer warpgroup to run ahead"
        if self.tma and not self.producer:
            return "tma copies are issued by the producer warpgroup: it needs wgmma_producer"
        if self.store and not self.producer:
            return "tma stores are the consumer warpgroups': they need wgmma_producer"
        if self.pingpong and (self.groups < 2 or self.tiles < self.groups):
            return "pingpong needs 2 consumer warpgroups and a tile per block for each"
        return None

    def width(self, side: str) -> int:
        return self.bm if side == "row" else self.bn

    def tile_elements(self, ops: Operands, side: str) -> int:
        """Elements of one shared buffer of `side`'s tile (no padding: see the module doc)."""
        return self.width(side) * BK

    def shared_bytes(self, ops: Operands) -> int:
        tiles = sum(self.tile_elements(ops, side) for side in SIDES) * 2 * self.stages
        out = self.groups * self.rows * self.bn * itemsize(ops.stage.dtype) if self.store else 0
        return tiles + out

    def registers(self, ops: Operands) -> int:
        """Per thread: the accumulators and 26 more, as ptxas 13.0 reported for sm_90a (58,
        90 and 154 registers with 32, 64 and 128 accumulators, float16 and bfloat16); or, if
        more, what a prefetching producer holds instead: two slices of its reads, one per
        input a side reads per pass (a run's elements share them, as an int4 word's 8
        values and their scale do)."""
        held = 0
        if self.prefetch:
            for side in evaluated(ops):
                expr = ops.row_side if side == "row" else ops.col_side
                reads = len({ld.tensor for ld in loads(expr)})
                passes = self.width(side) * BK // register_run(ops, self, side, BK) // self.loaders
                held += 2 * passes * reads
        return max(self.acc_size, held) + 26
