"""The computes of the graph ops that reduce: contractions (a sum of products taken in the
accumulator dtype, then an epilogue: matmul, gemm, linear, conv2d, MatMulNBits) and row ops
(statistics over the reduced axes `attrs["axes"]`, then the output: softmax, layer norm, rms
norm, a plain reduction). A contraction of 16-bit floats accumulates in float32 and casts its
result, as the frameworks do; row statistics of 16-bit floats are float32."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tunehub.compiler.dtypes import to_numpy
from tunehub.frontends.computes import (
    Call,
    Operand,
    Unsupported,
    accumulator,
    axes,
    broadcast,
    cast,
    compute,
    number,
)
from tunehub.schemas.signature import ComputeDecl, Extent


def _accumulate(
    call: Call,
    factors: list[tuple[str, str]],
    extents: Mapping[str, Extent],
    epilogue: Callable[[str], str] | None = None,
) -> list[ComputeDecl]:
    """`out = epilogue(sum over extents of the product of factors)`; factors are (text,
    dtype), each cast to the accumulator; `epilogue` maps the sum's read to the output's
    value (None: the sum itself)."""
    out = call.out
    acc_dtype = accumulator(out.dtype)
    body = " * ".join(cast(text, dtype, acc_dtype) for text, dtype in factors)
    if epilogue is None and acc_dtype == out.dtype:
        return [compute(out.name, out.shape, out.dtype, body, ("sum", extents))]
    acc = call.temp("acc")
    read = f"{acc}[{', '.join(axes(len(out.shape)))}]"
    return [
        compute(acc, out.shape, acc_dtype, body, ("sum", extents)),
        compute(out.name, out.shape, out.dtype, epilogue(read) if epilogue else read),
    ]


def _plus(
    term: Operand | None, point: Sequence[str], shape: Sequence[Extent], scale: Any = 1
) -> Callable[[str], str] | None:
    """The epilogue adding `scale * term` (read with broadcasting) to the sum; None for no
    term."""
    if term is None:
        return None
    text = term.read(point, shape)
    text = text if scale == 1 else f"{number(scale)} * {text}"
    return lambda acc: f"{acc} + {text}"


def matmul(call: Call) -> list[ComputeDecl]:
    """numpy's matmul: `[..., M, K] @ [..., K, N]`, batch dimensions broadcast, a 1-D operand
    a vector."""
    a, b, out = call.operand(0), call.operand(1), call.out
    if len(a.shape) == 1 and len(b.shape) == 1:
        raise Unsupported("a dot product of two vectors")
    point = axes(len(out.shape))
    batch = len(out.shape) - (len(a.shape) > 1) - (len(b.shape) > 1)
    m = [point[batch]] if len(a.shape) > 1 else []
    n = [point[-1]] if len(b.shape) > 1 else []
    a_idx = [*broadcast(a.shape[:-2], point[:batch], out.shape[:batch]), *m, "k0"]
    b_idx = [*broadcast(b.shape[:-2], point[:batch], out.shape[:batch]), "k0", *n]
    factors = [(a.at(a_idx), a.dtype), (b.at(b_idx), b.dtype)]
    return _accumulate(call, factors, {"k0": a.shape[-1]})


def gemm(call: Call) -> list[ComputeDecl]:
    """ONNX's Gemm (torch's addmm): `alpha * A' @ B' + beta * C` with A' and B' transposed
    where `trans_a`, `trans_b`."""
    a, b, c, out = call.operand(0), call.operand(1), call.optional(2), call.out
    alpha, beta = call.attrs.get("alpha", 1.0), call.attrs.get("beta", 1.0)
    m, n = axes(2)
    a_idx = ["k0", m] if call.attrs.get("trans_a") else [m, "k0"]
    b_idx = [n, "k0"] if call.attrs.get("trans_b") else ["k0", n]
    k = a.shape[0] if call.attrs.get("trans_a") else a.shape[1]
    product = [(a.at(a_idx), a.dtype), (b.at(b_idx), b.dtype)]
    bias = _plus(c if beta else None, [m, n], out.shape, beta)
    if alpha == 1:
        return _accumulate(call, product, {"k0": k}, bias)
    scaled = number(alpha)
    return _accumulate(call, product, {"k0": k}, lambda acc: (bias or str)(f"{scaled} * {acc}"))


def linear(call: Call) -> list[ComputeDecl]:
    """torch's linear: `x @ W.T + bias` for x of any rank `[..., K]` and W `[N, K]`."""
    x, w, out = call.operand(0), call.operand(1), call.out
    point = axes(len(out.shape))
    factors = [(x.at([*point[:-1], "k0"]), x.dtype), (w.at([point[-1], "k0"]), w.dtype)]
    return _accumulate(
        call, factors, {"k0": x.shape[-1]}, _plus(call.optional(2), point, out.shape)
    )


