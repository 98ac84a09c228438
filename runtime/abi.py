"""The calling convention of every tunehub kernel: what a caller passes, in what order, and
how it launches a CUDA program. The compiler writes it (`compiler.kernel.Kernel.metadata`);
the client's loaders and the worker's measuring children read it. Its arguments and symbols
are the workload's (`interface`): one artifact can be the kernel of several workloads.

C ABI (CPU): `int ENTRY(const T0* in0, ..., T* out0, ..., int64_t sym0, ...)` with the
arguments in `args` order, then one int64 per symbol in `symbols` order. It returns 0, or
non-zero when it could not run (e.g. a workspace allocation failed). Every buffer is
row-major and contiguous. float16 and bfloat16 travel as their 16-bit patterns, bool as one
byte.

CUDA: a program may take several kernel launches (stages that cannot fuse), described by
`launch`:

    {"kernels": [{"entry": "tunehub_softmax_0", "grid": ["(M + 63) / 64", "4", "1"],
                  "block": [128, 2, 1], "shared_bytes": 0}, ...],
     "workspace": [{"name": "row_max", "bytes": "M * 4"}, ...]}

The caller allocates every workspace (device memory, uninitialized, at least 16-byte aligned
like every buffer), then launches the kernels in order on one stream, each with the same
arguments: `T0* in0, ..., T* out0, ..., W* ws0, ..., int64_t sym0, ...` (inputs, outputs,
workspaces in `workspace` order, symbols in `symbols` order), `grid` and `block` dimensions
(x, y, z) and `shared_bytes` of dynamic shared memory (0: the kernel's shared memory is all
static; above 48 KiB the caller must first raise the kernel's
`CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES`). float16/bfloat16 buffers are `__half` /
`__nv_bfloat16`. `entry` is the program's base name; kernel `n` is `<entry>_<n>`.

A kernel whose tiles the copy engine brings (sm_90 TMA) also takes, after the symbols, one
128-byte tensor map per entry of `launch["tensor_maps"]`, in that order:

    "tensor_maps": [{"name": "A_map_64x128", "arg": "A", "box": [64, 128], "swizzle": 128}]

Each describes argument `arg` (an input read, or an output written, by the copy engine;
dimensions innermost first, from its shape at the call's symbols; byte strides of its
row-major layout), in boxes of `box` elements per dimension, innermost first, with the
128-byte swizzle. The caller encodes it per call
(`cuTensorMapEncodeTiled` with that data type, no interleave, zeros out of bounds; see
`targets.cuda.tensor_map`) and passes it by value. Launches without the key take none.

Grid entries and workspace sizes are integer expressions of the symbols (`eval_extent`):

    expr   := term (("+" | "-") term)*
    term   := factor (("*" | "/" | "%") factor)*
    factor := INTEGER | SYMBOL | "(" expr ")" | "-" factor | ("min" | "max") "(" expr "," expr ")"

with C semantics: `/` and `%` truncate toward zero (on the non-negative values these take,
floor division).
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from typing import Any

from tunehub.schemas.signature import TaskSignature


def interface(signature: TaskSignature | Mapping[str, Any]) -> dict[str, list[Any]]:
    """The `args` and `symbols` of a workload's kernels, from its own signature: inputs then
    outputs, each with its declared shape and dtype. A kernel's bytes may serve several
    workloads (signatures that differ only in unit axes can compile to the same code), so
    whoever hands out a kernel for a workload takes its interface from here, never from the
    metadata stored with the first workload that produced those bytes."""
    if not isinstance(signature, TaskSignature):
        signature = TaskSignature.model_validate(signature)
    computes = {c.name: c for c in signature.computes}
    args = [
        {"name": t.name, "shape": list(t.shape), "dtype": t.dtype, "role": "input"}
        for t in signature.inputs
    ]
    for name in signature.outputs:
        c = computes[name]
        args.append({"name": name, "shape": list(c.shape), "dtype": c.dtype, "role": "output"})
    return {"args": args, "symbols": list(signature.symbols)}


def for_workload(
    meta: Mapping[str, Any], signature: TaskSignature | Mapping[str, Any]
) -> dict[str, Any]:
    """An artifact's stored metadata (`meta`: language, entry, launch) as the kernel of the
    workload whose signature this is: its arguments and symbols are the workload's."""
    return {**meta, **interface(signature)}


def eval_extent(expr: str, symbols: Mapping[str, int]) -> int:
    """The value of a launch expression (grammar in the module doc) with `symbols` bound.
    Parsed, never `eval`ed: anything outside the grammar raises ValueError."""
    try:
        tree = ast.parse(expr.strip(), mode="eval")
    except SyntaxError as error:
        raise ValueError(f"bad launch expression {expr!r}") from error
    return _evaluate(tree.body, symbols, expr)


def _evaluate(node: ast.expr, symbols: Mapping[str, int], text: str) -> int:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in symbols:
            raise ValueError(f"launch expression {text!r}: no value for symbol {node.id!r}")
        return int(symbols[node.id])
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_evaluate(node.operand, symbols, text)
    if isinstance(node, ast.BinOp) and isinstance(
        node.op, ast.Add | ast.Sub | ast.Mult | ast.Div | ast.Mod
    ):
        a, b = _evaluate(node.left, symbols, text), _evaluate(node.right, symbols, text)
        if isinstance(node.op, ast.Add):
            return a + b
        if isinstance(node.op, ast.Sub):
            return a - b
        if isinstance(node.op, ast.Mult):
            return a * b
        if b == 0:
            raise ValueError(f"launch expression {text!r} divides by zero")
        quotient = abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)
        return quotient if isinstance(node.op, ast.Div) else a - quotient * b
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in ("min", "max")
        and len(node.args) == 2
        and not node.keywords
    ):
        values = [_evaluate(a, symbols, text) for a in node.args]
        return min(values) if node.func.id == "min" else max(values)
    raise ValueError(f"launch expression {text!r} is outside the grammar")
