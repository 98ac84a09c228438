"""Benchmark reports never overwrite each other: a second report of one kind on one day (a
second machine of the same kind, or a rerun) takes the next free name."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest

from bench import machine


def test_a_report_takes_the_first_free_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(machine, "ROOT", tmp_path)
    (tmp_path / "docs" / "benchmarks").mkdir(parents=True)
    day = datetime.date.today().isoformat()
    first = machine.report_path("forms", "x86_64-avx2-amd")
    assert first.name == f"forms-{day}-x86_64-avx2-amd.md"
    first.write_text("one")
    second = machine.report_path("forms", "x86_64-avx2-amd")
    assert second.name == f"forms-{day}-x86_64-avx2-amd-2.md"
    second.write_text("two")
    assert machine.report_path("forms", "x86_64-avx2-amd").name.endswith("-amd-3.md")
    assert machine.report_path("cpu_vs_tvm").name == f"cpu_vs_tvm-{day}.md"
