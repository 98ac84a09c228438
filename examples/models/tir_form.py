"""Write a task set as TVMScript the way MLC-LLM prints a model's fused functions: one
`@T.prim_func` per distinct task, `T.match_buffer` over `T.handle`s with symbolic extents
(`seq = T.int64()`), one block per compute with `T.axis.remap`, `T.init()` for reductions,
`T.alloc_buffer` for the intermediates. It made `gpt2_block.tvmscript`:

    python examples/models/tir_form.py > examples/models/gpt2_block.tvmscript

Reading the text back with `tunehub extract` gives the same workload keys as the model it
came from (`tests/frontends/test_example_block.py` checks both).
"""

from __future__ import annotations

import sys
from pathlib import Path

from tunehub.compiler.ir import Binary, Call, Cast, Compute, Const, Expr, Load, Unary, Var
from tunehub.compiler.program import load
from tunehub.frontends.names import Names
from tunehub.schemas.signature import TaskSignature
from tunehub.schemas.taskset import TaskSet

_CALLS = {"abs": "T.fabs", "where": "T.if_then_else"}
_BITWISE = {
    "&": "T.bitwise_and",
    "|": "T.bitwise_or",
    "^": "T.bitwise_xor",
    "<<": "T.shift_left",
    ">>": "T.shift_right",
}
_INIT = {"sum": "{dtype}(0)", "prod": "{dtype}(1)", "max": 'T.min_value("{bare}")'}
_INIT["min"] = 'T.max_value("{bare}")'
_UPDATE = {"sum": "{acc} + {x}", "prod": "{acc} * {x}", "max": "T.max({acc}, {x})"}
_UPDATE["min"] = "T.min({acc}, {x})"


def tvmscript(taskset: TaskSet) -> str:
    """The task set's tasks as the functions of one `@I.ir_module` (named as the tasks are,
    made unique)."""
    names = Names()
    functions = "".join(
        _function(task.signature, names.take(task.signature.name)) for task in taskset.tasks
    )
    return (
        "# from tvm.script import ir as I\n# from tvm.script import tir as T\n\n"
        f"@I.ir_module\nclass Module:{functions}"
    )


def _extent(extent: int | str) -> str:
    return f"T.int64({extent})" if isinstance(extent, int) else extent


def _shape(shape: tuple[int | str, ...]) -> str:
    inner = ", ".join(map(_extent, shape))
    return f"({inner},)" if len(shape) == 1 else f"({inner})"


def _function(signature: TaskSignature, name: str) -> str:
    program = load(signature)
    outputs = set(program.outputs)
    params = [t.name for t in program.inputs] + list(program.outputs)
    lines = [
        "",
        "    @T.prim_func(private=True)",
        f"    def {name}({', '.join(f'p_{p}: T.handle' for p in params)}):",
        '        T.func_attr({"tir.noalias": T.bool(True)})',
    ]
    lines += [f"        {s.name} = T.int64()" for s in program.symbols]
    for tensor in [*program.inputs, *(program.compute(o) for o in program.outputs)]:
        shape = _shape(tensor.shape)
        lines.append(
            f'        {tensor.name} = T.match_buffer(p_{tensor.name}, {shape}, "{tensor.dtype}")'
        )
    lines.append('        # with T.block("root"):')
    for c in program.computes:
        if c.name not in outputs:
            lines.append(f'        {c.name} = T.alloc_buffer({_shape(c.shape)}, "{c.dtype}")')
    for c in program.computes:
        lines += _block(c)
    return "\n".join(lines) + "\n"


def _block(c: Compute) -> list[str]:
    loops = [*c.axes, *(r.name for r in c.reduce_axes)]
    extents = [*c.shape, *(r.extent for r in c.reduce_axes)]
    kinds = "S" * len(c.axes) + "R" * len(c.reduce_axes)
    names = {axis: f"v_{axis}" for axis in loops}
    store = f"{c.name}[{', '.join(names[a] for a in c.axes)}]"
    value = _expr(c.body, names)
    lines = [
        f"        for {', '.join(loops)} in T.grid({', '.join(map(_extent, extents))}):",
        f'            with T.block("{c.name}"):',
        f'                {", ".join(names[a] for a in loops)} = T.axis.remap("{kinds}", '
        f"[{', '.join(loops)}])",
    ]
    if c.reduce_op is None:
        return [*lines, f"                {store} = {value}"]
    init = _INIT[c.reduce_op].format(dtype=f"T.{c.dtype}", bare=c.dtype)
    update = _UPDATE[c.reduce_op].format(acc=store, x=value)
    return [
        *lines,
        "                with T.init():",
        f"                    {store} = {init}",
        f"                {store} = {update}",
    ]


def _expr(e: Expr, names: dict[str, str]) -> str:
    """`e` in TVMScript, every operation parenthesized. The signature's `//` and `%` truncate
    and TIR's floor: they agree on the non-negative index arithmetic they are used for."""
    if isinstance(e, Const):
        if isinstance(e.value, bool):
            return f"T.bool({e.value})"
        return f"T.{e.dtype}({e.value!r})"
    if isinstance(e, Var):
        return names.get(e.name, e.name)
    if isinstance(e, Load):
        return f"{e.tensor}[{', '.join(_expr(i, names) for i in e.indices)}]"
    if isinstance(e, Cast):
        return f'T.Cast("{e.dtype}", {_expr(e.x, names)})'
    if isinstance(e, Unary):
        prefix = {"neg": "-", "not": "not ", "invert": "~"}[e.op]
        return f"({prefix}{_expr(e.x, names)})"
    if isinstance(e, Binary):
        a, b = _expr(e.a, names), _expr(e.b, names)
        if e.op in _BITWISE:
            return f"{_BITWISE[e.op]}({a}, {b})"
        if e.op in ("and", "or"):
            return f"T.{e.op.capitalize()}({a}, {b})"
        return f"({a} {e.op} {b})"
    assert isinstance(e, Call)
    fn = _CALLS.get(e.fn, f"T.{e.fn}")
    return f"{fn}({', '.join(_expr(a, names) for a in e.args)})"


def main() -> None:
    """Print the example block's TIR form (its torch task set, written as TVMScript)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import gpt2_block

    from tunehub.frontends import torch_export

    module, inputs = gpt2_block.make()
    print(tvmscript(torch_export.export(module, inputs, gpt2_block.dynamic_shapes())), end="")


if __name__ == "__main__":
    main()
