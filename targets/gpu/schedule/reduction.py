"""GPU schedule of a reduction stage (softmax/layernorm/rmsnorm statistics, column sums,
full reductions, and contractions the tiled template cannot take).

`order` picks which threads share an output:

* `row`: `threads` threads (whole warps) per output, each taking every `threads`-th term,
  combined by warp shuffles and then across warps in shared memory; `group` outputs per
  block. For reductions along contiguous memory (a row of a row-major matrix).
* `col`: consecutive threads own consecutive outputs (coalesced when the output's last axis is
  contiguous in the inputs, as in a column sum); the terms of each may be split over `group`
  threads along y and combined in shared memory. `col` with `group=1`, `threads=256` is the
  fallback kernel (the naive config).

The inner reduce loop is unrolled `unroll` times. In a fused row group the block already
belongs to one row: `group` is ignored and the block's threads loop over the row's outputs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from tunehub.compiler import dtypes
from tunehub.compiler.analysis import Stage, contiguous
from tunehub.compiler.ir import Expr
from tunehub.compiler.loop import Stmt, const_value
from tunehub.compiler.schedule.stage import Context, Schedule, accumulator_dtype
from tunehub.compiler.space.space import Config, Knob
from tunehub.schemas.target import Target
from tunehub.targets.gpu.limits import WARP, block_error
from tunehub.targets.gpu.schedule.blocks import (
    FALLBACK_THREADS,
    per_output,
    per_row,
    reduction,
)

THREADS = (FALLBACK_THREADS, 32, 64, 128, 512, 1024)
GROUPS = (1, 2, 4, 8, 16, 32)
UNROLLS = (1, 2, 4)


class Reduction(Schedule):
    kind = "reduction"
    summary = "a GPU reduction kernel: threads of a row combined by shuffles, or by column"
    knob_docs: ClassVar[Mapping[str, str]] = {
        "order": "row (threads share an output's terms) or col (a thread per output)",
        "threads": "threads per output (row) or per block (col)",
        "group": "outputs per block (row) or threads splitting an output's terms (col)",
        "unroll": "unroll factor of the inner reduce loop",
    }

    def knobs(self, stage: Stage, target: Target) -> dict[str, tuple[Knob, ...]]:
        return {"order": ("col", "row"), "threads": THREADS, "group": GROUPS, "unroll": UNROLLS}

    def naive(self, stage: Stage, target: Target) -> Config:
        return {"order": "col", "threads": FALLBACK_THREADS, "group": 1, "unroll": 1}

    def default(self, stage: Stage, target: Target) -> Config:
        terms = const_value(reduction(stage).extent)
        terms = 1 << 20 if terms is None else terms
        last_reduce = stage.anchor.reduce_axes[-1].name
        along_rows = not stage.axes or contiguous(stage, last_reduce)
        if not along_rows and contiguous(stage, stage.axes[-1]):
            return {"order": "col", "threads": 64, "group": 8, "unroll": 2}
        threads = max(WARP, min(1024 if not stage.axes else 256, _power_below(terms // 4)))
        group = max(1, min(8, 128 // threads))
        return {"order": "row", "threads": threads, "group": group, "unroll": 2}

    def check(self, stage: Stage, target: Target, config: Config) -> str | None:
        threads, group = int(config["threads"]), int(config["group"])
        slots = group * (threads // WARP if config["order"] == "row" else threads)
        shared = slots * dtypes.itemsize(accumulator_dtype(stage)) if slots > 1 else 0
        return block_error(target, threads * group, shared)

    def in_rows(self, stage: Stage, target: Target, config: Config, rows: int) -> Config:
        """The block already belongs to one row: no outputs or term splits per block."""
        return {**config, "group": GROUPS[0]}

    def lower(self, stage: Stage, config: Config, ctx: Context, rows: tuple[Expr, ...]) -> Stmt:
        threads, unroll = int(config["threads"]), int(config["unroll"])
        group = 1 if rows else int(config["group"])
        if config["order"] == "row":
            return per_row(stage, ctx, rows, threads, group, unroll)
        return per_output(stage, ctx, rows, threads, split=group, unroll=unroll)


def _power_below(n: int) -> int:
    """The largest power of two not above `n` (1 for n < 1)."""
    return 1 << max(0, n.bit_length() - 1)
