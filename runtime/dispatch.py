"""Dispatch directories: the kernels of a symbolic workload tuned at several symbol values, and
the call that picks one by the shapes it is given.

    out/dispatch.json     the `schemas.dispatch.DispatchTable` (entry i: tuned values, record)
    out/k0/, out/k1/ ...  entry i's kernel directory, as `runtime.directory.save_kernel` writes it

`runtime.load_kernel(out)` returns a `DispatchKernel`: called like one kernel, it binds the
symbols from the inputs' shapes as every kernel does, lets `DispatchTable.select` pick the
entry, and loads that entry's kernel on its first use only (an application that only ever
decodes never loads its prefill kernels).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tunehub.runtime.arguments import Arguments
from tunehub.runtime.directory import METADATA, load_single, save_kernel
from tunehub.schemas.dispatch import DispatchEntry, DispatchTable

DISPATCH = "dispatch.json"
# What `save_kernel` takes for one kernel: the artifact, its source (if any), its metadata.
KernelFiles = tuple[bytes, str | None, dict[str, Any]]


def entry_directory(directory: Path, index: int) -> Path:
    """Where entry `index`'s kernel lies in a dispatch directory."""
    return directory / f"k{index}"


def save_dispatch(
    directory: str | Path, table: DispatchTable, kernels: Sequence[KernelFiles]
) -> Path:
    """Write a dispatch directory that `load_dispatch` (and `runtime.load_kernel`) reads back:
    `kernels[i]` is the kernel of `table.entries[i]`."""
    if len(kernels) != len(table.entries):
        raise ValueError(f"{len(kernels)} kernels for {len(table.entries)} dispatch entries")
    directory = Path(directory)
    for index, files in enumerate(kernels):
        save_kernel(entry_directory(directory, index), *files)
    (directory / DISPATCH).write_text(table.model_dump_json(indent=2) + "\n")
    return directory


def load_dispatch(directory: str | Path) -> DispatchKernel:
    """Load the dispatch directory `tunehub kernel --dispatch` or `tunehub download --dispatch`
    wrote (its kernels are loaded when first called)."""
    directory = Path(directory)
    table = DispatchTable.model_validate_json((directory / DISPATCH).read_text())
    # Every entry is the same workload: any entry's metadata describes the arguments.
    meta_path = entry_directory(directory, 0) / METADATA
    if not meta_path.is_file():
        raise FileNotFoundError(f"{meta_path} not found (a dispatch directory without kernels)")
    return DispatchKernel(directory, table, Arguments(json.loads(meta_path.read_text())))


class DispatchKernel:
    """Several kernels of one workload, called as one: each call runs the kernel tuned nearest
    the symbol values of its inputs (`DispatchTable.select`)."""

    def __init__(self, directory: Path, table: DispatchTable, arguments: Arguments) -> None:
        self.directory = directory
        self.table = table
        self.arguments = arguments
        self._loaded: dict[int, Any] = {}

    def __repr__(self) -> str:
        tuned = [entry.symbols for entry in self.table.entries]
        return f"<DispatchKernel {self.arguments} tuned at {tuned}>"

    def __call__(self, *inputs: Any, **symbols: int) -> Any:
        """Run the kernel `entry` picks on `inputs`, as that kernel's own call would."""
        return self.kernel(self.index(*inputs, **symbols))(*inputs, **symbols)

    def entry(self, *inputs: Any, **symbols: int) -> DispatchEntry:
        """The entry a call with these inputs (and symbol keywords) runs."""
        return self.table.entries[self.index(*inputs, **symbols)]

    def index(self, *inputs: Any, **symbols: int) -> int:
        """The position of `entry(...)` in the table, and of its kernel directory (`k<i>`).
        Only the shapes are read here; the kernel checks dtypes and layouts when it runs."""
        self.arguments.check_count(inputs)
        shapes = [
            (tuple(x.shape) if hasattr(x, "shape") else np.shape(x), arg.dtype)
            for arg, x in zip(self.arguments.inputs, inputs, strict=True)
        ]
        chosen = self.table.select(self.arguments.bind(shapes, symbols))
        return self.table.entries.index(chosen)

    def kernel(self, index: int) -> Any:
        """Entry `index`'s kernel, loaded on first use."""
        if index not in self._loaded:
            self._loaded[index] = load_single(entry_directory(self.directory, index))
        return self._loaded[index]


def served_ranges(table: DispatchTable) -> dict[int, tuple[int, int]] | None:
    """For a one-symbol table, `{entry index: (lowest, highest)}`: the values `select` picks
    each entry for, found at the boundaries by bisection (its nearest-on-a-log-scale rule gives
    every entry one interval around its tuned value, in the order of the tuned values). None
    for a table of several symbols, whose entries serve regions rather than intervals."""
    if len(table.ranges) != 1:
        return None
    ((name, declared),) = table.ranges.items()
    entries = table.entries

    def pick(value: int) -> int:
        return entries.index(table.select({name: value}))

    order = sorted(range(len(entries)), key=lambda i: entries[i].symbols[name])
    served, low = {}, declared.min
    for index in order[:-1]:
        lo, hi = entries[index].symbols[name], declared.max
        while lo < hi:  # the last value this entry is picked for
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if pick(mid) == index else (lo, mid - 1)
        served[index], low = (low, lo), lo + 1
    served[order[-1]] = (low, declared.max)
    return served
