"""The ONNX frontend: an `.onnx` file's graph as a `graph.Graph`, then a task set.

The file is parsed as protobuf (`onnx.load`, external weights left unread: only their shapes
matter) and checked (`onnx.checker`); nothing in it is executed but shape arithmetic on
small constants (`onnx_shapes`: ONNX's own ops, by its reference evaluator). Each node
becomes an op of a kind `ops` knows, with its output's shape worked out here (ONNX's own
shape inference does not know contrib ops such as MatMulNBits, nor anything after them); a
node of another type, or with inputs whose shapes are unknown, is left out with its reason.
Initializers and Constant nodes are weights; a one-element one is a literal in the
expressions; a ConstantOfShape of known shape is a weight too. A symbolic dimension
(`dim_param`) is a symbol over `taskset.SYMBOL_RANGE`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tunehub.frontends import fusion, onnx_cnn, onnx_shapes, taskset
from tunehub.frontends.computes import Unsupported
from tunehub.frontends.errors import ModelError
from tunehub.frontends.graph import Graph, Op, Value
from tunehub.frontends.names import identifier
from tunehub.schemas.signature import Extent, SymbolDecl
from tunehub.schemas.taskset import TaskSet

if TYPE_CHECKING:
    import onnx

# ONNX element types a signature has (TensorProto's numbers).
_DTYPES = {
    1: "float32",
    2: "uint8",
    3: "int8",
    5: "int16",
    6: "int32",
    7: "int64",
    9: "bool",
    10: "float16",
    11: "float64",
    12: "uint32",
    16: "bfloat16",
}
_ELEMENTWISE = {
    "Add": "add",
    "Sub": "sub",
    "Mul": "mul",
    "Div": "div",
    "Pow": "pow",
    "Max": "max",
    "Min": "min",
    "Relu": "relu",
    "Sigmoid": "sigmoid",
    "Tanh": "tanh",
    "Exp": "exp",
    "Log": "log",
    "Sqrt": "sqrt",
    "Reciprocal": "reciprocal",
    "Neg": "neg",
    "Abs": "abs",
    "Erf": "erf",
    "Floor": "floor",
    "Ceil": "ceil",
    "Identity": "identity",
    "Not": "not",
    "Equal": "equal",
    "Less": "less",
    "LessOrEqual": "less_equal",
    "Greater": "greater",
    "GreaterOrEqual": "greater_equal",
    "And": "and",
    "Or": "or",
    "Where": "where",
    "BitwiseAnd": "bitwise_and",
    "BitwiseOr": "bitwise_or",
    "BitwiseXor": "bitwise_xor",
    "BitwiseNot": "bitwise_not",
}
_COMPARISONS = {"Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "And", "Or", "Not"}
_REDUCTIONS = {
    "ReduceSum": "sum",
    "ReduceMean": "mean",
    "ReduceMax": "max",
    "ReduceMin": "min",
    "ReduceProd": "prod",
}
WEIGHT = "a weight: its value is known when the model is loaded"
_RESHAPES = ("Reshape", "Squeeze", "Unsqueeze", "Flatten", "Expand")
# Arrays read from initializers (a Reshape's shape, a reduction's axes) stay this small.
_SMALL = 64


def read(path: Path, ranges: Mapping[str, SymbolDecl] | None = None) -> TaskSet:
    """The task set of the ONNX model in `path`, a symbol named in `ranges` over that range;
    ModelError when the file is not a valid model."""
    graph, found = load(path, ranges)
    return taskset.build(
        f"onnx:{path.name}", graph.symbols, found.found, found.skipped, found.no_kernel
    )


def load(
    path: Path, ranges: Mapping[str, SymbolDecl] | None = None
) -> tuple[Graph, fusion.Extraction]:
    """The graph of the ONNX model in `path` and what its ops become (each task with its
    place in the graph: what a runtime needs to run the model with the tasks' kernels)."""
    import onnx
    from google.protobuf.message import DecodeError

    try:
        model = onnx.load(str(path), load_external_data=False)
        onnx.checker.check_model(model)
    except (DecodeError, onnx.checker.ValidationError, ValueError) as exc:
        raise ModelError(f"{path}: not a valid ONNX model: {exc}") from exc
    except OSError as exc:
        raise ModelError(f"cannot read {path}: {exc.strerror or exc}") from exc
    graph = _Reader(model, ranges or {}).graph()
    return graph, fusion.extract(graph)


class _Reader:
    """One model's graph, read node by node in the file's (topological) order."""

    def __init__(self, model: onnx.ModelProto, ranges: Mapping[str, SymbolDecl]) -> None:
        import onnx

        self.onnx = onnx
        self.model = model
        self.ranges = ranges
        self.opset = {o.domain or "ai.onnx": o.version for o in model.opset_import}
        self.symbols: dict[str, SymbolDecl] = {}
        self.values: dict[str, Value] = {}
        self.arrays: dict[str, np.ndarray] = {}  # small constants, by value name
        self.ops: list[Op] = []
        self.skipped: list[tuple[str, str, str, tuple[Extent, ...] | None]] = []
        self.weights: list[taskset.Skipped] = []  # ConstantOfShape: weights filled at load
        try:
            inferred = onnx.shape_inference.infer_shapes(model).graph
        except (onnx.shape_inference.InferenceError, ValueError):  # a help, not a requirement
            inferred = model.graph
        self.inferred = {
            info.name: info
            for info in [*inferred.input, *inferred.value_info, *inferred.output]
            if info.type.HasField("tensor_type")
        }

    def graph(self) -> Graph:
        g = self.model.graph
        for tensor in g.initializer:
            self._constant(tensor.name, tensor)
        for info in g.input:
            if info.name not in self.values and (typed := self._typed(info.name)):
                self.values[info.name] = Value(info.name, *typed)
        for index, node in enumerate(g.node):
            self._node(index, node)
        at = taskset.flops_at(self.symbols)
        skipped = [
            taskset.Skipped(
                name, op_type, reason, None if shape is None else taskset.elements(shape, at)
            )
            for name, op_type, reason, shape in self.skipped
        ]
        outputs = [o.name for o in g.output]
        return Graph(self.symbols, self.values, self.ops, outputs, skipped, folded=self.weights)

    def _constant(self, name: str, tensor: onnx.TensorProto) -> None:
        dtype = _DTYPES.get(tensor.data_type)
        if dtype is None:
            return  # its consumers are left out: their input has no signature dtype
        shape = tuple(int(d) for d in tensor.dims)
        literal = None
        if tensor.data_location != self.onnx.TensorProto.EXTERNAL and np.prod(shape) <= _SMALL:
            array = self.onnx.numpy_helper.to_array(tensor)
            self.arrays[name] = array
            if array.size == 1:
                # A float's shortest text in its own precision: 1e-06, not 9.99999997e-07.
                scalar = array.reshape(-1)[0]
                literal = float(str(scalar)) if array.dtype.kind == "f" else scalar.item()
        self.values[name] = Value(name, shape, dtype, constant=True, literal=literal)

    def _attribute_tensor(self, attrs: dict[str, Any]) -> onnx.TensorProto | None:
        """A Constant node's value: `value`, or `value_float(s)` / `value_int(s)`."""
        (key, value), helper = next(iter(attrs.items())), self.onnx.numpy_helper
        if key == "value":
            return value
        if key in ("value_float", "value_floats"):
            return helper.from_array(np.array(value, np.float32))
        if key in ("value_int", "value_ints"):
            return helper.from_array(np.array(value, np.int64))
        return None

    def _typed(self, name: str) -> tuple[tuple[Extent, ...], str] | None:
        """The shape and dtype ONNX declares or infers for `name`, if both are known."""
        info = self.inferred.get(name)
        if info is None or not info.type.tensor_type.HasField("shape"):
            return None
        dtype = _DTYPES.get(info.type.tensor_type.elem_type)
        shape = [self._extent(d) for d in info.type.tensor_type.shape.dim]
        if dtype is None or any(e is None for e in shape):
            return None
        return tuple(e for e in shape if e is not None), dtype

    def _extent(self, dim: Any) -> Extent | None:
        if dim.HasField("dim_value"):
            return int(dim.dim_value)
        if dim.HasField("dim_param") and identifier(dim.dim_param) == dim.dim_param:
            self.symbols.setdefault(
                dim.dim_param, self.ranges.get(dim.dim_param, taskset.SYMBOL_RANGE)
            )
            return str(dim.dim_param)
        return None  # unknown, or an expression of symbols (`batch*seq`)

    def _node(self, index: int, node: onnx.NodeProto) -> None:
        name = node.name or f"{node.op_type}_{index}"
        domain = node.domain or "ai.onnx"
        op_type = node.op_type if domain == "ai.onnx" else f"{domain}.{node.op_type}"
        attrs = {a.name: self._attribute(a) for a in node.attribute}
        if op_type == "Constant" and len(attrs) == 1 and (tensor := self._attribute_tensor(attrs)):
            self._constant(node.output[0], tensor)
            return
        if (value := self._shape_arithmetic(node)) is not None:
            self._constant(node.output[0], self.onnx.numpy_helper.from_array(value))
            self.weights.append(taskset.Skipped(node.output[0], op_type, fusion.FOLDED, 0))
            return
        try:
            if any(out and self._used(out) for out in node.output[1:]):
                raise Unsupported("its outputs after the first are used")
            if op_type == "ConstantOfShape":
                self._filled(node, attrs)
                return
            if op_type == "BatchNormalization":
                values, ops = onnx_cnn.batch_norm(
                    name, [n or None for n in node.input], self.values, node.output[0], attrs
                )
                self.values.update((v.name, v) for v in values)
                self.ops += ops
                return
            kind, inputs, params, shape, dtype = self._translate(op_type, node, attrs)
        except Unsupported as exc:
            self._skip(name, op_type, str(exc), node)
            return
        self.values[node.output[0]] = Value(node.output[0], shape, dtype)
        self.ops.append(Op(name, op_type, kind, inputs, node.output[0], params))

    def _shape_arithmetic(self, node: onnx.NodeProto) -> np.ndarray | None:
        """The value of `node` where it computes a small constant from constants and shapes
        alone (`onnx_shapes`); None otherwise."""
        source = self.values.get(node.input[0]) if node.input else None
        shape = None if source is None else source.shape[: self._rank(source)]
        info = self.inferred.get(node.output[0]) if node.output else None
        dims = (
            info.type.tensor_type.shape.dim
            if info and info.type.tensor_type.HasField("shape")
            else None
        )
        small = dims is not None and all(d.HasField("dim_value") for d in dims)
        small = small and math.prod(d.dim_value for d in dims or []) <= _SMALL
        opset = self.opset.get("ai.onnx", 13)
        value = onnx_shapes.fold(node, opset, self.arrays, shape, small)
        if value is None or value.size > _SMALL:
            return None
        return value

    def _filled(self, node: onnx.NodeProto, attrs: dict[str, Any]) -> None:
        """A ConstantOfShape of a known shape: a weight (the zoo's stand-in for one), known when
        the model is loaded; a small one a constant like an initializer."""
        value = attrs.get("value")
        fill = np.zeros(1, np.float32) if value is None else self.onnx.numpy_helper.to_array(value)
        shape = tuple(self._array(node.input[0] if node.input else None))
        dtype = _DTYPES.get(self.onnx.helper.np_dtype_to_tensor_dtype(fill.dtype))
        if dtype is None:
            raise Unsupported(f"a fill of dtype {fill.dtype}, which signatures lack")
        if math.prod(shape) <= _SMALL:
            array = np.full(shape, fill.reshape(-1)[0], fill.dtype)
            self._constant(node.output[0], self.onnx.numpy_helper.from_array(array))
        else:
            self.values[node.output[0]] = Value(node.output[0], shape, dtype, constant=True)
        # Named by its value, as every folded constant is (`Graph.folded`).
        self.weights.append(taskset.Skipped(node.output[0], "ConstantOfShape", WEIGHT, 0))

    def _attribute(self, attribute: onnx.AttributeProto) -> Any:
        """An attribute's value; a float as its shortest text in float32, the precision ONNX
        stores it in (an epsilon of 1e-5, not 9.99999975e-06), as for constants."""
        value = self.onnx.helper.get_attribute_value(attribute)
        if attribute.type == self.onnx.AttributeProto.FLOAT:
            return float(str(np.float32(value)))
        return value

    def _skip(self, name: str, op_type: str, reason: str, node: onnx.NodeProto) -> None:
        """Leave `node` out; its outputs whose shapes ONNX inferred stay readable."""
        for out in node.output:
            if out and (typed := self._typed(out)):
                self.values[out] = Value(out, *typed)
        first = self.values.get(node.output[0]) if node.output else None
        self.skipped.append((name, op_type, reason, None if first is None else first.shape))

    def _used(self, value: str) -> bool:
        g = self.model.graph
        return any(value in n.input for n in g.node) or value in [o.name for o in g.output]

    def _value(self, name: str | None) -> Value:
        if name is None:
            raise Unsupported("a required input is missing")
        if name not in self.values:
            raise Unsupported(f"the shape or dtype of its input {name!r} is unknown")
        return self.values[name]

    def _array(self, name: str | None) -> list[int]:
        if name is None or name not in self.arrays:
            raise Unsupported(f"its input {name!r} is computed at run time")
        return [int(v) for v in self.arrays[name].reshape(-1)]

    def _translate(
        self, op_type: str, node: onnx.NodeProto, attrs: dict[str, Any]
    ) -> tuple[str, tuple[str | None, ...], dict[str, Any], tuple[Extent, ...], str]:
        """(kind, inputs, parameters, output shape, output dtype) of a node."""
        names = tuple(n or None for n in node.input)
        ins = [None if n is None else self._value(n) for n in names]
        x = ins[0] if ins else None
        if x is None:
            raise Unsupported("its first input is missing")
        rank = len(x.shape)
        if op_type in _ELEMENTWISE or op_type in ("Cast", "Gelu", "LeakyRelu", "Clip", "BitShift"):
            return self._elementwise(op_type, names, ins, attrs)
        if op_type == "MatMul":
            return "matmul", names, {}, _matmul_shape(x.shape, self._value(names[1]).shape), x.dtype
        if op_type == "Gemm":
            a, b = x.shape, self._value(names[1]).shape
            m = a[1] if attrs.get("transA") else a[0]
            n = b[0] if attrs.get("transB") else b[1]
            params = {
                "alpha": attrs.get("alpha", 1.0),
                "beta": attrs.get("beta", 1.0),
                "trans_a": bool(attrs.get("transA")),
                "trans_b": bool(attrs.get("transB")),
            }
            return "gemm", names, params, (m, n), x.dtype
        if op_type == "Conv":
            return self._conv(names, ins, attrs)
        if op_type == "com.microsoft.MatMulNBits":
            params = {k: attrs[k] for k in ("K", "N", "bits", "block_size")}
            return "matmul_nbits", names, params, (*x.shape[:-1], attrs["N"]), x.dtype
        if op_type in ("Softmax", "LogSoftmax"):
            axis = attrs.get("axis", -1 if self.opset.get("ai.onnx", 13) >= 13 else 1) % rank
            axes = (axis,) if self.opset.get("ai.onnx", 13) >= 13 else tuple(range(axis, rank))
            return (
                "softmax",
                names,
                {"axes": axes, "log": op_type == "LogSoftmax"},
                x.shape,
                x.dtype,
            )
        if op_type in (
            "LayerNormalization",
            "RMSNormalization",
            "com.microsoft.SimplifiedLayerNormalization",
        ):
            kind = "layer_norm" if op_type == "LayerNormalization" else "rms_norm"
            axis = attrs.get("axis", -1) % rank
            params = {"axes": tuple(range(axis, rank)), "eps": attrs.get("epsilon", 1e-5)}
            return kind, names, params, x.shape, x.dtype
        if op_type in _REDUCTIONS:
            return self._reduce(op_type, names, x, attrs)
        if op_type == "Transpose":
            perm = list(attrs.get("perm", reversed(range(rank))))
            return "transpose", names[:1], {"perm": perm}, tuple(x.shape[p] for p in perm), x.dtype
        if op_type in _RESHAPES:
            return self._reshape(op_type, names, x, attrs)
        if op_type in onnx_cnn.POOLS:
            kind, params, shape = onnx_cnn.pool(op_type, x.shape, attrs)
            return kind, names[:1], params, shape, x.dtype
        if op_type == "LRN":
            params = {
                "size": attrs["size"],
                "alpha": attrs.get("alpha", 1e-4),
                "beta": attrs.get("beta", 0.75),
                "bias": attrs.get("bias", 1.0),
            }
            return "lrn", names[:1], params, x.shape, x.dtype
        if op_type == "Dropout":
            if len(names) > 2 and names[2] and self.values[names[2]].literal is not False:
                raise Unsupported("a Dropout that may be in training mode")
            return "identity", names[:1], {}, x.shape, x.dtype
        if op_type == "Sum":
            operands = [v for v in ins if v is not None]
            return "sum", names, {}, _broadcast([v.shape for v in operands]), x.dtype
        if op_type == "Concat":
            return self._concat(names, ins, attrs)
        if op_type == "Gather":
            return self._gather(names, x, attrs)
        if op_type == "DequantizeLinear":
            dtype = _DTYPES.get(attrs.get("output_dtype", 0)) or self._value(names[1]).dtype
            params = {"axis": attrs.get("axis", 1) % rank, "block_size": attrs.get("block_size", 0)}
            return "dequantize", names, params, x.shape, dtype
        raise Unsupported(f"no mapping for {op_type}")

    def _elementwise(
        self,
        op_type: str,
        names: tuple[str | None, ...],
        ins: list[Value | None],
        attrs: dict[str, Any],
    ) -> tuple[str, tuple[str | None, ...], dict[str, Any], tuple[Extent, ...], str]:
        params: dict[str, Any] = {}
        if op_type == "Cast":
            dtype = _DTYPES.get(attrs["to"])
            if dtype is None:
                raise Unsupported(f"a cast to ONNX type {attrs['to']}, which signatures lack")
            return "cast", names, {}, ins[0].shape, dtype  # type: ignore[union-attr]
        if op_type == "Gelu":
            kind = "gelu_tanh" if attrs.get("approximate") == "tanh" else "gelu"
        elif op_type == "LeakyRelu":
            kind, params = "leaky_relu", {"alpha": attrs.get("alpha", 0.01)}
        elif op_type == "Clip":
            bounds = [self.values[n].literal if n in self.values else None for n in names[1:3]]
            if len(bounds) < 2 or None in bounds:
                raise Unsupported("a Clip without both bounds as constants")
            kind, params, names = "clip", {"low": bounds[0], "high": bounds[1]}, names[:1]
        elif op_type == "BitShift":
            kind = "shift_left" if attrs.get("direction") == "LEFT" else "shift_right"
        else:
            kind = _ELEMENTWISE[op_type]
        operands = [v for v in ins[: len(names)] if v is not None]
        if kind in ("max", "min") and len(operands) != 2:
            raise Unsupported(f"{op_type} of {len(operands)} inputs (2 are mapped)")
        shape = _broadcast([v.shape for v in operands])
        dtype = "bool" if op_type in _COMPARISONS else operands[-1 if kind == "where" else 0].dtype
        return kind, names, params, shape, dtype

    def _conv(
        self, names: tuple[str | None, ...], ins: list[Value | None], attrs: dict[str, Any]
    ) -> tuple[str, tuple[str | None, ...], dict[str, Any], tuple[Extent, ...], str]:
        x, w = ins[0], self._value(names[1])
        assert x is not None
        if len(x.shape) != 4:
            raise Unsupported(f"a {len(x.shape) - 2}-D convolution (2-D ones are mapped)")
        if attrs.get("auto_pad", "NOTSET") not in ("NOTSET", "VALID"):
            raise Unsupported(f"auto_pad {attrs['auto_pad']}")
        strides = list(attrs.get("strides", [1, 1]))
        dilations = list(attrs.get("dilations", [1, 1]))
        pads = list(attrs.get("pads", [0, 0, 0, 0]))
        pads = [pads[0], pads[1], pads[2], pads[3]]  # top, left, bottom, right
        spatial = []
        for d in (0, 1):
            size, taps = x.shape[2 + d], w.shape[2 + d]
            reach = dilations[d] * (taps - 1) if isinstance(taps, int) else None
            if isinstance(size, int) and reach is not None:
                spatial.append((size + pads[d] + pads[d + 2] - reach - 1) // strides[d] + 1)
            elif strides[d] == 1 and reach is not None and pads[d] + pads[d + 2] == reach:
                spatial.append(size)  # "same" padding keeps a symbolic size
            else:
                raise Unsupported("an output size that is an expression of symbols")
        params = {
            "strides": strides,
            "dilations": dilations,
            "pads": pads,
            "groups": attrs.get("group", 1),
        }
        return "conv2d", names, params, (x.shape[0], w.shape[0], *spatial), x.dtype

    def _concat(
        self, names: tuple[str | None, ...], ins: list[Value | None], attrs: dict[str, Any]
    ) -> tuple[str, tuple[str | None, ...], dict[str, Any], tuple[Extent, ...], str]:
        parts = [v for v in ins if v is not None]
        axis = attrs["axis"] % len(parts[0].shape)
        extents = [v.shape[axis] for v in parts]
        if not all(isinstance(e, int) for e in extents):
            raise Unsupported("a concatenation along a symbolic dimension")
        shape = (*parts[0].shape[:axis], sum(extents), *parts[0].shape[axis + 1 :])
        return "concat", names, {"axis": axis}, shape, parts[0].dtype

    def _gather(
        self, names: tuple[str | None, ...], x: Value, attrs: dict[str, Any]
    ) -> tuple[str, tuple[str | None, ...], dict[str, Any], tuple[Extent, ...], str]:
        """A Gather; of one index known here, a select (a view)."""
        axis, indices = attrs.get("axis", 0) % len(x.shape), self._value(names[1])
        scalar = self._rank(indices) == 0
        if scalar and isinstance(indices.literal, int):
            index = indices.literal % x.shape[axis] if isinstance(x.shape[axis], int) else None
            if index is not None:
                shape = (*x.shape[:axis], *x.shape[axis + 1 :])
                return "select", names[:1], {"axis": axis, "index": index}, shape, x.dtype
        middle = () if scalar else indices.shape
        shape = (*x.shape[:axis], *middle, *x.shape[axis + 1 :])
        return "gather", names[:2], {"axis": axis, "scalar": scalar}, shape, x.dtype

    def _rank(self, value: Value) -> int:
        """The rank ONNX gives `value` (a signature holds a rank-0 tensor as `[1]`)."""
        if value.name in self.arrays:
            return int(self.arrays[value.name].ndim)
        info = self.inferred.get(value.name)
        if info is not None and info.type.tensor_type.HasField("shape"):
            return len(info.type.tensor_type.shape.dim)
        return len(value.shape)

    def _reduce(
        self, op_type: str, names: tuple[str | None, ...], x: Value, attrs: dict[str, Any]
    ) -> tuple[str, tuple[str | None, ...], dict[str, Any], tuple[Extent, ...], str]:
        rank = len(x.shape)
        if "axes" in attrs:
            axes = list(attrs["axes"])
        elif len(names) > 1 and names[1]:
            axes = self._array(names[1])
        elif attrs.get("noop_with_empty_axes"):
            raise Unsupported("a reduction over no axes")
        else:
            axes = list(range(rank))
        reduced = tuple(sorted({a % rank for a in axes}))
        keep = bool(attrs.get("keepdims", 1))
        shape = tuple(
            1 if d in reduced else e for d, e in enumerate(x.shape) if keep or d not in reduced
        )
        params = {"op": _REDUCTIONS[op_type], "axes": reduced, "keepdims": keep}
        return "reduce", names[:1], params, shape, x.dtype

    def _reshape(
        self, op_type: str, names: tuple[str | None, ...], x: Value, attrs: dict[str, Any]
    ) -> tuple[str, tuple[str | None, ...], dict[str, Any], tuple[Extent, ...], str]:
        shape: list[Extent]
        if op_type == "Flatten":
            axis = attrs.get("axis", 1) % (len(x.shape) + 1)
            shape = [_product(x.shape[:axis]), _product(x.shape[axis:])]
        elif op_type in ("Squeeze", "Unsqueeze"):
            axes = attrs.get("axes") or (
                self._array(names[1]) if len(names) > 1 and names[1] else []
            )
            shape = list(x.shape)
            if op_type == "Squeeze":
                drop = {a % len(shape) for a in axes} or {d for d, e in enumerate(shape) if e == 1}
                shape = [e for d, e in enumerate(shape) if d not in drop]
            else:
                for a in sorted(a % (len(shape) + len(axes)) for a in axes):
                    shape.insert(a, 1)
        elif op_type == "Expand":
            target = self._array(names[1])
            return "identity", names[:1], {}, _broadcast([x.shape, tuple(target)]), x.dtype
        else:
            target = self._array(names[1])
            shape = [
                x.shape[d] if e == 0 and not attrs.get("allowzero") else e
                for d, e in enumerate(target)
            ]
            if -1 in shape:
                known = _product([e for e in shape if e != -1])
                total = _product(list(x.shape))
                if not (isinstance(known, int) and isinstance(total, int)):
                    raise Unsupported("a -1 in a reshape of a symbolic shape")
                shape[shape.index(-1)] = total // known
        return "reshape", names[:1], {}, tuple(shape), x.dtype


def _product(extents: Sequence[Extent]) -> Extent:
    """The product of extents; a symbol alone (times ones) is itself, anything else with a
    symbol has no extent."""
    symbols = [e for e in extents if isinstance(e, str)]
    numbers = [e for e in extents if isinstance(e, int)]
    size = int(np.prod(numbers)) if numbers else 1
    if not symbols:
        return size
    if len(symbols) == 1 and size == 1:
        return symbols[0]
    raise Unsupported(f"a dimension of size {' * '.join(map(str, extents))}")


def _broadcast(shapes: Sequence[tuple[Extent, ...]]) -> tuple[Extent, ...]:
    """numpy's broadcast of `shapes`."""
    rank = max(len(s) for s in shapes)
    out: list[Extent] = []
    for d in range(rank):
        sizes = {s[len(s) - rank + d] for s in shapes if len(s) - rank + d >= 0} - {1}
        if len(sizes) > 1:
            raise Unsupported(f"shapes {[list(s) for s in shapes]} do not broadcast")
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


def _matmul_shape(a: tuple[Extent, ...], b: tuple[Extent, ...]) -> tuple[Extent, ...]:
    """numpy's matmul: batch dimensions broadcast, a 1-D operand's dimension dropped."""
    batch = _broadcast([a[:-2], b[:-2]]) if len(a) > 2 or len(b) > 2 else ()
    rows = a[-2:-1] if len(a) > 1 else ()
    columns = b[-1:] if len(b) > 1 else ()
    return (*batch, *rows, *columns)
