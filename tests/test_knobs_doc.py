"""`docs/knobs.md` explains every knob the examples' schedules have, as `tunehub explain`
does: a knob added or reworded in a schedule shows up here until the table follows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tunehub.compiler.explain import explain
from tunehub.compiler.program import load
from tunehub.schemas.target import Target

ROOT = Path(__file__).resolve().parents[1]
TARGETS = ("cpu:x86_64-avx2", "cuda:sm_80", "cuda:sm_90")
SIGNATURES = sorted(
    path
    for path in (ROOT / "examples").glob("*.json")
    if "tasks" not in json.loads(path.read_text())
)


def _documented() -> set[tuple[str, str]]:
    """(knob, meaning) of every row of the doc's tables."""
    rows = set()
    for line in (ROOT / "docs" / "knobs.md").read_text().splitlines():
        cells = [cell.strip() for cell in line.strip("|").split(" | ")]
        if line.startswith("| ") and len(cells) == 3 and cells[1].startswith("`"):
            rows.add((cells[1].strip("`"), cells[2].replace("\\|", "|")))
    return rows


@pytest.mark.parametrize("target", TARGETS)
def test_every_knob_of_the_examples_is_documented(target: str) -> None:
    documented = _documented()
    missing = set()
    for path in SIGNATURES:
        for knob in explain(load(json.loads(path.read_text())), Target.parse(target)).knobs:
            short = knob.name.partition(".")[2]
            if (short, knob.meaning) not in documented:
                missing.add(f"{path.name}: {knob.name}: {knob.meaning}")
    assert not missing, sorted(missing)
