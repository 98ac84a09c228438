"""Dispatch tables: one tuned kernel per tuned symbol assignment, and the rule that picks one
for any symbol values in the declared ranges.

A kernel of a symbolic workload is correct for every value of its symbols (the schedule space
does not depend on them), but it is fastest near the values it was tuned at: the tile that
suits a decode step (M = 1) starves a prefill (M = 2048). So a workload is tuned at a few
values and a call picks the kernel tuned nearest, measured on a log scale (a kernel tuned at
32 serves 24 better than one tuned at 8 does, since both tile and launch shapes scale
geometrically); a tie goes to the kernel tuned for the larger values.

The server answers `GET /v1/workloads/{key}/dispatch` with a `DispatchTable`; clients call
`select` with the symbol values of their inputs (`client.load_kernel` does it per call).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field

from tunehub.schemas.api import RecordView
from tunehub.schemas.signature import SymbolDecl


class DispatchEntry(BaseModel):
    """The best verified kernel of one tuned symbol assignment."""

    model_config = ConfigDict(frozen=True)

    symbols: dict[str, int]
    record: RecordView
    fallback: str | None = Field(
        default=None,
        description="why this kernel was measured on another device model than the caller's",
    )


class DispatchTable(BaseModel):
    """Every tuned assignment of a workload's symbols on one target, with its best kernel."""

    model_config = ConfigDict(frozen=True)

    workload_key: str
    target: str
    ranges: dict[str, SymbolDecl] = Field(
        description="the declared range of every symbol of the workload"
    )
    entries: list[DispatchEntry] = Field(min_length=1)

    def select(self, values: Mapping[str, int]) -> DispatchEntry:
        """The entry to run for `values` (every declared symbol, each within its range).
        Raises ValueError naming the first symbol that is missing, unknown or out of range."""
        for name in values:
            if name not in self.ranges:
                raise ValueError(f"unknown symbol {name!r} (declared: {_names(self.ranges)})")
        for name, declared in self.ranges.items():
            if name not in values:
                raise ValueError(f"no value for symbol {name!r}")
            if not declared.min <= values[name] <= declared.max:
                raise ValueError(
                    f"symbol {name}={values[name]} is outside its range "
                    f"[{declared.min}, {declared.max}]"
                )

        def rank(entry: DispatchEntry) -> tuple[float, list[int]]:
            distance = sum(
                abs(math.log2(values[name]) - math.log2(entry.symbols[name]))
                for name in self.ranges
            )
            # Nearest first; among equally near, the one tuned for larger values.
            return distance, [-entry.symbols[name] for name in self.ranges]

        return min(self.entries, key=rank)


def _names(ranges: Mapping[str, SymbolDecl]) -> str:
    return ", ".join(ranges) or "none"
