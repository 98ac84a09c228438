"""The arguments of an exported kernel, read from its metadata, and the checks every loader
makes of a call, so kernels of every target accept and refuse exactly the same calls."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import ml_dtypes
import numpy as np


def numpy_dtype(dtype: str) -> np.dtype:
    """The numpy dtype holding values of a signature dtype (bfloat16 through ml_dtypes)."""
    if dtype == "bfloat16":
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(dtype)


@dataclass(frozen=True)
class Arg:
    name: str
    shape: tuple[int | str, ...]
    dtype: str  # a signature dtype: float32, float16, bfloat16, uint32, ...

    def __str__(self) -> str:
        return f"{self.name}: {self.dtype}{list(self.shape)}"


class Arguments:
    """A kernel's inputs, outputs and symbols (from its metadata), and the checks of a call."""

    def __init__(self, metadata: Mapping[str, Any]) -> None:
        args = [
            (Arg(a["name"], tuple(a["shape"]), a["dtype"]), a["role"]) for a in metadata["args"]
        ]
        self.inputs = [a for a, role in args if role == "input"]
        self.outputs = [a for a, role in args if role == "output"]
        self.symbols: list[str] = list(metadata.get("symbols", []))

    def __str__(self) -> str:
        return f"({', '.join(map(str, self.inputs))}) -> ({', '.join(map(str, self.outputs))})"

    def check_count(self, inputs: Sequence[Any]) -> None:
        if len(inputs) != len(self.inputs):
            names = ", ".join(a.name for a in self.inputs)
            raise ValueError(f"expected {len(self.inputs)} inputs ({names}), got {len(inputs)}")

    def bind(
        self, inputs: Sequence[tuple[tuple[int, ...], str]], given: Mapping[str, int]
    ) -> dict[str, int]:
        """Every symbol's value, from `given` and the inputs' (shape, dtype) in signature
        order, which must match the signature; ValueError with a message naming the input."""
        self.check_count(inputs)
        unknown = set(given) - set(self.symbols)
        if unknown:
            raise ValueError(f"unknown symbols: {', '.join(sorted(unknown))}")
        values = dict(given)
        for arg, (shape, dtype) in zip(self.inputs, inputs, strict=True):
            if dtype != arg.dtype:
                raise ValueError(f"input {arg.name!r} must have dtype {arg.dtype}, got {dtype}")
            _bind_shape(f"input {arg.name!r}", arg.shape, shape, values)
        missing = [s for s in self.symbols if s not in values]
        if missing:
            raise ValueError(
                f"symbols {', '.join(missing)} appear in no input: pass them as keywords"
            )
        return values

    def output_shapes(self, symbols: Mapping[str, int]) -> list[tuple[int, ...]]:
        return [shape(arg, symbols) for arg in self.outputs]

    def arg(self, name: str) -> Arg:
        """The input or output named `name` (KeyError if there is none)."""
        found = {a.name: a for a in (*self.inputs, *self.outputs)}
        return found[name]


def shape(arg: Arg, symbols: Mapping[str, int]) -> tuple[int, ...]:
    """`arg`'s shape at these symbol values."""
    return tuple(_extent(e, symbols) for e in arg.shape)


def _bind_shape(
    what: str, want: tuple[int | str, ...], got: tuple[int, ...], symbols: dict[str, int]
) -> None:
    """Check `got` against `want`, binding the symbols `want` names that are still unbound."""
    if len(got) != len(want):
        raise ValueError(
            f"{what} must have rank {len(want)} (shape {list(want)}), got shape {list(got)}"
        )
    for axis, (extent, size) in enumerate(zip(want, got, strict=True)):
        if isinstance(extent, str):
            bound = symbols.setdefault(extent, size)
            if bound != size:
                raise ValueError(
                    f"{what} axis {axis} is {extent}={size}, but {extent}={bound} elsewhere"
                )
        elif extent != size:
            raise ValueError(f"{what} must have shape {list(want)}, got {list(got)}")


def _extent(extent: int | str, symbols: Mapping[str, int]) -> int:
    return extent if isinstance(extent, int) else symbols[extent]
