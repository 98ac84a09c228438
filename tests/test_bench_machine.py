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


def test_a_cpu_report_states_machine_commit_and_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(machine, "ROOT", tmp_path)
    (tmp_path / "docs" / "benchmarks").mkdir(parents=True)
    out = machine.write_cpu_report(
        "forms", "Forms", "python bench/forms.py --trials 8", "one thread", ["conv"], "| t |\n"
    )
    assert out.name.endswith("-conv.md")
    title, _, header, _, body = out.read_text().splitlines()
    assert title == f"# Forms, {datetime.date.today().isoformat()}"
    assert header.startswith("Machine: ") and "; ISA x86_64" in header and "Commit " in header
    assert header.endswith("`python bench/forms.py --trials 8 --only conv` (one thread).")
    assert body == "| t |"
