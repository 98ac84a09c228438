"""The graph the ONNX and torch.export frontends translate a model into, before `fusion`
groups it: values (tensors with a shape, a dtype, and whether they are weights), ops of the
kinds `ops` knows, and the ops left out already (unsupported types, unknown shapes).

Each frontend reads its own format into this one graph, so grouping and the mapping to
signatures are written once. Shapes hold integers and symbol names, as signatures do; a
rank-0 tensor is held as shape `(1,)` (a signature reads every tensor with an index).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tunehub.frontends.taskset import Skipped
from tunehub.schemas.signature import Extent, SymbolDecl

Scalar = int | float | bool


@dataclass(frozen=True)
class Value:
    """A tensor of the model. `constant`: a weight, parameter or buffer (known before the model
    runs, so ops computed from it alone are a kernel's prologue); `literal`: a scalar whose
    value is known, written into expressions instead of read."""

    name: str
    shape: tuple[Extent, ...]
    dtype: str
    constant: bool = False
    literal: Scalar | None = None

    def __post_init__(self) -> None:
        if not self.shape:
            object.__setattr__(self, "shape", (1,))


@dataclass(frozen=True)
class Op:
    """One op of the model: `kind` names its computes in `ops.KINDS`, `op_type` is the
    model's own name for it (`MatMul`, `aten.linear.default`), `inputs` name values (None for
    an optional input left out), `attrs` are the kind's parameters."""

    name: str
    op_type: str
    kind: str
    inputs: tuple[str | None, ...]
    output: str
    attrs: Mapping[str, Any] = field(default_factory=dict)


@dataclass
class Graph:
    """A model as the frontends read it: `ops` in an order where each op's inputs are
    computed before it, `outputs` the values the model returns, `skipped` the ops left out
    and `skipped_reads` the values they read (which a kernel must write all the same), and
    `folded` the ops whose values depend on constants and shapes alone, which a frontend
    writes no op for: their values are constants, computed once when the model is loaded
    (each named by its value)."""

    symbols: dict[str, SymbolDecl]
    values: dict[str, Value]
    ops: list[Op]
    outputs: list[str]
    skipped: list[Skipped] = field(default_factory=list)
    skipped_reads: set[str] = field(default_factory=set)
    folded: list[Skipped] = field(default_factory=list)
