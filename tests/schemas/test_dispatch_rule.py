"""The dispatch rule: the kernel tuned nearest on a log scale, ties to the larger values."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tunehub.schemas.api import RecordView
from tunehub.schemas.dispatch import DispatchEntry, DispatchTable
from tunehub.schemas.record import RecordStatus


def _entry(**symbols: int) -> DispatchEntry:
    record = RecordView(
        id=sum(symbols.values()),
        workload_key="k" * 64,
        target="cpu:x86_64-avx512",
        symbols=symbols,
        tuning_id=None,
        config={},
        status=RecordStatus.OK,
        latency_s=1e-3,
        latencies_s=[1e-3],
        build_time_s=0.1,
        max_error=0.0,
        error_log=None,
        machine={},
        artifact_sha256="0" * 64,
        created_at=datetime.now(UTC),
    )
    return DispatchEntry(symbols=symbols, record=record)


def _table(ranges: dict[str, tuple[int, int]], *entries: DispatchEntry) -> DispatchTable:
    return DispatchTable(
        workload_key="k" * 64,
        target="cpu:x86_64-avx512",
        ranges={name: {"min": lo, "max": hi} for name, (lo, hi) in ranges.items()},
        entries=list(entries),
    )


def test_one_symbol_picks_the_nearest_value_on_a_log_scale() -> None:
    table = _table({"M": (1, 8192)}, *(_entry(M=m) for m in (1, 8, 32, 128, 512, 2048)))
    picked = {m: table.select({"M": m}).symbols["M"] for m in (1, 2, 3, 5, 20, 100, 8192)}
    # 3 is nearer 8 than 1 on a log scale (log2 3 = 1.58); 20 is nearer 32 than 8.
    assert picked == {1: 1, 2: 1, 3: 8, 5: 8, 20: 32, 100: 128, 8192: 2048}


def test_a_tie_goes_to_the_kernel_tuned_for_larger_values() -> None:
    table = _table({"M": (1, 64)}, _entry(M=2), _entry(M=8))
    assert table.select({"M": 4}).symbols == {"M": 8}


def test_several_symbols_sum_their_distances() -> None:
    table = _table({"M": (1, 4096), "N": (1, 4096)}, _entry(M=1, N=1024), _entry(M=1024, N=1))
    assert table.select({"M": 512, "N": 2}).symbols == {"M": 1024, "N": 1}
    assert table.select({"M": 2, "N": 2048}).symbols == {"M": 1, "N": 1024}


def test_a_workload_without_symbols_has_one_entry_for_every_call() -> None:
    table = _table({}, _entry())
    assert table.select({}).symbols == {}


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"M": 0}, "symbol M=0 is outside its range [1, 64]"),
        ({"M": 65}, "symbol M=65 is outside its range [1, 64]"),
        ({}, "no value for symbol 'M'"),
        ({"M": 4, "K": 2}, "unknown symbol 'K' (declared: M)"),
    ],
)
def test_bad_values_are_refused_with_the_reason(values: dict[str, int], message: str) -> None:
    table = _table({"M": (1, 64)}, _entry(M=8))
    with pytest.raises(ValueError) as error:
        table.select(values)
    assert str(error.value) == message


def test_a_table_needs_an_entry() -> None:
    with pytest.raises(ValueError, match="entries"):
        _table({"M": (1, 64)})
