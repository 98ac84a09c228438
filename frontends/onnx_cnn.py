"""The ONNX ops of convolutional networks that are more than one op kind's parameters: a
pool's windows and output size, and inference BatchNormalization, which becomes a per-channel
scale and shift.

BatchNormalization in inference is `(x - mean) / sqrt(var + eps) * scale + bias` per channel:
the ops written here compute `s = scale * rsqrt(var + eps)` and `t = bias - mean * s` (from
the weights alone, so `fusion` folds them: computed once, when the model is loaded) and then
`x * s + t`, two elementwise ops that join the preceding Conv's or Gemm's epilogue, or any
other group, as a fusing compiler folds a batch norm (`docs/decisions.md`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from tunehub.frontends.computes import Unsupported
from tunehub.frontends.graph import Op, Value
from tunehub.schemas.signature import Extent

POOLS = ("MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool")


def pool(
    op_type: str, shape: Sequence[Extent], attrs: Mapping[str, Any]
) -> tuple[str, dict[str, Any], tuple[Extent, ...]]:
    """(kind, parameters, output shape) of a pool over `[N, C, ...]`: a global pool is a
    reduction over the spatial dimensions; the others, windows (ONNX's output size: floor,
    or ceil with `ceil_mode`, a window starting in the right padding dropped; `auto_pad`)."""
    spatial = len(shape) - 2
    if spatial < 1:
        raise Unsupported(f"a pool of a rank-{len(shape)} tensor")
    if op_type.startswith("Global"):
        op = "mean" if op_type == "GlobalAveragePool" else "max"
        params = {"op": op, "axes": tuple(range(2, len(shape))), "keepdims": True}
        return "reduce", params, (*shape[:2], *[1] * spatial)
    sizes = shape[2:]
    if not all(isinstance(size, int) for size in sizes):
        raise Unsupported("a pool over a symbolic dimension")
    kernel = list(attrs["kernel_shape"])
    strides = list(attrs.get("strides", [1] * spatial))
    dilations = list(attrs.get("dilations", [1] * spatial))
    pads = list(attrs.get("pads", [0] * 2 * spatial))
    auto_pad = attrs.get("auto_pad", "NOTSET")
    out: list[Extent] = []
    for d, size in enumerate(sizes):
        assert isinstance(size, int)
        reach = (kernel[d] - 1) * dilations[d] + 1
        if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            out.append(-(-size // strides[d]))
            total = max((out[-1] - 1) * strides[d] + reach - size, 0)  # type: ignore[operator]
            early = total // 2 if auto_pad == "SAME_UPPER" else total - total // 2
            pads[d], pads[spatial + d] = early, total - early
            continue
        if auto_pad == "VALID":
            pads[d] = pads[spatial + d] = 0
        span = size + pads[d] + pads[spatial + d] - reach
        count = (math.ceil if attrs.get("ceil_mode") else math.floor)(span / strides[d]) + 1
        if attrs.get("ceil_mode") and (count - 1) * strides[d] >= size + pads[d]:
            count -= 1  # the last window would start in the padding
        out.append(count)
    params = {
        "kernel": kernel,
        "strides": strides,
        "dilations": dilations,
        "pads": pads,
        "count_include_pad": bool(attrs.get("count_include_pad", 0)),
    }
    return ("max_pool" if op_type == "MaxPool" else "avg_pool"), params, (*shape[:2], *out)


def batch_norm(
    name: str,
    inputs: Sequence[str | None],
    values: Mapping[str, Value],
    output: str,
    attrs: Mapping[str, Any],
) -> tuple[list[Value], list[Op]]:
    """The values and ops, in order, of an inference BatchNormalization of `inputs` (x,
    scale, bias, mean, var) into `output`: the scale and shift per channel, then `x * s + t`."""
    if attrs.get("training_mode") or attrs.get("spatial", 1) != 1:
        raise Unsupported("a BatchNormalization in training mode, or not spatial")
    if len(inputs) != 5 or any(v is None or v not in values for v in inputs):
        raise Unsupported("a BatchNormalization without its 5 inputs known")
    x, scale, bias, mean, var = (values[v] for v in inputs if v is not None)
    channels = (x.shape[1],) if len(x.shape) > 1 else x.shape
    eps = Value(
        f"{output}/bn_eps", (1,), x.dtype, constant=True, literal=attrs.get("epsilon", 1e-5)
    )
    made, ops = [eps], []

    def op(step: str, kind: str, reads: tuple[str, ...], shape: tuple[Extent, ...]) -> str:
        value = output if step == "apply" else f"{output}/bn_{step}"
        made.append(Value(value, shape, x.dtype))
        ops.append(Op(f"{name}/{step}", "BatchNormalization", kind, reads, value))
        return value

    root = op("rsqrt", "rsqrt", (op("spread", "add", (var.name, eps.name), channels),), channels)
    s = op("scale", "mul", (scale.name, root), channels)
    t = op(
        "shift", "sub", (bias.name, op("mean_scaled", "mul", (mean.name, s), channels)), channels
    )
    trailing = (1,) * (len(x.shape) - 2)
    if trailing:  # [C] read along dimension 1 of [N, C, ...]
        s = op("scale_per_channel", "reshape", (s,), (*channels, *trailing))
        t = op("shift_per_channel", "reshape", (t,), (*channels, *trailing))
    op("apply", "add", (op("scaled", "mul", (x.name, s), x.shape), t), x.shape)
    return made, ops
