"""The op kinds the graph frontends map models onto: each kind's fusion class, which
`fusion` groups by, and the computes it writes.

One place knows how a matmul, a softmax or a broadcasting add reads in the signature
language, whichever format the op came from: `onnx_model` and `torch_export` only name the
kind and its parameters. The classes:

- contraction: matmul, gemm, linear, conv2d, matmul_nbits (int4 weight-only), attention
  (`attention`: written as its eager form's matmuls and softmax);
- row: softmax (log_softmax with `log`), layer_norm, rms_norm, reduce (a reduction over
  `axes`), max_pool and avg_pool (over windows) and lrn (a sum over a window of channels);
- injective: elementwise ops (sum: of any number of operands), casts, dequantize, concat
  and gather (an element picked by an index tensor), whose computes are written here; the
  others' are in `reductions`;
- view: reshapes (view, squeeze, unsqueeze, flatten), transposes and permutes, broadcasts
  (torch's expand), copies (clone, contiguous, identity, inference dropout) and slices. A view
  computes nothing: its kind gives its *indexing* (which element of its input each of its
  elements is), and every op that reads a view reads its input through it (`fusion`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tunehub.frontends import attention, reductions
from tunehub.frontends.computes import (
    Call,
    Indexing,
    Operand,
    Unsupported,
    axes,
    broadcast,
    cast,
    compute,
    is_float,
    number,
)
from tunehub.schemas.signature import ComputeDecl, Extent

CONTRACTION, ROW, INJECTIVE, VIEW = "contraction", "row", "injective", "view"

# A view's indexing from its input's shape, its output's shape and its parameters.
ViewOf = Callable[[Sequence[Extent], Sequence[Extent], Mapping[str, Any]], Indexing]


@dataclass(frozen=True)
class Kind:
    """An op kind: its fusion class and how it is written, as computes (`emit`) or, for a
    view, as the indexing its readers read its input through (`view`)."""

    fusion: str
    emit: Callable[[Call], list[ComputeDecl]] | None = None
    view: ViewOf | None = None


# Elementwise ops: templates over the operands `a`, `b`, `c` (each read with broadcasting)
# and the op's numeric attributes.

_ELEMENTWISE = {
    "relu": "max({a}, 0)",
    "sigmoid": "sigmoid({a})",
    "tanh": "tanh({a})",
    "exp": "exp({a})",
    "log": "log({a})",
    "sqrt": "sqrt({a})",
    "rsqrt": "rsqrt({a})",
    "erf": "erf({a})",
    "abs": "abs({a})",
    "floor": "floor({a})",
    "ceil": "ceil({a})",
    "neg": "(-{a})",
    "not": "(not {a})",
    "bitwise_not": "(~{a})",
    "reciprocal": "(1.0 / {a})",
    "silu": "({a} * sigmoid({a}))",
    "gelu": "(0.5 * {a} * (1.0 + erf({a} * 0.7071067811865476)))",
    "gelu_tanh": (
        "(0.5 * {a} * (1.0 + tanh(0.7978845608028654 * ({a} + 0.044715 * {a} * {a} * {a}))))"
    ),
    "leaky_relu": "where({a} >= 0, {a}, {alpha} * {a})",
    "clip": "min(max({a}, {low}), {high})",
    "mul": "({a} * {b})",
    "pow": "pow({a}, {b})",
    "max": "max({a}, {b})",
    "min": "min({a}, {b})",
    "bitwise_and": "({a} & {b})",
    "bitwise_or": "({a} | {b})",
    "bitwise_xor": "({a} ^ {b})",
    "shift_left": "({a} << {b})",
    "shift_right": "({a} >> {b})",
    "equal": "({a} == {b})",
    "not_equal": "({a} != {b})",
    "less": "({a} < {b})",
    "less_equal": "({a} <= {b})",
    "greater": "({a} > {b})",
    "greater_equal": "({a} >= {b})",
    "and": "({a} and {b})",
    "or": "({a} or {b})",
    "where": "where({a}, {b}, {c})",
}


def _elementwise(template: str) -> Callable[[Call], list[ComputeDecl]]:
    def emit(call: Call) -> list[ComputeDecl]:
        out = call.out
        point = axes(len(out.shape))
        reads = {
            letter: operand.read(point, out.shape)
            for letter, operand in zip("abc", call.operands, strict=False)
            if operand is not None
        }
        params = {key: number(value) for key, value in call.attrs.items()}
        return [compute(out.name, out.shape, out.dtype, template.format(**reads, **params))]

    return emit


def _div(call: Call) -> list[ComputeDecl]:
    """True division of floats; integer division (truncating, as ONNX's and C's) of
    integers into an integer output."""
    a, b, out = call.operand(0), call.operand(1), call.out
    point = axes(len(out.shape))
    ta, tb = a.read(point, out.shape), b.read(point, out.shape)
    if not is_float(out.dtype):
        return [compute(out.name, out.shape, out.dtype, f"({ta} // {tb})")]
    if not (is_float(a.dtype) or is_float(b.dtype)):
        ta, tb = cast(ta, a.dtype, out.dtype), cast(tb, b.dtype, out.dtype)
    return [compute(out.name, out.shape, out.dtype, f"({ta} / {tb})")]


def _sum(call: Call) -> list[ComputeDecl]:
    """The sum of any number of operands (ONNX's Sum), each broadcast."""
    out = call.out
    point = axes(len(out.shape))
    terms = [operand.read(point, out.shape) for operand in call.operands if operand is not None]
    return [compute(out.name, out.shape, out.dtype, f"({' + '.join(terms)})")]


def _concat(call: Call) -> list[ComputeDecl]:
    """The operands one after another along `axis`: each point reads the operand whose range
    holds it (a `where` per boundary, so no read leaves its operand)."""
    out, axis = call.out, call.attrs["axis"]
    point = axes(len(out.shape))
    parts = [operand for operand in call.operands if operand is not None]
    starts, start = [], 0
    for operand in parts:
        starts.append(start)
        extent = operand.shape[axis]
        if not isinstance(extent, int):
            raise Unsupported("a concatenation along a symbolic dimension")
        start += extent

    def at(operand: Operand, offset: int) -> str:
        index = point[axis] if offset == 0 else f"{point[axis]} - {offset}"
        return operand.at([*point[:axis], index, *point[axis + 1 :]])

    value = at(parts[-1], starts[-1])
    for operand, offset in reversed(list(zip(parts[:-1], starts[:-1], strict=True))):
        end = offset + operand.shape[axis]
        value = f"where({point[axis]} < {end}, {at(operand, offset)}, {value})"
    return [compute(out.name, out.shape, out.dtype, value)]


def _gather(call: Call) -> list[ComputeDecl]:
    """ONNX's Gather (torch's embedding and index): the output's dimensions at `axis` are the
    indices' (none for one index, `attrs["scalar"]`), each picking an element of `axis` of
    the data; a negative index counts from the end, one out of range reads 0."""
    data, indices, out = call.operand(0), call.operand(1), call.out
    axis, extent = call.attrs["axis"], data.shape[call.attrs["axis"]]
    point = axes(len(out.shape))
    rank = 0 if call.attrs.get("scalar") else len(indices.shape)
    index = indices.at(point[axis : axis + rank] or ["0"])
    if is_float(indices.dtype) or indices.dtype == "bool":
        raise Unsupported(f"indices of dtype {indices.dtype}")
    wrapped = f"where({index} < 0, {index} + {extent}, {index})"
    read = data.at([*point[:axis], wrapped, *point[axis + rank :]])
    value = f"where({wrapped} >= 0 and {wrapped} < {extent}, {read}, 0)"
    return [compute(out.name, out.shape, out.dtype, value)]


def _cast(call: Call) -> list[ComputeDecl]:
    a, out = call.operand(0), call.out
    text = a.read(axes(len(out.shape)), out.shape)
    return [compute(out.name, out.shape, out.dtype, cast(text, a.dtype, out.dtype))]


def _scaled(operator: str) -> Callable[[Call], list[ComputeDecl]]:
    """`a + alpha * b` or `a - alpha * b` (torch's add and sub take an `alpha`, 1 mostly)."""

    def emit(call: Call) -> list[ComputeDecl]:
        alpha = call.attrs.get("alpha", 1)
        scaled = "{b}" if alpha == 1 else "{alpha} * {b}"
        return _elementwise(f"({{a}} {operator} {scaled})")(call)

    return emit


_ATOM = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|[0-9]+")


def _term(index: str) -> str:
    """An index expression as an operand of another (views compose: a point's indices may
    be expressions of an earlier view's)."""
    return index if _ATOM.fullmatch(index) else f"({index})"


def _broadcasting(
    source: Sequence[Extent], out: Sequence[Extent], attrs: Mapping[str, Any]
) -> Indexing:
    """A copy, or a broadcast to a larger shape (torch's expand), as numpy broadcasts."""
    broadcast(source, axes(len(out)), out)  # Unsupported now, not when first read
    return lambda point: broadcast(source, point, out)


def _transposing(
    source: Sequence[Extent], out: Sequence[Extent], attrs: Mapping[str, Any]
) -> Indexing:
    """Output dimension d is input dimension `perm[d]`."""
    perm = attrs["perm"]

    def indexing(point: Sequence[str]) -> list[str]:
        indices = [""] * len(perm)
        for d, source_dim in enumerate(perm):
            indices[source_dim] = point[d]
        return indices

    return indexing


def _reshaping(
    source: Sequence[Extent], out: Sequence[Extent], attrs: Mapping[str, Any]
) -> Indexing:
    """A reshape, squeeze, unsqueeze, flatten or view: the same row-major position, each run
    of dimensions with equal products mapped with `//` and `%`."""
    groups = _regroup(source, out)

    def indexing(point: Sequence[str]) -> list[str]:
        indices = ["0"] * len(source)
        for ins, outs in groups:
            flat = ""
            for d in outs:
                flat = f"({flat} * {out[d]} + {_term(point[d])})" if flat else _term(point[d])
            flat = flat or "0"
            stride = 1
            for position in reversed(range(len(ins))):
                index = flat if stride == 1 else f"{flat} // {stride}"
                if position > 0:  # `flat` is one token or parenthesized: `//` and `%` chain left
                    index = f"{index} % {source[ins[position]]}"
                indices[ins[position]] = index
                stride *= source[ins[position]]  # type: ignore[assignment]
        return indices

    return indexing


def _slicing(source: Sequence[Extent], out: Sequence[Extent], attrs: Mapping[str, Any]) -> Indexing:
    """Every `step`-th element of dimension `axis` from `start` on (the output's shape says
    how many)."""
    axis, start, step = attrs["axis"], attrs.get("start", 0), attrs.get("step", 1)

    def indexing(point: Sequence[str]) -> list[str]:
        index = point[axis] if step == 1 else f"{_term(point[axis])} * {step}"
        index = index if start == 0 else f"{start} + {_term(index)}"
        return [*point[:axis], index, *point[axis + 1 :]]

    return indexing


def _selecting(
    source: Sequence[Extent], out: Sequence[Extent], attrs: Mapping[str, Any]
) -> Indexing:
    """Element `index` of dimension `axis`, which the output drops."""
    axis, index = attrs["axis"], attrs["index"]
    return lambda point: [*point[:axis], str(index), *point[axis:]]


def _regroup(
    source: Sequence[Extent], target: Sequence[Extent]
) -> list[tuple[list[int], list[int]]]:
    """The runs of dimensions of `source` and `target` with equal products, in order (a run
    may be empty on one side for extent-1 dimensions). A symbol only matches itself."""
    groups: list[tuple[list[int], list[int]]] = []
    i = j = 0
    while i < len(source) or j < len(target):
        a = source[i] if i < len(source) else None
        b = target[j] if j < len(target) else None
        if a == 1 and b != 1:
            groups.append(([i], []))
            i += 1
        elif b == 1 and a != 1:
            groups.append(([], [j]))
            j += 1
        elif isinstance(a, int) and isinstance(b, int):
            ins, outs, size_in, size_out = [i], [j], a, b
            i, j = i + 1, j + 1
            while size_in != size_out:
                more_in = source[i] if i < len(source) else None
                more_out = target[j] if j < len(target) else None
                if size_in < size_out and isinstance(more_in, int):
                    size_in, i = size_in * more_in, i + 1
                    ins.append(i - 1)
                elif size_out < size_in and isinstance(more_out, int):
                    size_out, j = size_out * more_out, j + 1
                    outs.append(j - 1)
                else:
                    raise Unsupported(f"cannot reshape {list(source)} to {list(target)}")
            groups.append((ins, outs))
        elif a is not None and a == b:  # the same symbol
            groups.append(([i], [j]))
            i, j = i + 1, j + 1
        else:
            raise Unsupported(f"cannot reshape {list(source)} to {list(target)}")
    return groups


def _dequantize(call: Call) -> list[ComputeDecl]:
    """ONNX's DequantizeLinear: `(x - zero_point) * scale`, the scale (and zero point) per
    tensor, per `axis`, or per block of `block_size` along it."""
    x, scale, zero, out = call.operand(0), call.operand(1), call.optional(2), call.out
    point = axes(len(out.shape))
    axis, block = call.attrs.get("axis", 1), call.attrs.get("block_size", 0)

    def per_axis(operand: Operand) -> str:
        if operand.literal is not None or operand.shape == (1,):
            return operand.at(["0"])
        if block:
            return operand.at([f"{p} // {block}" if d == axis else p for d, p in enumerate(point)])
        return operand.at([point[axis]])

    level = cast(x.at(point), x.dtype, "float32")
    if zero is not None:
        level = f"({level} - {cast(per_axis(zero), zero.dtype, 'float32')})"
    value = f"{level} * {cast(per_axis(scale), scale.dtype, 'float32')}"
    return [compute(out.name, out.shape, out.dtype, value)]


KINDS: dict[str, Kind] = {
    **{name: Kind(INJECTIVE, _elementwise(t)) for name, t in _ELEMENTWISE.items()},
    "add": Kind(INJECTIVE, _scaled("+")),
    "sub": Kind(INJECTIVE, _scaled("-")),
    "div": Kind(INJECTIVE, _div),
    "cast": Kind(INJECTIVE, _cast),
    "sum": Kind(INJECTIVE, _sum),
    "concat": Kind(INJECTIVE, _concat),
    "gather": Kind(INJECTIVE, _gather),
    "identity": Kind(VIEW, view=_broadcasting),
    "transpose": Kind(VIEW, view=_transposing),
    "reshape": Kind(VIEW, view=_reshaping),
    "slice": Kind(VIEW, view=_slicing),
    "select": Kind(VIEW, view=_selecting),
    "dequantize": Kind(INJECTIVE, _dequantize),
    "matmul": Kind(CONTRACTION, reductions.matmul),
    "gemm": Kind(CONTRACTION, reductions.gemm),
    "linear": Kind(CONTRACTION, reductions.linear),
    "conv2d": Kind(CONTRACTION, reductions.conv2d),
    "matmul_nbits": Kind(CONTRACTION, reductions.matmul_nbits),
    "attention": Kind(CONTRACTION, attention.attention),
    "softmax": Kind(ROW, reductions.softmax),
    "layer_norm": Kind(ROW, reductions.layer_norm),
    "rms_norm": Kind(ROW, reductions.rms_norm),
    "reduce": Kind(ROW, reductions.reduction),
    "max_pool": Kind(ROW, reductions.max_pool),
    "avg_pool": Kind(ROW, reductions.avg_pool),
    "lrn": Kind(ROW, reductions.lrn),
}
