"""From the tasks a frontend found to a task set: validate each, collapse identical ones,
count FLOPs, and list what was left out.

Identity is the workload key (`compiler.canonical.workload_key`), never a name: the 24
layers of a model whose kernels differ only in their tensors' names are one task of weight
24. FLOPs are an estimate on one rule for every frontend: a compute with a reduction counts
two per term (a multiply and an add), one without counts one per element, and an op left
out counts one per element of its output (when its shape is known). They are counted with
every symbol at the value a tuning takes when none is named (64, clamped into its range).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tunehub.compiler.canonical import workload_key
from tunehub.compiler.errors import SignatureError
from tunehub.compiler.program import load
from tunehub.frontends.errors import reason
from tunehub.schemas.api import DEFAULT_SYMBOL_VALUE
from tunehub.schemas.signature import ComputeDecl, Extent, SymbolDecl, TaskSignature
from tunehub.schemas.taskset import Flops, LeftOut, NoKernel, Task, TaskSet

# The range of a dynamic dimension whose model gives none (an ONNX dim_param, a TIR
# `T.int64()`, a torch Dim without a maximum): the sequence lengths of most LLM serving.
SYMBOL_RANGE = SymbolDecl(min=1, max=4096)


@dataclass(frozen=True)
class Source:
    """An op (or TIR function) of the model that a task was made of, and its FLOPs."""

    name: str
    op_type: str
    flops: int | None


@dataclass(frozen=True)
class Skipped:
    """An op (or TIR function) left out, why, and its FLOPs where they could be counted."""

    name: str
    op_type: str
    reason: str
    flops: int | None = None


@dataclass(frozen=True)
class Binding:
    """Where a graph frontend's task sits in its graph: the values its signature's inputs and
    outputs are, in signature order, the values its ops compute, and the views its ops read
    its inputs through (together, what a runtime replaces with the task's kernel:
    `tunehub.torch`)."""

    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    computed: tuple[str, ...]
    views: tuple[str, ...] = ()


@dataclass
class Found:
    """A task as a frontend found it: not validated yet, one occurrence of `weight` runs;
    `binding` for a task read off a graph."""

    signature: TaskSignature
    sources: list[Source]
    weight: float = 1.0
    binding: Binding | None = None


@dataclass
class _Collapsed:
    signature: TaskSignature
    weight: float
    sources: list[str] = field(default_factory=list)


def build(
    source: str,
    symbols: Mapping[str, SymbolDecl],
    found: Sequence[Found],
    skipped: Sequence[Skipped],
    no_kernel: Sequence[Skipped] = (),
) -> TaskSet:
    """The task set of a model: `found` validated (a task that does not validate is left out,
    every op of it), identical tasks one with their weights summed, FLOPs counted (at every
    symbol of `symbols`; the set keeps those its tasks use); `no_kernel` lists the ops that
    need none (their FLOPs are no part of a forward pass)."""
    at = flops_at(symbols)
    left = list(skipped)
    tasks: dict[str, _Collapsed] = {}
    for task in found:
        try:
            key = workload_key(load(task.signature))
        except SignatureError as exc:
            why = f"its task does not validate: {reason(exc)}"
            left += [Skipped(s.name, s.op_type, why, s.flops) for s in task.sources]
            continue
        entry = tasks.setdefault(key, _Collapsed(task.signature, 0.0))
        entry.weight += task.weight
        entry.sources += [s.name for s in task.sources]
    entries = [
        Task(
            signature=entry.signature,
            weight=entry.weight,
            source_ops=entry.sources,
            flops=signature_flops(entry.signature.computes, at),
        )
        for entry in tasks.values()
    ]
    left_out = [LeftOut(**entry) for entry in _by_type(left)]
    covered = sum(round(task.weight * task.flops) for task in entries)
    total = covered + sum(entry.flops or 0 for entry in left_out)
    used = {name for task in entries for name in task.signature.symbols}
    return TaskSet(
        source=source,
        symbols={name: decl for name, decl in symbols.items() if name in used},
        tasks=entries,
        left_out=left_out,
        no_kernel=[NoKernel(**entry) for entry in _by_type(no_kernel)],
        flops=Flops(at=at, covered=covered, total=total),
    )


def flops_at(symbols: Mapping[str, SymbolDecl]) -> dict[str, int]:
    """The symbol values FLOPs are counted at: a tuning's default, clamped into each range."""
    return {
        name: min(max(DEFAULT_SYMBOL_VALUE, decl.min), decl.max) for name, decl in symbols.items()
    }


def signature_flops(computes: Sequence[ComputeDecl], at: Mapping[str, int]) -> int:
    """Two FLOPs per term of a reduction, one per element of any other compute."""
    total = 0
    for decl in computes:
        points = elements(decl.shape, at)
        if decl.reduce is not None:
            points *= 2 * elements(list(decl.reduce.axes.values()), at)
        total += points
    return total


def elements(shape: Sequence[Extent], at: Mapping[str, int]) -> int:
    return math.prod(e if isinstance(e, int) else at[e] for e in shape)


def _by_type(skipped: Sequence[Skipped]) -> list[dict[str, Any]]:
    """One entry per op type and reason, in the order first seen; its FLOPs are None when
    any of its ops' are unknown."""
    grouped: dict[tuple[str, str], list[Skipped]] = {}
    for item in skipped:
        grouped.setdefault((item.op_type, item.reason), []).append(item)
    entries = []
    for (op_type, why), items in grouped.items():
        counts = [item.flops for item in items]
        entries.append(
            {
                "op": op_type,
                "reason": why,
                "count": len(items),
                "names": [item.name for item in items],
                "flops": None if None in counts else sum(c for c in counts if c is not None),
            }
        )
    return entries
