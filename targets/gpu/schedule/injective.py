"""GPU schedule of an injective stage (elementwise, broadcast, transpose, gathers).

The output's axes are flattened and spread over the threads of a one-dimensional grid:
`threads` per block, each thread storing `items` elements a block-width apart, so every pass
of a warp reads and writes consecutive addresses (`blocks.per_output`). `threads=256,
items=1` is the fallback kernel (the naive config).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from tunehub.compiler.analysis import Stage
from tunehub.compiler.ir import Expr
from tunehub.compiler.loop import Stmt
from tunehub.compiler.schedule.stage import Context, Schedule
from tunehub.compiler.space.space import Config, Knob
from tunehub.schemas.target import Target
from tunehub.targets.gpu.limits import block_error
from tunehub.targets.gpu.schedule.blocks import FALLBACK_THREADS, per_output

THREADS = (FALLBACK_THREADS, 64, 128, 512, 1024)
ITEMS = (1, 2, 4, 8)


class Injective(Schedule):
    kind = "injective"
    summary = "a GPU elementwise kernel: the output flattened over a one-dimensional grid"
    knob_docs: ClassVar[Mapping[str, str]] = {
        "threads": "threads per block",
        "items": "elements each thread stores, a block-width apart",
    }

    def knobs(self, stage: Stage, target: Target) -> dict[str, tuple[Knob, ...]]:
        return {"threads": THREADS, "items": ITEMS}

    def naive(self, stage: Stage, target: Target) -> Config:
        return {"threads": FALLBACK_THREADS, "items": 1}

    def default(self, stage: Stage, target: Target) -> Config:
        return {"threads": 256, "items": 4}

    def check(self, stage: Stage, target: Target, config: Config) -> str | None:
        return block_error(target, int(config["threads"]))

    def in_rows(self, stage: Stage, target: Target, config: Config, rows: int) -> Config:
        """The block's threads loop over the row's outputs: no fixed number per thread."""
        return {**config, "items": ITEMS[0]}

    def lower(self, stage: Stage, config: Config, ctx: Context, rows: tuple[Expr, ...]) -> Stmt:
        return per_output(stage, ctx, rows, int(config["threads"]), int(config["items"]))
