"""Shape arithmetic in ONNX graphs, folded when the file is read: `Shape` of a tensor whose
shape is known, and any deterministic node whose inputs are all small constants (a Gather of
a dimension, an Unsqueeze, a Concat of sizes, a Cast), as exporters write the target of a
Reshape or an Expand. The result is a small constant like an initializer, so the Reshape
that reads it is a view and no kernel computes sizes.

A node is computed by ONNX's reference evaluator on its constant inputs alone: it runs no
code of the file's but the ONNX ops' own, and only where its output cannot be large (ONNX
infers it small, or the op cannot make more elements than it reads).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from tunehub.schemas.signature import Extent

if TYPE_CHECKING:
    import onnx

# Ops whose output has no more elements than their inputs together.
_BOUNDED = {
    *("Gather", "Unsqueeze", "Squeeze", "Concat", "Cast", "Slice", "Reshape", "Identity"),
    *("Add", "Sub", "Mul", "Div", "Neg", "Abs", "Equal", "Less", "Greater", "Not", "Where"),
    *("Max", "Min", "ReduceProd", "ReduceSum", "ReduceMax", "ReduceMin", "Flatten"),
}
_RANDOM = ("RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike")


def fold(
    node: onnx.NodeProto,
    opset: int,
    arrays: Mapping[str, np.ndarray],
    shape: Sequence[Extent] | None,
    small: bool,
) -> np.ndarray | None:
    """The value of `node` if it is shape arithmetic on constants: `Shape` of a tensor of
    `shape` (all sizes known), or a deterministic op of the default domain whose inputs are
    all in `arrays` and whose output is `small` (as ONNX infers it) or bounded by them."""
    if node.domain not in ("", "ai.onnx") or len(node.output) != 1:
        return None
    if node.op_type == "Shape":
        if shape is None or not all(isinstance(e, int) for e in shape):
            return None
        attrs = {a.name: a.i for a in node.attribute}
        return np.array(list(shape)[attrs.get("start", 0) : attrs.get("end")], np.int64)
    inputs = [name for name in node.input if name]
    if not inputs or node.op_type in _RANDOM or not all(name in arrays for name in inputs):
        return None
    if not (small or node.op_type in _BOUNDED):
        return None
    return _evaluate(node, opset, {name: arrays[name] for name in inputs})


def _evaluate(node: onnx.NodeProto, opset: int, feeds: dict[str, np.ndarray]) -> Any:
    from onnx import helper, numpy_helper
    from onnx.reference import ReferenceEvaluator

    graph = helper.make_graph(
        [node],
        "fold",
        [],
        [helper.make_empty_tensor_value_info(node.output[0])],
        [numpy_helper.from_array(array, name) for name, array in feeds.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    try:
        (value,) = ReferenceEvaluator(model).run(None, {})
    except Exception:  # an op the evaluator lacks or refuses: the node is read as usual
        return None
    return np.asarray(value)
