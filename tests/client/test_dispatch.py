"""runtime.dispatch without kernels: the value ranges a table's entries serve, and the checks
of `save_dispatch`."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from tunehub.runtime.dispatch import save_dispatch, served_ranges
from tunehub.schemas.api import RecordView
from tunehub.schemas.dispatch import DispatchEntry, DispatchTable
from tunehub.schemas.record import RecordStatus
from tunehub.schemas.signature import SymbolDecl


def table(ranges: dict[str, tuple[int, int]], tuned: list[dict[str, int]]) -> DispatchTable:
    def entry(index: int, symbols: dict[str, int]) -> DispatchEntry:
        record = RecordView(
            id=index + 1,
            workload_key="0" * 64,
            target="cpu:x86_64-avx2",
            symbols=symbols,
            tuning_id=None,
            config={},
            status=RecordStatus.OK,
            latency_s=1e-6,
            latencies_s=[1e-6],
            build_time_s=None,
            max_error=0.0,
            error_log=None,
            machine={},
            artifact_sha256=None,
            created_at=datetime.now(UTC),
        )
        return DispatchEntry(symbols=symbols, record=record)

    return DispatchTable(
        workload_key="0" * 64,
        target="cpu:x86_64-avx2",
        ranges={name: SymbolDecl(min=lo, max=hi) for name, (lo, hi) in ranges.items()},
        entries=[entry(i, symbols) for i, symbols in enumerate(tuned)],
    )


def test_served_ranges_are_what_select_picks_for_every_value() -> None:
    # Listed out of order: the ranges follow the tuned values, not the entries' order.
    values = [32, 1, 8, 2048, 128, 512]
    dispatch = table({"M": (1, 4096)}, [{"M": m} for m in values])
    served = served_ranges(dispatch)
    assert served is not None
    for index, (low, high) in served.items():
        for m in range(low, high + 1):
            assert dispatch.select({"M": m}) is dispatch.entries[index]
    assert sorted(served.values()) == [
        (1, 2), (3, 15), (16, 63), (64, 255), (256, 1023), (1024, 4096)
    ]  # fmt: skip
    assert served_ranges(table({"M": (5, 9)}, [{"M": 7}])) == {0: (5, 9)}


def test_a_table_of_several_symbols_serves_regions_not_ranges() -> None:
    dispatch = table({"M": (1, 64), "N": (1, 64)}, [{"M": 1, "N": 1}, {"M": 64, "N": 64}])
    assert served_ranges(dispatch) is None


def test_save_dispatch_needs_one_kernel_per_entry(tmp_path: Path) -> None:
    dispatch = table({"M": (1, 64)}, [{"M": 1}, {"M": 16}])
    with pytest.raises(ValueError, match="1 kernels for 2 dispatch entries"):
        save_dispatch(tmp_path, dispatch, [(b"", None, {})])
