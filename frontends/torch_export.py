"""The PyTorch frontend: a module exported with `torch.export`, its ATen graph as a
`graph.Graph`, then a task set.

This is the one frontend that runs the user's code: `torch.export` traces the module (on
fake tensors), and `read` imports the module the user names and calls its factory, only
when the user asks (`tunehub extract --torch MODULE:FACTORY`). The factory returns
`(module, example_inputs)` or `(module, example_inputs, dynamic_shapes)`, as
`torch.export.export` takes them; a dimension marked dynamic (`torch.export.Dim("seq",
max=4096)`) is a symbol named as the Dim is, over the Dim's range (a range without a maximum
ends at `taskset.SYMBOL_RANGE.max`).

Shapes and dtypes come from the export's own metadata. Parameters and buffers are weights;
Python scalars in an op's arguments are literals. Ops that compute no tensor (shape
arithmetic, runtime asserts) have no kernel and are passed over. An op whose value depends
on weights, literals and shapes alone (`arange`, `zeros`, an embedding of position ids) and
that no kind maps is folded: its value is a constant, computed once when the model is loaded
(`tunehub.torch`), unless it draws random numbers. Any other op outside the table below is
left out with its reason.
"""

from __future__ import annotations

import importlib
import inspect
import operator
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tunehub.frontends import fusion, taskset
from tunehub.frontends.computes import Unsupported
from tunehub.frontends.errors import ModelError
from tunehub.frontends.graph import Graph, Op, Value
from tunehub.frontends.names import identifier
from tunehub.frontends.taskset import Found
from tunehub.schemas.signature import DTYPES, Extent, SymbolDecl
from tunehub.schemas.taskset import TaskSet

if TYPE_CHECKING:
    import torch

_UNARY = {
    **{name: name for name in ("relu", "sigmoid", "tanh", "exp", "log", "sqrt", "rsqrt")},
    **{name: name for name in ("reciprocal", "neg", "abs", "erf", "floor", "ceil", "silu")},
    **{name: "identity" for name in ("clone", "contiguous", "alias", "detach", "dropout")},
    "logical_not": "not",
    "bitwise_not": "bitwise_not",
    "expand": "identity",  # a broadcast: the output's shape says to what
}
_BINARY = {
    "mul": "mul",
    "pow": "pow",
    "maximum": "max",
    "minimum": "min",
    "bitwise_and": "bitwise_and",
    "__and__": "bitwise_and",
    "bitwise_or": "bitwise_or",
    "__or__": "bitwise_or",
    "bitwise_xor": "bitwise_xor",
    "__xor__": "bitwise_xor",
    "bitwise_right_shift": "shift_right",
    "__rshift__": "shift_right",
    "bitwise_left_shift": "shift_left",
    "__lshift__": "shift_left",
    "eq": "equal",
    "ne": "not_equal",
    "lt": "less",
    "le": "less_equal",
    "gt": "greater",
    "ge": "greater_equal",
}
_RESHAPES = ("view", "reshape", "_unsafe_view", "unsqueeze", "squeeze", "flatten", "view_as")
_SPLITS = ("split", "split_with_sizes", "unbind", "chunk")
_REDUCTIONS = {"mean": "mean", "sum": "sum", "amax": "max", "amin": "min", "prod": "prod"}
# Ops that read a tensor's shape, and the ops that compute no tensor a kernel writes.
_SHAPES = ("sym_size", "sym_numel", "sym_stride")
_NO_KERNEL = ("_assert_tensor_metadata", "_assert_scalar", "sym_constrain_range_for_size", *_SHAPES)


