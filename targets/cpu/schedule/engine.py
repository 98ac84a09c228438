"""Schedule of a contraction on the CPU's dot-product engines: the packed GEMM template with a
register tile of `vdpbf16ps` (bfloat16 x bfloat16 -> float32) or `vpdpbusd` (8-bit integers
-> int32) instead of fmas, or of AMX tiles (`tdpbf16ps`, `tdpbssd`, `tdpbusd`), where the
target names the instruction (`x86_64-avx512+avx512_bf16`, `+amx_tile+amx_bf16`) and the
stage's sides read those narrow values (`gemm.engines`).

It applies beside the FMA template, in the contraction union (`mode` `dot`), with knobs of
its own (`dot_*`) that map onto the packed GEMM's: the column side always packed (its lanes'
words interleaved), the row side packed or, where a row's k values are consecutive in memory
(a row-major A[i, k]) and need no offset, its words broadcast from where they are; the
column side the FMA template's default, no relayout. The k extent must be a constant
multiple of the group (2 for bfloat16, 4 for int8; 16 groups on AMX), as must every k block.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from tunehub.compiler.analysis import Stage
from tunehub.compiler.ir import Expr
from tunehub.compiler.loop import Stmt, as_expr, const_value, product
from tunehub.compiler.schedule.plan import plan
from tunehub.compiler.schedule.stage import Context, Schedule, first_values
from tunehub.compiler.space.space import Config, Knob
from tunehub.schemas.target import Target
from tunehub.targets.cpu.isa import vector_registers
from tunehub.targets.cpu.schedule.contraction import (
    COL_BLOCKS,
    PREFETCH,
    ROW_BLOCKS,
    ROW_TILES,
    UNROLLS,
    VECTORS,
    PackedGemm,
)
from tunehub.targets.cpu.schedule.gemm.engines import Engine, engine_for, in_place_words
from tunehub.targets.cpu.schedule.gemm.template import Template

PREFIX = "dot_"
# AMX: 2 x 2 tiles of 16 x 16 sums (with two row and two column tiles, all eight tile
# registers), one k block, the rows packed as rows (a tile row is 64 bytes of one row).
AMX_DEFAULT: dict[str, Knob] = {"mr": 32, "nv": 2, "kc": 0, "pack_rows": "rows", "mb": 8, "nb": 8}
# Larger AMX blocks, which the packing's cost favours: 8 x 16 tiles of 32 x 32 sums (with k
# blocks of 256, a bfloat16 512^3 matmul 0.24 ms against the default's 0.33 on one Xeon core).
AMX_BLOCKS: dict[str, Knob] = {"mb": 8, "nb": 16}
# Its knobs where they differ: 1 or 2 tiles of 16 rows and of 16 columns, the rows packed
# as rows (k blocks: whole tile steps, `Engine.k_step`).
AMX_KNOBS: dict[str, tuple[Knob, ...]] = {
    "mr": (16, 32),
    "nv": (1, 2),
    "pack_rows": ("rows",),
}
OWN = ("mr", "nv", "kc", "mb", "nb", "pack_rows", "parallel", "unroll", "tile_order", "prefetch")


class DotGemm(Schedule):
    """The packed GEMM on a dot-product engine (see the module doc)."""

    kind = "dot"
    summary = "the packed GEMM on the CPU's dot-product engine (vdpbf16ps, vpdpbusd)"
    priority = 1  # where it applies, its kernels are the ones to measure first
    knob_docs: ClassVar[Mapping[str, str]] = {
        f"{PREFIX}{name}": doc for name, doc in PackedGemm.knob_docs.items() if name in OWN
    } | {
        f"{PREFIX}mr": "rows of the register tile",
        f"{PREFIX}pack_rows": "the broadcast side's words packed as rows or interleaved, or "
        "read in place",
    }
    gemm = PackedGemm()

    def _engine(self, stage: Stage, target: Target) -> Engine | str:
        found = plan(stage)
        if found is None:
            return "the packed GEMM template cannot compute it"
        default = self.gemm.default(stage, target)
        assert default is not None
        engine = engine_for(found, str(default["vec_side"]), target)
        if isinstance(engine, str):
            return engine
        k = const_value(product(as_expr(r.extent) for r in stage.anchor.reduce_axes))
        if k is None:
            return "a dot engine needs a constant k extent"
        if k % engine.k_step:
            return f"k ({k}) is not a multiple of {engine.instruction}'s {engine.k_step} values"
        return engine

    def why_not(self, stage: Stage, target: Target) -> str | None:
        engine = self._engine(stage, target)
        return engine if isinstance(engine, str) else None

    def why(self, stage: Stage, target: Target) -> str:
        engine = self._engine(stage, target)
        if isinstance(engine, str):
            return engine
        return f"{self.summary}: {engine.instruction} on {engine.bits}-bit registers"

    def knobs(self, stage: Stage, target: Target) -> dict[str, tuple[Knob, ...]]:
        gemm = self.gemm.knobs(stage, target)
        own: dict[str, tuple[Knob, ...]] = {
            "mr": ROW_TILES[1:],
            "nv": VECTORS,
            "kc": tuple(k for k in gemm["kc"] if k % 4 == 0),
            "mb": ROW_BLOCKS,
            "nb": COL_BLOCKS,
            "pack_rows": ("rows", "interleaved", "none"),
            "parallel": gemm["parallel"],
            "unroll": UNROLLS,
            "tile_order": ("rows", "cols"),
            "prefetch": PREFETCH,
        }
        if not isinstance(engine := self._engine(stage, target), str) and engine.tiles:
            own.update(AMX_KNOBS)
            own["kc"] = tuple(k for k in gemm["kc"] if k % engine.k_step == 0)
        return {f"{PREFIX}{name}": values for name, values in own.items()}

    def naive(self, stage: Stage, target: Target) -> Config:
        return first_values(self.knobs(stage, target))

    def default(self, stage: Stage, target: Target) -> Config:
        """The FMA template's default tile, blocks, prefetch and row layout (packed as rows
        where their words cannot be read in place), with fewer rows where it leaves too few
        registers; on AMX its 2 x 2 tiles (`AMX_DEFAULT`)."""
        gemm = self.gemm.default(stage, target)
        assert gemm is not None
        config = {f"{PREFIX}{name}": gemm[name] for name in OWN}
        if gemm["pack_rows"] == "none":
            engine = self._engine(stage, target)
            if isinstance(engine, str) or self._in_place(stage, target, engine) is not None:
                config[f"{PREFIX}pack_rows"] = "rows"
        if not isinstance(engine := self._engine(stage, target), str) and engine.tiles:
            return {**config, **{f"{PREFIX}{name}": value for name, value in AMX_DEFAULT.items()}}
        for mr in sorted((m for m in ROW_TILES[1:] if m <= int(gemm["mr"])), reverse=True):
            config[f"{PREFIX}mr"] = mr
            if self.check(stage, target, config) is None:
                break
        return config

    def seeds(self, stage: Stage, target: Target, symbols: Mapping[str, int]) -> list[Config]:
        """The default, and tiles deeper (14 x 2) and wider (6 x 4) where the registers
        hold them: a dot reads its row word once per nv instructions. On AMX, also blocks of
        8 x 16 tiles in k blocks of up to 256 (`AMX_BLOCKS`)."""
        default = self.default(stage, target)
        found = [default]
        tiles = not isinstance(engine := self._engine(stage, target), str) and engine.tiles
        shapes: list[dict[str, Knob]] = [{"mr": 14, "nv": 2}, {"mr": 6, "nv": 4}]
        if tiles:
            blocks = self.knobs(stage, target)[f"{PREFIX}kc"]
            kc = max((k for k in blocks if 0 < int(k) <= 256), default=0)
            shapes = [{"mr": 16, "nv": 2}, {"mr": 32, "nv": 1}, {**AMX_BLOCKS, "kc": kc}]
        for shape in shapes:
            seed = {**default, **{f"{PREFIX}{name}": value for name, value in shape.items()}}
            if seed not in found and self.check(stage, target, seed) is None:
                found.append(seed)
        return found

    def check(self, stage: Stage, target: Target, config: Config) -> str | None:
        engine = self._engine(stage, target)
        if isinstance(engine, str):
            return engine
        mr, nv = int(config[f"{PREFIX}mr"]), int(config[f"{PREFIX}nv"])
        if engine.tiles:
            return None  # its knobs hold only tile shapes that fit
        registers = vector_registers(target)
        # The tile, its column registers, one broadcast word.
        needed = mr * nv + nv + 1
        if needed > registers:
            return f"a {mr}x{nv} dot tile needs {needed} vector registers of {registers}"
        if config[f"{PREFIX}pack_rows"] == "none":
            return self._in_place(stage, target, engine)
        return None

    def _in_place(self, stage: Stage, target: Target, engine: Engine) -> str | None:
        """Why the rows' words cannot be read in place (None: they can)."""
        found, gemm = plan(stage), self.gemm.default(stage, target)
        assert found is not None and gemm is not None
        if len(stage.anchor.reduce_axes) != 1:
            return "rows in place: k must be one axis"
        k = stage.anchor.reduce_axes[0].name
        return in_place_words(found, str(gemm["vec_side"]), engine, k)

    def in_rows(self, stage: Stage, target: Target, config: Config, rows: int) -> Config:
        """Inside a fused row the stage has no parallel loop of its own."""
        return {**config, f"{PREFIX}parallel": 0}

    def lower(self, stage: Stage, config: Config, ctx: Context, rows: tuple[Expr, ...]) -> Stmt:
        engine = self._engine(stage, ctx.target)
        found = plan(stage)
        assert not isinstance(engine, str) and found is not None, engine
        return Template(
            stage, found, self._as_gemm(stage, ctx.target, config), ctx, rows, engine
        ).lower()

    def _as_gemm(self, stage: Stage, target: Target, config: Config) -> Config:
        """The packed GEMM's config of this template's `config`."""
        gemm = self.gemm.default(stage, target)
        assert gemm is not None
        own = {name: config[f"{PREFIX}{name}"] for name in OWN}
        return {**gemm, **own, "pack_cols": True, "relayout": False}
