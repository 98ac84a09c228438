"""`bench/unseen.py`'s signatures parse, and the CPU space of each has a valid default (the
benchmark tunes them; this only keeps the files loadable as the signature format moves)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tunehub.compiler.program import load
from tunehub.compiler.space import space_for
from tunehub.schemas.target import Target

UNSEEN = Path(__file__).resolve().parents[1] / "bench" / "data" / "unseen"


@pytest.mark.parametrize("path", sorted(UNSEEN.glob("*.json")), ids=lambda p: p.stem)
def test_each_signature_loads_with_a_valid_default(path: Path) -> None:
    space = space_for(load(json.loads(path.read_text())), Target(kind="cpu", isa="x86_64"))
    assert space.check(space.default()) is None