def read(spec: str, ranges: Mapping[str, SymbolDecl] | None = None) -> TaskSet:
    """The task set of the module that `spec` (`MODULE:FACTORY`) makes: import MODULE (from
    the current directory too), call FACTORY, export what it returns."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ModelError(f"--torch expects MODULE:FACTORY, not {spec!r}")
    if "" not in sys.path and str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    try:
        imported = importlib.import_module(module_name)
    except Exception as exc:  # the user's module, whatever it raises
        raise ModelError(f"cannot import {module_name}: {_first_line(exc)}") from exc
    factory = getattr(imported, attr, None)
    if not callable(factory):
        raise ModelError(f"{module_name} has no {attr} to call")
    try:
        made = factory()
    except Exception as exc:  # the user's factory, whatever it raises
        raise ModelError(f"{spec} failed: {_first_line(exc)}") from exc
    if not isinstance(made, tuple) or len(made) not in (2, 3):
        raise ModelError(
            f"{spec} returned {type(made).__name__}: it must return (module, example_inputs) "
            "or (module, example_inputs, dynamic_shapes)"
        )
    return export(*made, source=f"torch:{spec}", ranges=ranges)


def export(
    module: torch.nn.Module,
    example_inputs: Any,
    dynamic_shapes: Any = None,
    *,
    source: str = "torch",
    ranges: Mapping[str, SymbolDecl] | None = None,
) -> TaskSet:
    """The task set of `module` on `example_inputs` (a tensor or a tuple of them), its
    `dynamic_shapes` as `torch.export.export` takes them."""
    return trace(module, example_inputs, dynamic_shapes, source=source, ranges=ranges).taskset


@dataclass
class Traced:
    """A module as `export` reads it, kept for a runtime that runs its tasks (`tunehub.torch`):
    the exported program, the task set, every group before identical ones collapse (each with
    its `binding`), the fx node of each graph value (`nodes[value] -> node name`), and the
    values to compute once (`folded`)."""

    program: Any  # torch.export.ExportedProgram
    taskset: TaskSet
    found: list[Found]
    nodes: dict[str, str]
    folded: set[str]  # the values computed once from constants and shapes


def trace(
    module: torch.nn.Module,
    example_inputs: Any,
    dynamic_shapes: Any = None,
    *,
    source: str = "torch",
    ranges: Mapping[str, SymbolDecl] | None = None,
) -> Traced:
    """`export`, keeping what it read the task set off."""
    import torch

    if not isinstance(module, torch.nn.Module):
        raise ModelError(f"{source}: {type(module).__name__} is not a torch.nn.Module")
    inputs = example_inputs if isinstance(example_inputs, tuple) else (example_inputs,)
    try:
        program = torch.export.export(module, inputs, dynamic_shapes=dynamic_shapes)
    except Exception as exc:  # torch.export reports a failed trace in many exception types
        raise ModelError(f"{source}: torch.export failed: {_first_line(exc)}") from exc
    names = _dim_names(module, inputs, dynamic_shapes)
    reader = _Reader(program, names, ranges or {})
    graph = reader.graph()
    found = fusion.extract(graph)
    nodes = {value: node for node, value in reader.keys.items()}
    tasks = taskset.build(source, graph.symbols, found.found, found.skipped, found.no_kernel)
    return Traced(program, tasks, found.found, nodes, found.folded)


def _dim_names(
    module: Any, inputs: tuple[Any, ...], dynamic_shapes: Any
) -> dict[int, dict[int, str]]:
    """The names of the `Dim`s in `dynamic_shapes`: input position -> dimension -> name."""
    if dynamic_shapes is None:
        return {}
    specs = dynamic_shapes
    if isinstance(dynamic_shapes, Mapping):
        parameters = list(inspect.signature(module.forward).parameters)
        specs = [dynamic_shapes.get(p) for p in parameters[: len(inputs)]]
    names: dict[int, dict[int, str]] = {}
    for position, spec in enumerate(specs):
        dims = spec.items() if isinstance(spec, Mapping) else enumerate(spec or ())
        found = {d: getattr(dim, "__name__", None) for d, dim in dims}
        names[position] = {d: name for d, name in found.items() if isinstance(name, str)}
    return names


class _Reader:
    """One exported program's graph, node by node."""

    def __init__(
        self, program: Any, dim_names: dict[int, dict[int, str]], ranges: Mapping[str, SymbolDecl]
    ) -> None:
        self.program = program
        self.ranges = ranges
        self.symbols: dict[str, SymbolDecl] = {}
        self.symbol_names: dict[str, str] = {}  # torch's symbol (s27) -> its name here
        self.values: dict[str, Value] = {}
        self.keys: dict[str, str] = {}  # fx node name -> value name
        self.ops: list[Op] = []
        self.skipped: list[tuple[str, str, str, tuple[Extent, ...] | None]] = []
        self.skipped_reads: set[str] = set()
        self.folded: list[tuple[str, str, tuple[Extent, ...]]] = []
        # The nodes whose values depend on weights, literals and shapes alone.
        self.static: set[str] = set()
        # A split's parts, by the split's node: what it splits, along which dimension, where
        # each part starts (its `getitem`s are slices of it).
        self.splits: dict[str, tuple[str, int, list[int]]] = {}
        self._inputs(dim_names)

    def _inputs(self, dim_names: dict[int, dict[int, str]]) -> None:
        from torch.export.graph_signature import InputKind

        placeholders = {n.name: n for n in self.program.graph.nodes if n.op == "placeholder"}
        user = 0
        for spec in self.program.graph_signature.input_specs:
            node = placeholders[spec.arg.name]
            if spec.kind == InputKind.USER_INPUT:
                for d, name in dim_names.get(user, {}).items():
                    size = node.meta["val"].shape[d]
                    self.symbol_names.setdefault(str(size), identifier(name))
                user += 1
                key = node.name
            else:
                key = spec.target if spec.target and spec.target not in self.values else node.name
            self.keys[node.name] = key
            shape, dtype = self._tensor(node)
            constant = spec.kind != InputKind.USER_INPUT
            self.values[key] = Value(key, shape, dtype, constant=constant)
            if constant:
                self.static.add(node.name)

    def graph(self) -> Graph:
        for node in self.program.graph.nodes:
            if node.op == "call_function":
                self._node(node)
        (results,) = [n.args[0] for n in self.program.graph.nodes if n.op == "output"]
        outputs = [self.keys[r.name] for r in results if hasattr(r, "name") and r.name in self.keys]
        at = taskset.flops_at(self.symbols)
        skipped = [
            taskset.Skipped(
                name, op, reason, None if shape is None else taskset.elements(shape, at)
            )
            for name, op, reason, shape in self.skipped
        ]
        folded = [
            taskset.Skipped(name, op, fusion.FOLDED, taskset.elements(shape, at))
            for name, op, shape in self.folded
        ]
        return Graph(
            self.symbols, self.values, self.ops, outputs, skipped, self.skipped_reads, folded
        )

    def _tensor(self, node: Any) -> tuple[tuple[Extent, ...], str]:
        import torch

        value = node.meta.get("val")
        if not isinstance(value, torch.Tensor):
            raise Unsupported("its output is not one tensor")
        dtype = str(value.dtype).removeprefix("torch.")
        if dtype not in DTYPES:
            raise Unsupported(f"dtype {dtype} has no counterpart in signatures")
        return tuple(self._extent(size) for size in value.shape), dtype

    def _extent(self, size: Any) -> Extent:
        if isinstance(size, int):
            return size
        expr = size.node.expr
        if not expr.is_Symbol:
            raise Unsupported(f"a dimension of size {expr}, an expression of symbols")
        name = self.symbol_names.setdefault(str(expr), identifier(str(expr)))
        if name not in self.symbols:
            bounds = self.program.range_constraints.get(expr)
            low, high = taskset.SYMBOL_RANGE.min, taskset.SYMBOL_RANGE.max
            if bounds is not None:
                low = max(1, _finite(bounds.lower, low))
                high = _finite(bounds.upper, high)
            self.symbols[name] = self.ranges.get(name, SymbolDecl(min=low, max=max(low, high)))
        return name

    def _node(self, node: Any) -> None:
        op_type = str(node.target)
        parts = op_type.split(".")
        name = _source_name(node)
        static = parts[0] == "aten" and parts[1] in _SHAPES  # a shape is known before it runs
        static = static or (
            _deterministic(node) and all(a.name in self.static for a in node.all_input_nodes)
        )
        if static:
            self.static.add(node.name)
        if parts[0] == "aten" and parts[1] in _SPLITS:
            self._split(parts[1], node)
            return
        if parts[0] == "aten" and (parts[1] in _NO_KERNEL or node.meta.get("val") is None):
            return
        try:
            shape, dtype = self._tensor(node)
            if node.target is operator.getitem:
                kind, inputs, attrs = self._part(node)
            elif parts[0] != "aten":
                raise Unsupported(f"no mapping for {op_type}")
            else:
                kind, inputs, attrs = self._translate(parts[1], node, shape)
        except Unsupported as exc:
            if static and self._fold(node, name, op_type):
                return
            self._skip(node, name, op_type, str(exc))
            return
        key = node.name
        self.keys[node.name] = key
        self.values[key] = Value(key, shape, dtype)
        self.ops.append(Op(name, op_type, kind, inputs, key, attrs))

    def _fold(self, node: Any, name: str, op_type: str) -> bool:
        """Fold `node` (its value depends on constants and shapes alone, and no kind maps it):
        its value becomes a constant. False where it is not one tensor."""
        try:
            shape, dtype = self._tensor(node)
        except Unsupported:
            return False
        self.keys[node.name] = node.name
        self.values[node.name] = Value(node.name, shape, dtype, constant=True)
        self.folded.append((name, op_type, shape))
        return True

    def _split(self, op: str, node: Any) -> None:
        """Remember where each part of a split starts: its `getitem`s are slices (`_part`)."""
        x, rank = node.args[0], len(node.args[0].meta["val"].shape)
        dim = node.args[1] if op == "unbind" and len(node.args) > 1 else 0
        if op != "unbind":
            dim = node.args[2] if len(node.args) > 2 else node.kwargs.get("dim", 0)
        sizes = [int(part.shape[dim % rank]) for part in node.meta["val"]]
        starts = [sum(sizes[:n]) for n in range(len(sizes))]
        self.splits[node.name] = (x.name, dim % rank, starts if op != "unbind" else [])

    def _part(self, node: Any) -> tuple[str, tuple[str | None, ...], dict[str, Any]]:
        """A split's part (`getitem(split, n)`): a slice of what it splits, or (unbind) one
        element of the dimension, which the part drops."""
        whole, n = node.args
        if not hasattr(whole, "name") or whole.name not in self.splits:
            raise Unsupported("getitem of something other than a split")
        x, dim, starts = self.splits[whole.name]
        if x not in self.keys:
            raise Unsupported(f"its input {x} is not a tensor this frontend read")
        if not starts:
            return "select", (self.keys[x],), {"axis": dim, "index": n}
        return "slice", (self.keys[x],), {"axis": dim, "start": starts[n]}

    def _skip(self, node: Any, name: str, op_type: str, reason: str) -> None:
        """Leave `node` out; its output stays readable when it is one tensor."""
        shape = None
        try:
            shape, dtype = self._tensor(node)
            self.keys[node.name] = node.name
            self.values[node.name] = Value(node.name, shape, dtype)
        except Unsupported:
            pass
        self.skipped_reads.update(
            self.keys[a.name] for a in node.all_input_nodes if a.name in self.keys
        )
        self.skipped.append((name, op_type, reason, shape))

    def _operand(self, node: Any, index: int, arg: Any) -> str | None:
        """The value an argument names: a node's, or a literal made for a Python scalar."""
        if arg is None:
            return None
        if hasattr(arg, "name") and hasattr(arg, "op"):
            if arg.name not in self.keys:
                raise Unsupported(f"its input {arg.name} is not a tensor this frontend read")
            return self.keys[arg.name]
        if isinstance(arg, bool | int | float):
            key = f"{node.name}_arg{index}"
            dtype = (
                "bool" if isinstance(arg, bool) else "int64" if isinstance(arg, int) else "float32"
            )
            self.values[key] = Value(key, (1,), dtype, constant=True, literal=arg)
            return key
        raise Unsupported(f"argument {index} ({type(arg).__name__}) is not a tensor or a number")

    def _translate(
        self, op: str, node: Any, shape: tuple[Extent, ...]
    ) -> tuple[str, tuple[str | None, ...], dict[str, Any]]:
        args, kwargs = list(node.args), dict(node.kwargs)
        x = args[0] if args else None
        rank = len(self._value(x).shape) if hasattr(x, "name") else 0

        def operands(*indices: int) -> tuple[str | None, ...]:
            return tuple(
                self._operand(node, i, args[i] if i < len(args) else None) for i in indices
            )

        if op in ("add", "sub"):
            return op, operands(0, 1), {"alpha": kwargs.get("alpha", 1)}
        if op == "rsub":  # other - alpha * x
            return "sub", operands(1, 0), {"alpha": kwargs.get("alpha", 1)}
        if op == "div":
            if kwargs.get("rounding_mode") is not None:
                raise Unsupported(f"division with rounding_mode {kwargs['rounding_mode']}")
            return "div", operands(0, 1), {}
        if op in ("_to_copy", "to", "type_as"):
            same = self._value(x).dtype == str(node.meta["val"].dtype).removeprefix("torch.")
            return ("identity" if same else "cast"), operands(0), {}
        if op == "dropout" and (args[2] if len(args) > 2 else kwargs.get("train", False)):
            raise Unsupported("dropout in training (random)")
        if op in ("slice", "narrow"):
            return "slice", operands(0), self._slice(op, node, args, rank)
        if op == "select":
            dim = args[1] % rank
            index = args[2] % int(node.args[0].meta["val"].shape[dim])
            return "select", operands(0), {"axis": dim, "index": index}
        if op == "cat":
            parts = [a for a in args[0] if a.meta["val"].numel() != 0]
            if len(parts) == 1:  # the rest empty (an empty key/value cache)
                return "identity", (self._operand(node, 0, parts[0]),), {}
            dim = (args[1] if len(args) > 1 else kwargs.get("dim", 0)) % len(shape)
            inputs = tuple(self._operand(node, 0, part) for part in parts)
            return "concat", inputs, {"axis": dim}
        if op == "embedding":  # embedding(weight, indices): rows of the weight
            return "gather", operands(0, 1), {"axis": 0, "scalar": False}
        if op == "index":  # x[..., idx, ...]: one index tensor, after full slices alone
            indices = list(args[1])
            where = [d for d, index in enumerate(indices) if index is not None]
            if len(where) != 1 or where[0] != len(indices) - 1:
                raise Unsupported("indexing with other than one index tensor")
            if str(indices[-1].meta["val"].dtype) == "torch.bool":
                raise Unsupported("indexing with a boolean mask")
            inputs = (*operands(0), self._operand(node, 1, indices[-1]))
            return "gather", inputs, {"axis": where[0], "scalar": False}
        if op == "gelu":
            return ("gelu_tanh" if kwargs.get("approximate") == "tanh" else "gelu"), operands(0), {}
        if op == "leaky_relu":
            return "leaky_relu", operands(0), {"alpha": args[1] if len(args) > 1 else 0.01}
        if op in ("clamp", "hardtanh"):
            defaults: list[Any] = [None, None] if op == "clamp" else [-1.0, 1.0]
            low, high = [*args[1:3], *defaults[len(args[1:3]) :]]
            if not isinstance(low, int | float) or not isinstance(high, int | float):
                raise Unsupported(f"{op} without both bounds as numbers")
            return "clip", operands(0), {"low": low, "high": high}
        if op in _UNARY:
            return _UNARY[op], operands(0), {}
        if op in _BINARY:
            return _BINARY[op], operands(0, 1), {}
        if op == "where":
            return "where", operands(0, 1, 2), {}
        if op in ("linear", "matmul", "mm", "bmm"):
            return ("linear" if op == "linear" else "matmul"), operands(*range(len(args))), {}
        if op == "scaled_dot_product_attention":
            return "attention", operands(0, 1, 2, 3), self._attention(node, args, kwargs)
        if op == "addmm":
            attrs = {"alpha": kwargs.get("alpha", 1), "beta": kwargs.get("beta", 1)}
            return "gemm", (*operands(1, 2), *operands(0)), attrs
        if op in ("conv2d", "convolution"):
            return "conv2d", operands(0, 1, 2), self._conv(op, args)
        if op in ("softmax", "_softmax", "log_softmax", "_log_softmax"):
            return "softmax", operands(0), {"axes": (args[1] % rank,), "log": "log" in op}
        if op in ("layer_norm", "rms_norm"):
            axes = tuple(range(rank - len(args[1]), rank))
            eps = (args + [None] * 5)[4 if op == "layer_norm" else 3]
            if eps is None:  # layer_norm's default; rms_norm's is its dtype's epsilon
                import torch

                dtype = node.args[0].meta["val"].dtype
                eps = 1e-5 if op == "layer_norm" else torch.finfo(dtype).eps
            inputs = operands(0, 2, 3) if op == "layer_norm" else operands(0, 2)
            return op, inputs, {"axes": axes, "eps": eps}
        if op in _REDUCTIONS:
            dims = args[1] if len(args) > 1 and args[1] is not None else list(range(rank))
            dims = [dims] if isinstance(dims, int) else dims
            keep = bool(args[2] if len(args) > 2 else kwargs.get("keepdim", False))
            axes = tuple(sorted({d % rank for d in dims})) if dims else tuple(range(rank))
            return "reduce", operands(0), {"op": _REDUCTIONS[op], "axes": axes, "keepdims": keep}
        if op in ("t", "transpose", "permute"):
            return "transpose", operands(0), {"perm": _permutation(op, args, rank)}
        if op in _RESHAPES:
            return "reshape", operands(0), {}
        raise Unsupported(f"no mapping for aten.{op}")

    def _attention(self, node: Any, args: list[Any], kwargs: dict[str, Any]) -> dict[str, Any]:
        """`scaled_dot_product_attention(q, k, v, attn_mask, dropout_p, is_causal, scale,
        enable_gqa)` as the kind's parameters."""
        names = ("q", "k", "v", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")
        given = dict(zip(names, args, strict=False)) | kwargs
        if given.get("dropout_p", 0.0):
            raise Unsupported("attention with dropout (random)")
        q, k = (given[n].meta["val"] for n in ("q", "k"))
        scale = given.get("scale") or 1 / float(q.shape[-1]) ** 0.5
        groups = 1
        if given.get("enable_gqa") and q.dim() > 2:
            groups = int(q.shape[-3]) // int(k.shape[-3])
        return {"scale": scale, "causal": bool(given.get("is_causal")), "groups": groups}

    def _slice(self, op: str, node: Any, args: list[Any], rank: int) -> dict[str, Any]:
        """`slice(x, dim, start, end, step)` or `narrow(x, dim, start, length)` as a slice's
        parameters (the output's shape says where it ends)."""
        dim = (args[1] if len(args) > 1 else 0) % rank
        start = args[2] if len(args) > 2 else 0
        step = args[4] if op == "slice" and len(args) > 4 else 1
        size = node.args[0].meta["val"].shape[dim]
        if not isinstance(start, int) or not isinstance(step, int):
            raise Unsupported(f"a {op} whose start or step is not a number")
        if start < 0:
            if not isinstance(size, int):
                raise Unsupported(f"a {op} from the end of a symbolic dimension")
            start = max(0, start + size)
        if isinstance(size, int):
            start = min(start, size)
        return {"axis": dim, "start": start, "step": step}

    def _value(self, node: Any) -> Value:
        if node.name not in self.keys:
            raise Unsupported(f"its input {node.name} is not a tensor this frontend read")
        return self.values[self.keys[node.name]]

    def _conv(self, op: str, args: list[Any]) -> dict[str, Any]:
        """conv2d(x, w, b, stride, padding, dilation, groups) or convolution(x, w, b, stride,
        padding, dilation, transposed, output_padding, groups) as the kind's parameters."""
        defaults = [None, None, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1]
        if op == "conv2d":
            defaults = [None, None, None, [1, 1], [0, 0], [1, 1], 1]
        x, w, _, stride, padding, dilation, *rest = args + defaults[len(args) :]
        groups = rest[-1]
        if op == "convolution" and rest[0]:
            raise Unsupported("a transposed convolution")
        if len(self._value(x).shape) != 4:
            raise Unsupported("a convolution that is not 2-D")
        stride, dilation = _pair(stride), _pair(dilation)
        if padding == "valid":
            pads = [0, 0, 0, 0]
        elif padding == "same":
            taps = self._value(w).shape[2:]
            total = [dilation[d] * (taps[d] - 1) for d in (0, 1)]  # type: ignore[operator]
            pads = [
                total[0] // 2,
                total[1] // 2,
                total[0] - total[0] // 2,
                total[1] - total[1] // 2,
            ]
        else:
            top, left = _pair(padding)
            pads = [top, left, top, left]
        return {"strides": stride, "dilations": dilation, "pads": pads, "groups": groups}


def _deterministic(node: Any) -> bool:
    """Whether `node` gives the same value for the same inputs (no random numbers drawn)."""
    import torch

    tags = getattr(node.target, "tags", ())
    return torch.Tag.nondeterministic_seeded not in tags


def _first_line(exc: Exception) -> str:
    """An exception as one line: its type and its message's first line (torch's run long)."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


def _pair(value: Any) -> list[int]:
    return [int(value)] * 2 if isinstance(value, int) else [int(v) for v in value]


def _permutation(op: str, args: list[Any], rank: int) -> list[int]:
    if op == "permute":
        return [d % rank for d in args[1]]
    perm = list(range(rank))
    a, b = (0, 1) if op == "t" else (args[1] % rank, args[2] % rank)
    if rank > 1:
        perm[a], perm[b] = perm[b], perm[a]
    return perm


def _finite(bound: Any, default: int) -> int:
    """A range bound of torch's as an int; `default` for an infinite one (torch's `int_oo`
    is no sympy Integer)."""
    if isinstance(bound, int) or getattr(bound, "is_Integer", False):
        return min(int(bound), 2**31)
    return default


def _source_name(node: Any) -> str:
    """`layers.0.mlp/linear_3`: the module the op ran in, then its node's name."""
    stack = node.meta.get("nn_module_stack") or {}
    path = list(stack.values())[-1][0] if stack else ""
    return f"{path}/{node.name}" if path else node.name