def _offset(axis: str, stride: int, tap: str, dilation: int, pad: int) -> str:
    """The input position `axis * stride + tap * dilation - pad`, without the unit factors."""
    text = axis if stride == 1 else f"{axis} * {stride}"
    text += f" + {tap}" if dilation == 1 else f" + {tap} * {dilation}"
    return f"{text} - {pad}" if pad else text


def conv2d(call: Call) -> list[ComputeDecl]:
    """A 2-D convolution over NCHW with strides, pads (top, left, bottom, right), dilations and
    groups; padding reads are guarded with `where`."""
    x, w = call.operand(0), call.operand(1)
    (sh, sw), (dh, dw) = call.attrs["strides"], call.attrs["dilations"]
    top, left, bottom, right = call.attrs["pads"]
    groups = call.attrs.get("groups", 1)
    n, f, y, z = axes(4)
    h = _offset(y, sh, "k1", dh, top)
    v = _offset(z, sw, "k2", dw, left)
    channel = "k0"
    if groups != 1:
        filters, channels = w.shape[0], x.shape[1]
        if not (isinstance(filters, int) and isinstance(channels, int)):
            raise Unsupported("a grouped convolution with symbolic channels")
        channel = f"{f} // {filters // groups} * {channels // groups} + k0"
    read = x.at([n, channel, h, v])
    checks = []
    if top or bottom:
        checks += [f"{h} >= 0", f"{h} < {x.shape[2]}"]
    if left or right:
        checks += [f"{v} >= 0", f"{v} < {x.shape[3]}"]
    if checks:
        read = f"where({' and '.join(checks)}, {read}, 0)"
    factors = [(read, x.dtype), (w.at([f, "k0", "k1", "k2"]), w.dtype)]
    extents = {"k0": w.shape[1], "k1": w.shape[2], "k2": w.shape[3]}
    bias = call.optional(2)
    if bias is None:
        return _accumulate(call, factors, extents)
    return _accumulate(call, factors, extents, lambda acc: f"{acc} + {bias.at([f])}")


def matmul_nbits(call: Call) -> list[ComputeDecl]:
    """onnxruntime's MatMulNBits: `A [..., K] @ dequantize(B).T`, B `[N, K / block, block *
    bits / 8]` uint8 with the element of even index in the low bits, scales `[N * blocks]` (or
    `[N, blocks]`), zero points packed the same way in uint8 (`[N * ceil(blocks * bits / 8)]`)
    or as floats like the scales, 2^(bits-1) without; an optional bias `[N]`. The weight is
    dequantized into a compute of its own, in the scales' dtype, as the kernel's prologue."""
    a, packed, scales, zeros, out = (*map(call.optional, range(4)), call.out)
    if call.optional(4) is not None:
        raise Unsupported("MatMulNBits with g_idx (act-order) is not mapped")
    if a is None or packed is None or scales is None:
        raise Unsupported("MatMulNBits needs A, B and scales")
    bits, block, k_extent = call.attrs["bits"], call.attrs["block_size"], call.attrs["K"]
    if bits not in (2, 4, 8):
        raise Unsupported(f"MatMulNBits with {bits} bits is not mapped (2, 4 or 8)")
    per_byte, mask = 8 // bits, 2**bits - 1
    n, k = axes(2)

    def unpack(byte: str, position: str) -> str:
        if per_byte == 1:
            return byte
        return f"(({byte} >> ({bits} * ({position} % {per_byte}))) & {mask})"

    def per_block(operand: Operand, column: str) -> str:
        if len(operand.shape) == 1:
            return operand.at([f"{n} * {operand.shape[0] // call.attrs['N']} + {column}"])
        return operand.at([n, column])

    level = unpack(packed.at([n, f"{k} // {block}", f"{k} % {block} // {per_byte}"]), k)
    if zeros is None:
        zero = number(2 ** (bits - 1))
    elif zeros.dtype == "uint8":
        zero = unpack(per_block(zeros, f"{k} // {block} // {per_byte}"), f"{k} // {block}")
        zero = cast(zero, "uint8", scales.dtype)
    else:
        zero = per_block(zeros, f"{k} // {block}")
    weight_value = (
        f"({cast(level, 'uint8', scales.dtype)} - {zero}) * {per_block(scales, f'{k} // {block}')}"
    )
    weight = call.temp("weight")
    point = axes(len(out.shape))
    factors = [(a.at([*point[:-1], "k0"]), a.dtype), (f"{weight}[{point[-1]}, k0]", scales.dtype)]
    return [
        compute(weight, [call.attrs["N"], k_extent], scales.dtype, weight_value),
        *_accumulate(call, factors, {"k0": k_extent}, _plus(call.optional(5), point, out.shape)),
    ]


