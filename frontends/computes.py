"""How a graph op's computes are written: the operands an emitter reads (broadcast as numpy
does, or a literal), the call it gets, and the helpers that write a compute over the axes
`i0..` (reduce axes are `k0..`; `names` keeps tensors off both). `ops` and `reductions` write
each kind's computes with them; `tir` writes its blocks with `compute` too."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tunehub.schemas.signature import ComputeDecl, Extent

_HALF = ("float16", "bfloat16")


class Unsupported(Exception):
    """An op that cannot be written as computes; the message is why, on one line."""


# A view's indexing: the indices of the tensor it views, at a point of the view.
Indexing = Callable[[Sequence[str]], Sequence[str]]


@dataclass(frozen=True)
class Operand:
    """An op's input as the signature reads it: its name there, shape and dtype; or a scalar
    whose value is written into the expression (`literal`). An operand that is a view of a
    tensor (a reshape, a transpose, a slice, ...) has the view's shape and reads the tensor it
    views, `name`, through `indexing`: a view is read through, never copied."""

    name: str
    shape: tuple[Extent, ...]
    dtype: str
    literal: str | None = None
    indexing: Indexing | None = None

    def at(self, indices: Sequence[str]) -> str:
        if self.literal is not None:
            return self.literal
        if self.indexing is not None:
            indices = self.indexing(indices)
        return f"{self.name}[{', '.join(indices)}]"

    def read(self, axes: Sequence[str], shape: Sequence[Extent]) -> str:
        """This operand at the point `axes` of an output of `shape`, broadcast as numpy does."""
        if self.literal is not None:
            return self.literal
        return self.at(broadcast(self.shape, axes, shape))


def broadcast(shape: Sequence[Extent], axes: Sequence[str], out: Sequence[Extent]) -> list[str]:
    """The indices of a tensor of `shape` at the point `axes` of an output of shape `out`, as
    numpy broadcasts: aligned on the right, an extent-1 dimension read at 0."""
    offset = len(out) - len(shape)
    if offset < 0:
        raise Unsupported(f"cannot broadcast {list(shape)} to {list(out)}")
    indices = []
    for d, extent in enumerate(shape):
        if extent == out[offset + d]:
            indices.append(axes[offset + d])
        elif extent == 1:
            indices.append("0")
        else:
            raise Unsupported(f"cannot broadcast {list(shape)} to {list(out)}")
    return indices


@dataclass(frozen=True)
class Call:
    """One op as its kind's emitter sees it: operands (None where an optional input is left
    out), the output (the name its last compute takes, shape, dtype), the kind's parameters,
    and `temp`, which names an intermediate compute from a suffix."""

    operands: tuple[Operand | None, ...]
    out: Operand
    attrs: Mapping[str, Any]
    temp: Callable[[str], str]

    def operand(self, index: int) -> Operand:
        found = self.optional(index)
        if found is None:
            raise Unsupported(f"input {index} is missing")
        return found

    def optional(self, index: int) -> Operand | None:
        return self.operands[index] if index < len(self.operands) else None


def number(value: float | int | bool) -> str | None:
    """A scalar as the signature language writes it; None for inf and NaN (no literal)."""
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return str(value) if value >= 0 else f"({value})"
    if not math.isfinite(value):
        return None
    text = repr(float(value))
    return f"({text})" if text.startswith("-") else text


def axes(rank: int) -> list[str]:
    return [f"i{d}" for d in range(rank)]


def compute(
    name: str,
    shape: Sequence[Extent],
    dtype: str,
    expr: str,
    reduce: tuple[str, Mapping[str, Extent]] | None = None,
) -> ComputeDecl:
    """A compute over the axes `i0..` of `shape`; `reduce`: (op, reduce axes and extents)."""
    return ComputeDecl.model_validate(
        {
            "name": name,
            "axes": axes(len(shape)),
            "shape": list(shape),
            "dtype": dtype,
            "reduce": None if reduce is None else {"op": reduce[0], "axes": dict(reduce[1])},
            "expr": expr,
        }
    )


def accumulator(dtype: str) -> str:
    """The dtype sums of `dtype` values are taken in: float32 for 16-bit floats."""
    return "float32" if dtype in _HALF else dtype


def cast(text: str, source: str, dtype: str) -> str:
    return text if source == dtype else f"{dtype}({text})"


def is_float(dtype: str) -> bool:
    return dtype.startswith(("float", "bfloat"))
