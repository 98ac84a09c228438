"""Attention as the computes its eager form writes: `softmax(q @ k^T * scale + mask) @ v`.

One op kind (`attention`, from torch's `scaled_dot_product_attention`) is written as the
matmul, the scaled and masked scores, the softmax and the matmul with the values that a model
spells out in its eager form, so the compiler sees one form of attention, whichever a model
uses. Grouped key/value heads (`groups` query heads per key/value head) read their head as
`h // groups`, as a view; a boolean mask and `causal` (every query attends to the keys at or
before its own position, torch's top-left rule) keep a masked score at the dtype's lowest
finite value, as `transformers` does, so its exponential is exactly 0.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tunehub.frontends import reductions
from tunehub.frontends.computes import Call, Operand, Unsupported, axes, compute, number
from tunehub.runtime.arguments import numpy_dtype
from tunehub.schemas.signature import ComputeDecl


def attention(call: Call) -> list[ComputeDecl]:
    """`q [..., L, E]`, `k [..., S, E]`, `v [..., S, Ev]` (key/value heads, the last batch
    dimension, `groups` times fewer), an optional mask broadcast to `[..., L, S]` (bool: keep
    where True; float: added); attrs `scale`, `causal`, `groups`."""
    q, k, v, mask, out = (
        call.operand(0),
        call.operand(1),
        call.operand(2),
        call.optional(3),
        call.out,
    )
    groups = int(call.attrs.get("groups", 1))
    if len(q.shape) < 3 and groups != 1:
        raise Unsupported("grouped key/value heads without a head dimension")
    *batch, length, _ = q.shape
    keys = k.shape[-2]
    scores_shape = (*batch, length, keys)
    keys_t = _heads(k, groups, len(q.shape), transpose=True)
    values = _heads(v, groups, len(q.shape), transpose=False)
    scores = Operand(call.temp("scores"), scores_shape, out.dtype)
    computes = reductions.matmul(_call(call, (q, keys_t), scores))
    point = axes(len(scores_shape))
    value = f"{scores.at(point)} * {number(float(call.attrs['scale']))}"
    lowest = number(float(np.finfo(numpy_dtype(out.dtype)).min))
    if mask is not None and mask.dtype == "bool":
        value = f"where({mask.read(point, scores_shape)}, {value}, {lowest})"
    elif mask is not None:
        value = f"{value} + {mask.read(point, scores_shape)}"
    if call.attrs.get("causal"):
        value = f"where({point[-1]} <= {point[-2]}, {value}, {lowest})"
    masked = Operand(call.temp("masked"), scores_shape, out.dtype)
    computes.append(compute(masked.name, scores_shape, out.dtype, value))
    weights = Operand(call.temp("weights"), scores_shape, out.dtype)
    rows = {"axes": (len(scores_shape) - 1,)}
    computes += reductions.softmax(_call(call, (masked,), weights, rows))
    return computes + reductions.matmul(_call(call, (weights, values), out))


def _heads(x: Operand, groups: int, rank: int, *, transpose: bool) -> Operand:
    """Key or value `x` read at a query head's position (its head is `h // groups`),
    transposed (`[..., E, S]`) for the scores."""
    if len(x.shape) != rank:
        raise Unsupported(f"queries of rank {rank}, keys or values of rank {len(x.shape)}")
    shape = list(x.shape)
    if groups != 1:
        heads = shape[rank - 3]
        if not isinstance(heads, int):
            raise Unsupported("grouped key/value heads of a symbolic count")
        shape[rank - 3] = heads * groups
    if transpose:
        shape[-2], shape[-1] = shape[-1], shape[-2]

    def indexing(point: Sequence[str]) -> list[str]:
        indices = list(point)
        if transpose:
            indices[-2], indices[-1] = indices[-1], indices[-2]
        if groups != 1:
            indices[rank - 3] = f"({indices[rank - 3]}) // {groups}"
        return indices

    read = x.indexing
    composed = indexing if read is None else (lambda point: read(indexing(point)))
    return Operand(x.name, tuple(shape), x.dtype, x.literal, composed)


def _call(
    call: Call, operands: tuple[Operand, ...], out: Operand, attrs: dict | None = None
) -> Call:
    return Call(operands=operands, out=out, attrs=attrs or {}, temp=call.temp)