# Row ops: statistics over the reduced axes (`attrs["axes"]`), then the output.


@dataclass(frozen=True)
class _Rows:
    """How a row op reads its input `x`: inside a statistic's compute (kept dimensions on
    its axes, reduced ones on `k0..`) and at a point of the output (kept dimensions only)."""

    x: Operand
    reduced: tuple[int, ...]

    @property
    def kept(self) -> list[int]:
        return [d for d in range(len(self.x.shape)) if d not in self.reduced]

    @property
    def shape(self) -> list[Extent]:
        return [self.x.shape[d] for d in self.kept] or [1]

    @property
    def extents(self) -> dict[str, Extent]:
        return {f"k{j}": self.x.shape[d] for j, d in enumerate(self.reduced)}

    def count(self, dtype: str) -> str:
        """The number of elements of a row, as a `dtype` value."""
        extents = [self.x.shape[d] for d in self.reduced]
        sizes = [e for e in extents if isinstance(e, int)]
        if len(sizes) == len(extents):
            return repr(float(math.prod(sizes)))
        return f"{dtype}({' * '.join(map(str, extents))})"

    def inside(self) -> str:
        """`x` read inside a statistic's compute."""
        indices = [""] * len(self.x.shape)
        for j, d in enumerate(self.kept):
            indices[d] = f"i{j}"
        for j, d in enumerate(self.reduced):
            indices[d] = f"k{j}"
        return self.x.at(indices)

    def stat(self, name: str, point: Sequence[str] | None = None) -> str:
        """The statistic `name` at a point of the output (None: inside another statistic)."""
        if point is None:
            return f"{name}[{', '.join(axes(len(self.shape)))}]"
        return f"{name}[{', '.join([point[d] for d in self.kept] or ['0'])}]"


def _rows(call: Call) -> tuple[_Rows, str, Callable[[str], str]]:
    """The op's rows, the dtype of its statistics, and the cast into it."""
    x = call.operand(0)
    rows = _Rows(x, tuple(call.attrs["axes"]))
    acc = accumulator(x.dtype)
    return rows, acc, lambda text: cast(text, x.dtype, acc)


def softmax(call: Call) -> list[ComputeDecl]:
    """The row's max, the sum of exponentials shifted by it, then each exponential over the
    sum (with `log`: the logarithm of that)."""
    rows, acc, f = _rows(call)
    out, x = call.out, rows.x
    point = axes(len(out.shape))
    top, total = call.temp("max"), call.temp("sum")
    shifted = f"exp({f(rows.inside())} - {f(rows.stat(top))})"
    at_point = f"{f(x.at(point))} - {f(rows.stat(top, point))}"
    value = (
        f"{at_point} - log({rows.stat(total, point)})"
        if call.attrs.get("log")
        else f"exp({at_point}) / {rows.stat(total, point)}"
    )
    return [
        compute(top, rows.shape, x.dtype, rows.inside(), ("max", rows.extents)),
        compute(total, rows.shape, acc, shifted, ("sum", rows.extents)),
        compute(out.name, out.shape, out.dtype, value),
    ]


def _scale_shift(call: Call, value: str, point: Sequence[str]) -> str:
    """A norm's `value * weight + bias` (operands 1 and 2, either left out)."""
    weight, bias = call.optional(1), call.optional(2)
    if weight is not None:
        value = f"{value} * {weight.read(point, call.out.shape)}"
    if bias is not None:
        value = f"{value} + {bias.read(point, call.out.shape)}"
    return value


