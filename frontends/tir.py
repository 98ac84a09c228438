"""The TVM TIR frontend: TVMScript text as MLC-LLM prints it, one signature per prim_func.

The text is parsed with Python's `ast` and read, never executed. It may be a whole
`@I.ir_module` class or bare functions (decorated with `@T.prim_func` or not, indented or
not). A function becomes one signature whose computes are its blocks, one to one and in
order, with the arithmetic as written: MLC's fused int4 linear stays five computes (unpack,
dequantize, the NT matmul over the unit batch axis summing float16 products, two adds); the
compiler normalizes forms, the frontend does not. Signatures are version 2: a float16 sum
adds its products unrounded in float32, as tensor cores and cuBLAS do (docs/signature.md).

- `T.Buffer` parameters and `T.match_buffer` over `T.handle` ones are the inputs, or the
  outputs when a block writes them; `T.alloc_buffer` intermediates are computes.
- `seq_len = T.int64()` (and a scalar `T.int64` parameter) is a symbol over
  `taskset.SYMBOL_RANGE` unless the caller names a range.
- A block writes its buffer at its spatial axes (`T.axis.remap`, `T.axis.spatial`), in
  order; its reduce axes with `T.init()` and an update `b = b + x` (or `T.max`, `T.min`,
  `b * x`) make a reduction of that op, whose init must be the op's identity.
- `T.reads`, `T.writes`, `T.func_attr` and `T.block_attr` are ignored.
- Expressions map onto the signature language as `tir_expr` says (`T.Cast`, `T.bitwise_*`,
  `T.if_then_else`, `T.exp`, ...; typed constants as literals; TIR's floor `//` kept exact).

A function outside this form (scheduled: threads bound, blocks predicated or nested; calls
to external functions; an expression with no counterpart) is left out with a one-line reason.
"""

from __future__ import annotations

import ast
import re
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass, field

from pydantic import ValidationError

from tunehub.frontends import taskset
from tunehub.frontends.computes import Unsupported, compute
from tunehub.frontends.errors import ModelError, reason
from tunehub.frontends.names import Names
from tunehub.frontends.tir_expr import (
    Expression,
    call_name,
    constant,
    elements,
    identity,
    short,
    string,
)
from tunehub.schemas.signature import DTYPES, ComputeDecl, Extent, SymbolDecl, TaskSignature
from tunehub.schemas.taskset import TaskSet

_LOOPS = ("grid", "serial", "parallel", "vectorized", "unroll")
_IGNORED = ("reads", "writes", "func_attr", "block_attr")
_AXES = {"spatial": "S", "S": "S", "reduce": "R", "R": "R"}
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def read(text: str, source: str, ranges: Mapping[str, SymbolDecl] | None = None) -> TaskSet:
    """The task set of TVMScript `text` (from `source`, a file name for messages); symbols
    named in `ranges` take those ranges. ModelError when the text is not TVMScript."""
    try:
        tree = ast.parse(textwrap.dedent(text))
    except SyntaxError as exc:
        raise ModelError(f"{source}: not TVMScript: line {exc.lineno}: {exc.msg}") from exc
    except ValueError as exc:  # a NUL byte
        raise ModelError(f"{source}: not TVMScript: {exc}") from exc
    functions = _prim_funcs(tree.body)
    if not functions:
        raise ModelError(f"{source}: no prim_func in it (a TVMScript function over T.Buffer)")
    symbols: dict[str, SymbolDecl] = {}
    found, skipped = [], []
    for fn in functions:
        try:
            signature = _Function(fn, ranges or {}).signature()
        except (Unsupported, ValidationError) as exc:
            skipped.append(taskset.Skipped(fn.name, "prim_func", reason(exc)))
            continue
        symbols.update(signature.symbols)
        flops = taskset.signature_flops(signature.computes, taskset.flops_at(signature.symbols))
        found.append(taskset.Found(signature, [taskset.Source(fn.name, "prim_func", flops)]))
    return taskset.build(f"tir:{source}", symbols, found, skipped)


def _prim_funcs(body: list[ast.stmt]) -> list[ast.FunctionDef]:
    """The prim_funcs in `body`: decorated `T.prim_func`, or undecorated functions whose
    parameters are all TIR buffers, handles or scalars; classes (`@I.ir_module`) searched."""
    found = []
    for node in body:
        if isinstance(node, ast.ClassDef):
            found += _prim_funcs(node.body)
        elif isinstance(node, ast.FunctionDef) and _is_prim_func(node):
            found.append(node)
    return found


