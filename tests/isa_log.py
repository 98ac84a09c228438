"""The suite's ISA report: which CPU ISAs it compiled kernels for and which it ran them on.

Each process (xdist workers included) notes what it did in a folder that tests/conftest.py
names for the whole session; the terminal summary reads them all. No tunehub import: the
conftest loads this before any tunehub setting is read.
"""

from __future__ import annotations

import os
from pathlib import Path

# The folder of the notes, one file per process, a `compiled <isa>` / `ran <isa>` line each.
ISA_LOG_ENV = "TUNEHUB_TEST_ISA_LOG"
_NOTED: set[str] = set()


def note_isa(what: str, isa: str) -> None:
    """Note that this process `what` ("compiled", "ran") kernels for `isa`."""
    line = f"{what} {isa}"
    folder = os.environ.get(ISA_LOG_ENV)
    if line in _NOTED or not folder:
        return
    _NOTED.add(line)
    with open(Path(folder) / f"{os.getpid()}.txt", "a") as log:
        log.write(line + "\n")


def isa_report(folder: Path) -> dict[str, set[str]]:
    """The ISAs every process noted in `folder`, by what it did with them."""
    found: dict[str, set[str]] = {"compiled": set(), "ran": set()}
    for path in folder.glob("*.txt"):
        for line in path.read_text().splitlines():
            what, _, isa = line.partition(" ")
            found.setdefault(what, set()).add(isa)
    return found