def layer_norm(call: Call) -> list[ComputeDecl]:
    """The row's sum, the sum of squared deviations from its mean, then the normalized
    value, scaled and shifted by the optional weight and bias (operands 1 and 2)."""
    rows, acc, f = _rows(call)
    out, x, eps = call.out, rows.x, number(call.attrs["eps"])
    point = axes(len(out.shape))
    total, spread, count = call.temp("sum"), call.temp("sqdev"), rows.count(acc)
    deviation = f"({f(rows.inside())} - {rows.stat(total)} / {count})"
    centered = f"({f(x.at(point))} - {rows.stat(total, point)} / {count})"
    normed = f"{centered} * rsqrt({rows.stat(spread, point)} / {count} + {eps})"
    return [
        compute(total, rows.shape, acc, f(rows.inside()), ("sum", rows.extents)),
        compute(spread, rows.shape, acc, f"{deviation} * {deviation}", ("sum", rows.extents)),
        compute(out.name, out.shape, out.dtype, _scale_shift(call, normed, point)),
    ]


def rms_norm(call: Call) -> list[ComputeDecl]:
    """The row's sum of squares, then the value over its root mean square, scaled by the
    optional weight."""
    rows, acc, f = _rows(call)
    out, x, eps = call.out, rows.x, number(call.attrs["eps"])
    point = axes(len(out.shape))
    squares, count = call.temp("sumsq"), rows.count(acc)
    normed = f"{f(x.at(point))} * rsqrt({rows.stat(squares, point)} / {count} + {eps})"
    return [
        compute(
            squares,
            rows.shape,
            acc,
            f"{f(rows.inside())} * {f(rows.inside())}",
            ("sum", rows.extents),
        ),
        compute(out.name, out.shape, out.dtype, _scale_shift(call, normed, point)),
    ]


def reduction(call: Call) -> list[ComputeDecl]:
    """A sum, mean, max, min or product over `axes`, keeping them as extent-1 dimensions
    where `keepdims`."""
    x, out, op = call.operand(0), call.out, call.attrs["op"]
    rows = _Rows(x, tuple(call.attrs["axes"]))
    point = axes(len(out.shape))
    indices = [""] * len(x.shape)
    for j, d in enumerate(rows.kept):
        indices[d] = point[d] if call.attrs.get("keepdims") else point[j]
    for j, d in enumerate(rows.reduced):
        indices[d] = f"k{j}"
    acc = x.dtype if op in ("max", "min") else accumulator(out.dtype)
    body = cast(x.at(indices), x.dtype, acc)
    if op != "mean" and acc == out.dtype:
        return [compute(out.name, out.shape, out.dtype, body, (op, rows.extents))]
    total = call.temp(op)
    read = f"{total}[{', '.join(point)}]"
    value = f"{read} / {rows.count(acc)}" if op == "mean" else read
    return [
        compute(total, out.shape, acc, body, ("sum" if op == "mean" else op, rows.extents)),
        compute(out.name, out.shape, out.dtype, value),
    ]


# Window ops: a reduction over a window of each output position.


def _lowest(dtype: str) -> str:
    """The lowest finite value of a float dtype, as a literal: what a max pool's padding reads."""
    text = number(float(np.finfo(to_numpy(dtype)).min))
    assert text is not None  # finite
    return text


@dataclass(frozen=True)
class _Windows:
    """A pool's windows over the spatial dimensions (2 on) of `[N, C, ...]`: `kernel` taps
    `dilations` apart, `strides` apart, the input padded by `pads` (begins, then ends). At
    a point of the output: `read`, the input at tap `k0..`; `guard`, the bounds the read
    must be checked against (none where no window reaches the padding)."""

    read: str
    guard: str | None
    extents: dict[str, Extent]