def _is_prim_func(fn: ast.FunctionDef) -> bool:
    decorators = [ast.unparse(d) for d in fn.decorator_list]
    if decorators:
        return any(d.startswith("T.prim_func") for d in decorators)
    annotations = [a.annotation for a in fn.args.args]
    return bool(annotations) and all(
        a is not None and ast.unparse(a).startswith("T.") for a in annotations
    )


@dataclass
class _Buffer:
    name: str  # in the signature
    shape: list[Extent]
    dtype: str


@dataclass
class _Block:
    """What a block binds: its axes (TIR name -> signature name), which are reduce axes, and
    each one's extent."""

    axes: dict[str, str] = field(default_factory=dict)
    reduce: set[str] = field(default_factory=set)
    extents: dict[str, Extent] = field(default_factory=dict)


@dataclass
class _Function:
    """One prim_func read into computes, block by block."""

    fn: ast.FunctionDef
    ranges: Mapping[str, SymbolDecl]
    names: Names = field(default_factory=Names)
    symbols: dict[str, str] = field(default_factory=dict)  # TIR name -> signature name
    buffers: dict[str, _Buffer] = field(default_factory=dict)  # by TIR name
    slots: list[str | None] = field(default_factory=list)  # the buffer of each parameter
    handles: dict[str, int] = field(default_factory=dict)  # a handle's parameter position
    computes: list[ComputeDecl] = field(default_factory=list)
    written: set[str] = field(default_factory=set)  # TIR names of the buffers blocks write

    def signature(self) -> TaskSignature:
        self.slots = [None] * len(self.fn.args.args)
        for position, arg in enumerate(self.fn.args.args):
            self._parameter(position, arg)
        self._statements(self.fn.body, {})
        if not self.computes:
            raise Unsupported("no block writes a buffer")
        params = [name for name in self.slots if name is not None]
        inputs = [self.buffers[name] for name in params if name not in self.written]
        text = [str(e) for b in inputs for e in b.shape]
        for c in self.computes:
            text += [
                *map(str, c.shape),
                c.expr,
                *map(str, c.reduce.axes.values() if c.reduce else ()),
            ]
        words = set(_WORD.findall(" ".join(text)))
        return TaskSignature.model_validate(
            {
                "version": 2,
                "name": self.fn.name[:128],
                "symbols": {
                    name: self.ranges.get(name, taskset.SYMBOL_RANGE)
                    for name in self.symbols.values()
                    if name in words
                },
                "inputs": [{"name": b.name, "shape": b.shape, "dtype": b.dtype} for b in inputs],
                "computes": self.computes,
                "outputs": [self.buffers[n].name for n in params if n in self.written],
            }
        )

    # Declarations: parameters, symbols and buffers.

    def _parameter(self, position: int, arg: ast.arg) -> None:
        annotation = arg.annotation
        text = "" if annotation is None else ast.unparse(annotation)
        if text == "T.handle":
            self.handles[arg.arg] = position
        elif text in ("T.int64", "T.int32"):
            self._symbol(arg.arg)
        elif isinstance(annotation, ast.Call | ast.Subscript) and text.startswith("T.Buffer"):
            args = (
                annotation.args if isinstance(annotation, ast.Call) else elements(annotation.slice)
            )
            keywords = annotation.keywords if isinstance(annotation, ast.Call) else []
            self._buffer(arg.arg, args, keywords)
            self.slots[position] = arg.arg
        else:
            raise Unsupported(f"parameter {arg.arg}: {text or 'no annotation'} is not mapped")

    def _symbol(self, name: str) -> None:
        self.symbols[name] = self.names.take(name)

    def _buffer(self, name: str, args: list[ast.expr], keywords: list[ast.keyword]) -> None:
        options = {k.arg: k.value for k in keywords if k.arg}
        shape_node = args[0] if args else options.get("shape")
        dtype_node = args[1] if len(args) > 1 else options.get("dtype")
        if shape_node is None:
            raise Unsupported(f"buffer {name} has no shape")
        shape = [self._extent(e) for e in elements(shape_node)]
        dtype = "float32" if dtype_node is None else string(dtype_node)
        if dtype not in DTYPES:
            raise Unsupported(f"buffer {name}: dtype {dtype} has no counterpart in signatures")
        if not shape:
            raise Unsupported(f"buffer {name} has rank 0")
        self.buffers[name] = _Buffer(self.names.take(name), shape, dtype)

    def _extent(self, node: ast.expr) -> Extent:
        if isinstance(node, ast.Name) and node.id in self.symbols:
            return self.symbols[node.id]
        value = constant(node)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise Unsupported(f"extent {ast.unparse(node)} is not a number or a symbol")

    # Statements: declarations, loop nests and blocks.

    def _statements(self, body: list[ast.stmt], loops: dict[str, Extent]) -> None:
        for stmt in body:
            if isinstance(stmt, ast.Expr) and (
                isinstance(stmt.value, ast.Constant) or call_name(stmt.value) in _IGNORED
            ):
                continue
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
                self._assign(stmt)
            elif isinstance(stmt, ast.For):
                self._loop(stmt, loops)
            elif isinstance(stmt, ast.With) and call_name(stmt.items[0].context_expr) == "block":
                self._block(stmt, loops)
            else:
                raise Unsupported(f"line {stmt.lineno}: `{short(stmt)}` is not mapped")

    def _assign(self, stmt: ast.Assign) -> None:
        target, value = stmt.targets[0], stmt.value
        callee = call_name(value)
        if not isinstance(target, ast.Name) or not isinstance(value, ast.Call):
            raise Unsupported(f"line {stmt.lineno}: `{short(stmt)}` is not mapped")
        if callee in ("int64", "int32") and not value.args:
            self._symbol(target.id)
        elif callee == "match_buffer" and value.args:
            handle = ast.unparse(value.args[0])
            if handle not in self.handles:
                raise Unsupported(f"line {stmt.lineno}: {handle} is not a T.handle parameter")
            self._buffer(target.id, value.args[1:], value.keywords)
            self.slots[self.handles[handle]] = target.id
        elif callee == "alloc_buffer":
            self._buffer(target.id, value.args, value.keywords)
        else:
            raise Unsupported(f"line {stmt.lineno}: `{short(stmt)}` is not mapped")

    def _loop(self, stmt: ast.For, loops: dict[str, Extent]) -> None:
        kind = call_name(stmt.iter)
        if kind == "thread_binding":
            raise Unsupported("a scheduled function (loops bound to threads): give it unscheduled")
        if kind not in (*_LOOPS, "range") or not isinstance(stmt.iter, ast.Call) or stmt.orelse:
            raise Unsupported(f"line {stmt.lineno}: loop over `{short(stmt.iter)}` is not mapped")
        args = stmt.iter.args
        if kind != "grid" and len(args) == 2 and constant(args[0]) == 0:
            args = args[1:]
        variables = elements(stmt.target)
        if len(variables) != len(args) or not all(isinstance(v, ast.Name) for v in variables):
            raise Unsupported(f"line {stmt.lineno}: loop over `{short(stmt.iter)}` is not mapped")
        inner = dict(loops)
        for variable, extent in zip(variables, args, strict=True):
            inner[variable.id] = self._extent(extent)  # type: ignore[attr-defined]
        self._statements(stmt.body, inner)

    def _block(self, stmt: ast.With, loops: dict[str, Extent]) -> None:
        block = _Block()
        init: ast.Assign | None = None
        stores: list[ast.Assign] = []
        rest: list[ast.stmt] = []
        for s in stmt.body:
            if isinstance(s, ast.Assign) and call_name(s.value) == "remap":
                self._remap(s, block, loops)
            elif isinstance(s, ast.Assign) and call_name(s.value) in _AXES:
                self._axis(s, block, loops)
            elif isinstance(s, ast.With) and call_name(s.items[0].context_expr) == "init":
                if len(s.body) != 1 or not isinstance(s.body[0], ast.Assign):
                    raise Unsupported(f"line {s.lineno}: an init of several statements")
                init = s.body[0]
            elif isinstance(s, ast.Assign) and isinstance(s.targets[0], ast.Subscript):
                stores.append(s)
            elif isinstance(s, ast.Expr) and call_name(s.value) == "where":
                raise Unsupported(f"line {s.lineno}: a predicated block (a scheduled function)")
            elif isinstance(s, ast.Expr) and call_name(s.value) in _IGNORED:
                continue
            else:
                rest.append(s)
        if not block.axes:  # the root block: declarations and loop nests
            self._statements(rest, loops)
            return
        if rest:
            raise Unsupported(f"line {rest[0].lineno}: `{short(rest[0])}` in a block is not mapped")
        if len(stores) != 1:
            raise Unsupported(f"line {stmt.lineno}: a block with {len(stores)} stores")
        self._compute(stores[0], init, block)

    def _remap(self, stmt: ast.Assign, block: _Block, loops: dict[str, Extent]) -> None:
        call = stmt.value
        assert isinstance(call, ast.Call)
        kinds = string(call.args[0]) if call.args else ""
        targets = elements(stmt.targets[0])
        sources = elements(call.args[1]) if len(call.args) > 1 else []
        if not len(kinds) == len(targets) == len(sources):
            raise Unsupported(f"line {stmt.lineno}: `{short(stmt)}` is not mapped")
        for kind, target, source in zip(kinds, targets, sources, strict=True):
            self._bind(stmt, block, kind, target, source, loops)

    def _axis(self, stmt: ast.Assign, block: _Block, loops: dict[str, Extent]) -> None:
        call = stmt.value
        assert isinstance(call, ast.Call)
        if len(call.args) != 2:
            raise Unsupported(f"line {stmt.lineno}: `{short(stmt)}` is not mapped")
        kind = _AXES[call_name(call)]
        self._bind(stmt, block, kind, stmt.targets[0], call.args[1], loops)
        block.extents[ast.unparse(stmt.targets[0])] = self._extent(call.args[0])

    def _bind(
        self,
        stmt: ast.stmt,
        block: _Block,
        kind: str,
        target: ast.expr,
        source: ast.expr,
        loops: dict[str, Extent],
    ) -> None:
        if kind not in "SR" or not isinstance(target, ast.Name):
            raise Unsupported(f"line {stmt.lineno}: a block axis of kind {kind!r}")
        if not isinstance(source, ast.Name) or source.id not in loops:
            raise Unsupported(
                f"line {stmt.lineno}: block axis {target.id} is bound to "
                f"`{ast.unparse(source)}`, not a loop variable (a scheduled function)"
            )
        block.axes[target.id] = self.names.local(target.id)
        block.extents[target.id] = loops[source.id]
        if kind == "R":
            block.reduce.add(target.id)

    # A block's compute.

    def _compute(self, store: ast.Assign, init: ast.Assign | None, block: _Block) -> None:
        target = store.targets[0]
        assert isinstance(target, ast.Subscript)
        name = ast.unparse(target.value)
        buffer = self.buffers.get(name)
        if buffer is None:
            raise Unsupported(f"line {store.lineno}: {name} is not a buffer")
        if name in self.written:
            raise Unsupported(f"line {store.lineno}: a second block writes {name}")
        spatial = [v for v in block.axes if v not in block.reduce]
        indices = [ast.unparse(i) for i in elements(target.slice)]
        if indices != spatial or len(indices) != len(buffer.shape):
            raise Unsupported(
                f"line {store.lineno}: block writes {name}[{', '.join(indices)}], not the "
                f"buffer at its spatial axes in order"
            )
        if [block.extents[v] for v in spatial] != buffer.shape:
            raise Unsupported(f"line {store.lineno}: the block's extents are not {name}'s shape")
        buffers = {n: (b.name, b.dtype) for n, b in self.buffers.items()}
        expression = Expression(block.axes, self.symbols, buffers)
        value, reduce = store.value, None
        if block.reduce:
            op, value = _update(store, target)
            expected = identity(op, buffer.dtype)
            if (
                init is None
                or not _same(init.targets[0], target)
                or constant(init.value) not in expected
            ):
                raise Unsupported(
                    f"line {store.lineno}: a reduction without T.init() to the identity of {op}"
                )
            reduce = (op, {block.axes[v]: block.extents[v] for v in block.reduce})
        elif init is not None:
            raise Unsupported(f"line {store.lineno}: T.init() in a block without reduce axes")
        if any(
            _same(n, target) or ast.unparse(getattr(n, "value", n)) == name
            for n in ast.walk(value)
            if isinstance(n, ast.Subscript)
        ):
            raise Unsupported(f"line {store.lineno}: the block reads the buffer it writes")
        decl = compute(buffer.name, buffer.shape, buffer.dtype, expression.text(value), reduce)
        self.computes.append(decl.model_copy(update={"axes": [block.axes[v] for v in spatial]}))
        self.written.add(name)


def _update(store: ast.Assign, target: ast.Subscript) -> tuple[str, ast.expr]:
    """A reduction's op and the value it accumulates: `b = b + x` is (sum, x)."""
    value = store.value
    if isinstance(value, ast.BinOp) and isinstance(value.op, ast.Add | ast.Mult):
        op = "sum" if isinstance(value.op, ast.Add) else "prod"
        if _same(value.left, target):
            return op, value.right
        if _same(value.right, target):
            return op, value.left
    if isinstance(value, ast.Call) and call_name(value) in ("max", "min") and len(value.args) == 2:
        a, b = value.args
        if _same(a, target):
            return call_name(value), b
        if _same(b, target):
            return call_name(value), a
    raise Unsupported(
        f"line {store.lineno}: the update `{short(store)}` is not b = b + x "
        "(nor b * x, T.max, T.min)"
    )


def _same(a: ast.AST, b: ast.AST) -> bool:
    """The same expression, whether read or written."""
    return ast.unparse(a) == ast.unparse(b)
