"""Test cases: the seeded inputs of a workload and its reference outputs, cached on disk.

The numpy reference of a big shape takes seconds, and a tuning measures hundreds of
candidates of one workload: each worker computes a case once and keeps it as an .npz under
`TUNEHUB_CACHE_DIR` (default `~/.cache/tunehub`), keyed by workload key, symbol values and
seed. The inputs are stored beside the outputs, so a case is self-consistent even if the
input generator changes (CASE_VERSION is bumped when the reference's semantics change).
Arrays are stored positionally (`in0`, `out0`, ...), since two signatures that differ only in
names share a workload key, and as unsigned bit patterns (npz cannot hold bfloat16).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tunehub.compiler import dtypes, inputs, reference
from tunehub.compiler.ir import Program

CASE_VERSION = 1


def cache_dir() -> Path:
    return Path(os.environ.get("TUNEHUB_CACHE_DIR") or Path.home() / ".cache" / "tunehub")


@dataclass(frozen=True)
class Case:
    """Where a case lies and how to read it back: the program names its arrays."""

    path: Path
    program: Program
    symbols: Mapping[str, int]

    @property
    def key(self) -> tuple[Any, ...]:
        """What a loaded case is reused by: one file serves every signature of a workload,
        each under its own tensor names."""
        program = self.program
        return (str(self.path), tuple(t.name for t in program.inputs), program.outputs)

    def load(self) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """(inputs, expected outputs) by the program's tensor names."""
        with np.load(self.path) as npz:
            ins = {
                t.name: _decode(npz[f"in{i}"], t.dtype) for i, t in enumerate(self.program.inputs)
            }
            outs = {
                name: _decode(npz[f"out{i}"], self.program.compute(name).dtype)
                for i, name in enumerate(self.program.outputs)
            }
        return ins, outs


class CaseCache:
    """Cases of one cache directory. `computed` counts the references this object evaluated.

    A file is validated (read in full) the first time this object hands it out, not per
    candidate: the measuring child reads it anyway.
    """

    def __init__(self, directory: Path | None = None) -> None:
        self.directory = (directory or cache_dir()) / "cases"
        self.computed = 0
        self._checked: set[Path] = set()

    def path(self, workload_key: str, symbols: Mapping[str, int], seed: int) -> Path:
        ident = json.dumps([CASE_VERSION, workload_key, sorted(symbols.items()), seed])
        digest = hashlib.sha256(ident.encode()).hexdigest()[:24]
        return self.directory / f"{workload_key[:16]}-{digest}.npz"

    def get(
        self, program: Program, workload_key: str, symbols: Mapping[str, int], seed: int
    ) -> Case:
        """The case of this workload, computing and storing it first if no worker has."""
        case = Case(self.path(workload_key, symbols, seed), program, dict(symbols))
        # A checked file is trusted while it exists (a cache clean-up may remove it).
        known = case.path in self._checked and case.path.exists()
        if not known and not _readable(case):
            self._compute(case, seed)
        self._checked.add(case.path)
        return case

    def _compute(self, case: Case, seed: int) -> None:
        program, symbols = case.program, dict(case.symbols)
        ins = inputs.random_inputs(program, symbols, seed)
        outs = reference.evaluate(program, ins, symbols)
        arrays: dict[str, Any] = {
            f"in{i}": _encode(ins[t.name]) for i, t in enumerate(program.inputs)
        }
        arrays.update({f"out{i}": _encode(outs[n]) for i, n in enumerate(program.outputs)})
        case.path.parent.mkdir(parents=True, exist_ok=True)
        # Write then rename: a concurrent reader sees the old file or the whole new one.
        fd, tmp = tempfile.mkstemp(dir=case.path.parent, suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                np.savez(f, **arrays)
            os.replace(tmp, case.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        self.computed += 1


def _readable(case: Case) -> bool:
    """Whether the cached file exists and fits the program (shapes and dtypes)."""
    try:
        ins, outs = case.load()
    except (OSError, KeyError, ValueError):
        return False
    names = [t.name for t in case.program.inputs] + list(case.program.outputs)
    arrays = {**ins, **outs}
    return all(
        arrays[n].shape == case.program.shape_of(n, dict(case.symbols))
        and arrays[n].dtype == dtypes.to_numpy(case.program.buffer(n).dtype)
        for n in names
    )


def _encode(array: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(array).view(f"u{array.dtype.itemsize}")


def _decode(array: np.ndarray, dtype: str) -> np.ndarray:
    return array.view(dtypes.to_numpy(dtype))