def _windows(call: Call) -> tuple[_Windows, list[str]]:
    """The windows of a pool, and per spatial dimension the start of a window (its first
    tap's position, before dilation) at the output's point."""
    x, out, attrs = call.operand(0), call.out, call.attrs
    kernel, strides, dilations, pads = (
        attrs[k] for k in ("kernel", "strides", "dilations", "pads")
    )
    point = axes(len(out.shape))
    indices, checks, starts = list(point[:2]), [], []
    for d, (size, extent) in enumerate(zip(x.shape[2:], out.shape[2:], strict=True)):
        if not (isinstance(size, int) and isinstance(extent, int)):
            raise Unsupported("a pool over a symbolic dimension")
        begin = pads[d]
        start = point[2 + d] if strides[d] == 1 else f"{point[2 + d]} * {strides[d]}"
        starts.append(f"{start} - {begin}" if begin else start)
        indices.append(_offset(point[2 + d], strides[d], f"k{d}", dilations[d], begin))
        last = (extent - 1) * strides[d] + (kernel[d] - 1) * dilations[d] - begin
        if begin or last >= size:
            checks += [f"{indices[-1]} >= 0", f"{indices[-1]} < {size}"]
    guard = " and ".join(checks) or None
    extents: dict[str, Extent] = {f"k{d}": taps for d, taps in enumerate(kernel)}
    return _Windows(x.at(indices), guard, extents), starts


def max_pool(call: Call) -> list[ComputeDecl]:
    """The largest tap of each window; padding reads the dtype's lowest finite value."""
    x, out = call.operand(0), call.out
    windows, _ = _windows(call)
    value = windows.read
    if windows.guard:
        value = f"where({windows.guard}, {value}, {_lowest(x.dtype)})"
    return [compute(out.name, out.shape, out.dtype, value, ("max", windows.extents))]


def avg_pool(call: Call) -> list[ComputeDecl]:
    """The mean of each window's taps inside the input, or (`count_include_pad`) inside the
    padded input, as ONNX's AveragePool: a count per output position only where windows
    are clipped."""
    x, out, attrs = call.operand(0), call.out, call.attrs
    if any(d != 1 for d in attrs["dilations"]):
        raise Unsupported("an average pool with dilations")
    windows, starts = _windows(call)
    spatial, acc = len(starts), accumulator(x.dtype)
    counts, constant = [], 1
    for d, start in enumerate(starts):
        size, extent = int(x.shape[2 + d]), int(out.shape[2 + d])  # ints (`_windows`)
        taps, begin, end = attrs["kernel"][d], attrs["pads"][d], attrs["pads"][spatial + d]
        low, high = (-begin, size + end) if attrs["count_include_pad"] else (0, size)
        if -begin >= low and (extent - 1) * attrs["strides"][d] + taps - begin <= high:
            constant *= taps  # every window within [low, high)
        else:
            counts.append(f"(min({start} + {taps}, {high}) - max({start}, {low}))")
    read = cast(windows.read, x.dtype, acc)
    value = f"where({windows.guard}, {read}, 0)" if windows.guard else read
    total = call.temp("sum")
    factors = [*counts, str(constant)] if constant != 1 else counts
    divisor = f"{acc}({' * '.join(factors)})" if counts else repr(float(constant))
    mean = cast(f"{total}[{', '.join(axes(len(out.shape)))}] / {divisor}", acc, out.dtype)
    return [
        compute(total, out.shape, acc, value, ("sum", windows.extents)),
        compute(out.name, out.shape, out.dtype, mean),
    ]


def lrn(call: Call) -> list[ComputeDecl]:
    """ONNX's LRN: `x / (bias + alpha / size * sum of x^2 over a window of size channels)
    ^ beta`, the window from `(size - 1) // 2` channels before to the rest after."""
    x, out = call.operand(0), call.out
    size, channels = call.attrs["size"], x.shape[1]
    point = axes(len(out.shape))
    acc = accumulator(x.dtype)
    channel = f"{point[1]} - {(size - 1) // 2} + k0" if size > 1 else point[1]
    tap = cast(x.at([point[0], channel, *point[2:]]), x.dtype, acc)
    square = f"where({channel} >= 0 and {channel} < {channels}, {tap} * {tap}, 0)"
    squares = call.temp("sumsq")
    scale = number(call.attrs["alpha"] / size)
    base = f"{number(call.attrs['bias'])} + {scale} * {squares}[{', '.join(point)}]"
    value = f"{cast(x.at(point), x.dtype, acc)} / pow({base}, {number(call.attrs['beta'])})"
    return [
        compute(squares, out.shape, acc, square, ("sum", {"k0": size})),
        compute(out.name, out.shape, out.dtype, cast(value, acc, out.dtype)),
    ]
