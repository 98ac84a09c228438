"""`optimize(model, example_inputs, source)`: a module whose tasks run tuned kernels.

The model is exported (`frontends.torch_export.trace`: the same tasks `tunehub extract
--torch` lists), and each task found in its graph is looked up in `source` by workload key.
A task's kernel replaces its ops only if, on the example inputs, it (1) matches the ops'
outputs within its dtype's tolerance (`compiler.verify`) and (2) runs faster than those ops
run eagerly here, both measured now on this machine and these threads: a kernel tuned on
another machine, or a task eager PyTorch already runs well, keeps the original ops. The
replaced ops become one `tunehub::task` call (`calls`), which still runs them for a shape the
kernels do not serve. The report says, task by task, what runs and why.
"""

from __future__ import annotations

import copy
import operator
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import torch

from tunehub.frontends import torch_export
from tunehub.frontends.taskset import Binding, Found
from tunehub.torch.calls import TaskCall, task_op
from tunehub.torch.constants import fold
from tunehub.torch.source import KernelSource, NoKernel
from tunehub.torch.subgraph import subgraph

Nodes = list[torch.fx.Node]
# Measuring a task: at least this many runs of each side, for at least this long in all.
MIN_RUNS, MIN_SECONDS = 9, 0.2


@dataclass(frozen=True)
class TaskReport:
    """One task occurrence: whether it runs a tuned kernel (`tuned`), and why (`reason`)."""

    name: str
    workload_key: str
    source_ops: list[str]
    tuned: bool
    reason: str
    eager_s: float | None = None
    kernel_s: float | None = None


@dataclass
class Report:
    """What `optimize` did, task by task, in graph order."""

    target: str
    tasks: list[TaskReport] = field(default_factory=list)

    @property
    def tuned(self) -> list[TaskReport]:
        return [t for t in self.tasks if t.tuned]

    def __str__(self) -> str:
        lines = [f"tunehub.torch on {self.target}: {len(self.tuned)}/{len(self.tasks)} tasks tuned"]
        for t in self.tasks:
            times = ""
            if t.eager_s is not None and t.kernel_s is not None:
                times = f" (eager {t.eager_s * 1e6:.0f} us, kernel {t.kernel_s * 1e6:.0f} us)"
            state = "kernel" if t.tuned else "eager "
            ops = ", ".join(t.source_ops[:3]) + (", ..." if len(t.source_ops) > 3 else "")
            lines.append(f"  {state} {t.name} [{t.workload_key[:12]}] {ops}: {t.reason}{times}")
        return "\n".join(lines)


class OptimizedModule(torch.nn.Module):
    """The exported graph with tuned tasks as `tunehub::task` calls; inference only (weights
    are detached, the op has no backward)."""

    def __init__(
        self,
        graph: torch.fx.GraphModule,
        constants: list[Any],
        users: int,
        out_spec: Any,
        calls: list[TaskCall],
        report: Report,
    ) -> None:
        super().__init__()
        self.graph_module = graph
        self._constants = constants
        self._users = users
        self._out_spec = out_spec
        self.calls = calls
        self.report = report

    def forward(self, *inputs: torch.Tensor) -> Any:
        if len(inputs) != self._users:
            raise TypeError(f"expected {self._users} tensors, got {len(inputs)}")
        flat = self.graph_module(*_arguments(self._constants, inputs))
        return torch.utils._pytree.tree_unflatten(list(flat), self._out_spec)


def optimize(
    model: torch.nn.Module,
    example_inputs: Any,
    source: str | Path,
    *,
    dynamic_shapes: Any = None,
    target: str | None = None,
    directory: str | Path | None = None,
    min_speedup: float = 1.0,
    verbose: bool = True,
) -> OptimizedModule:
    """`model` with every task that has a verified, faster tuned kernel in `source` (a
    server URL or a tuning database) running it; `.report` (printed unless `verbose` is
    False) says which tasks do and why the others do not. `example_inputs` (tensors, as
    `model` takes them positionally) are what kernels are checked and timed on;
    `dynamic_shapes` as `torch.export` takes them; `target` defaults to this machine's CPU
    (or GPU, for CUDA inputs); kernels are written under `directory`. A kernel replaces its
    ops where it runs more than `min_speedup` times as fast as they do (0: wherever it is
    verified)."""
    inputs = example_inputs if isinstance(example_inputs, tuple) else (example_inputs,)
    if not all(isinstance(x, torch.Tensor) for x in inputs):
        raise TypeError("optimize takes example inputs as tensors (positional arguments)")
    traced = torch_export.trace(model, inputs, dynamic_shapes)
    program = traced.program
    target = target or _this_target(inputs[0])
    kernels = KernelSource(source, target, directory)
    constants = _constants(program)
    values = _values(program, _arguments(constants, inputs))
    graph = _without_metadata_checks(copy.deepcopy(program.graph_module))
    folded = fold(graph, (traced.nodes[v] for v in traced.folded if v in traced.nodes))
    rewriter = _Rewriter(graph, traced.nodes, values, folded)
    report, calls = Report(target), []
    for found in traced.found:
        key = _key(found)
        decision = rewriter.decide(found, key, kernels, min_speedup)
        report.tasks.append(decision.report)
        if decision.call is not None:
            rewriter.replace(found, decision.call)
            calls.append(decision.call)
    graph.graph.eliminate_dead_code()
    graph.recompile()
    users = sum(1 for c in constants if c is None)
    module = OptimizedModule(graph, constants, users, program.call_spec.out_spec, calls, report)
    if verbose:
        print(report)
    return module


@dataclass
class _Decision:
    report: TaskReport
    call: TaskCall | None = None


class _Rewriter:
    """Decides each task on the example values and rewrites the graph for those tuned."""

    def __init__(
        self,
        graph: torch.fx.GraphModule,
        nodes: dict[str, str],
        values: dict,
        folded: dict[torch.fx.Node, torch.fx.Node],
    ) -> None:
        self.graph = graph
        self.by_name = {n.name: n for n in graph.graph.nodes}
        self.nodes = nodes  # graph value -> fx node name
        self.values = values  # fx node name -> its value on the example inputs
        # A task's output or a folded constant -> the getitem that now stands for it.
        self.replaced: dict[torch.fx.Node, torch.fx.Node] = dict(folded)

    def decide(
        self, found: Found, key: str, kernels: KernelSource, min_speedup: float
    ) -> _Decision:
        name, sources = found.signature.name, [s.name for s in found.sources]

        def eager(reason: str, **times: float) -> _Decision:
            return _Decision(TaskReport(name, key, sources, False, reason, **times))

        binding = found.binding
        if binding is None or not all(v in self.nodes for v in binding.inputs):
            return eager("its inputs are not all tensors of the graph")
        try:
            kernel = kernels.kernel(key)
        except NoKernel as exc:
            return eager(str(exc))
        members, inputs, extras, sizes, outputs = self._group(binding)
        fallback = subgraph(members, [*inputs, *extras, *sizes], outputs)
        tensors = [self._value(n) for n in (*inputs, *extras)]
        call = TaskCall(kernel, fallback, len(inputs), tensors[0].device.type)
        size_values = [self._value(n) for n in sizes]
        symbols = call.symbols(tensors)
        if symbols is None:
            return eager("the example inputs are outside the tuned kernels' shapes or ranges")
        expected = [self._value(n) for n in outputs]
        got = call.run(tensors[: call.inputs], symbols)
        mismatch = _mismatch(found, expected, got, symbols)
        if mismatch:
            return eager(f"its kernel's output differs from eager: {mismatch}")
        eager_s, kernel_s = _race(
            lambda: fallback(*tensors, *size_values),
            lambda: call.run(tensors[: call.inputs], symbols),
            tensors[0].is_cuda,
        )
        if not eager_s > min_speedup * kernel_s:
            why = f"its kernel is not {min_speedup:g}x as fast as eager"
            if min_speedup == 1:
                why = "its kernel is not faster than eager"
            return eager(why, eager_s=eager_s, kernel_s=kernel_s)
        entry = kernel.table.select(symbols)
        why = f"tuned kernel (record {entry.record.id}, tuned at {entry.symbols or 'fixed shapes'})"
        report = TaskReport(name, key, sources, True, why, eager_s, kernel_s)
        return _Decision(report, call)

    def replace(self, found: Found, call: TaskCall) -> None:
        assert found.binding is not None
        members, inputs, extras, sizes, outputs = self._group(found.binding)
        graph, inside = self.graph.graph, set(members)
        with graph.inserting_after(members[-1]):
            node = graph.call_function(task_op(), (call.name, [*inputs, *extras], sizes))
        previous = node
        for index, output in enumerate(outputs):
            with graph.inserting_after(previous):
                item = graph.call_function(operator.getitem, (node, index))
            item.meta = dict(output.meta)
            output.replace_all_uses_with(item, delete_user_cb=lambda user: user not in inside)
            self.replaced[output] = item
            previous = item

    def _group(self, binding: Binding) -> tuple[Nodes, Nodes, Nodes, Nodes, Nodes]:
        """The group's fx nodes as they stand now: members, inputs (signature order), other
        tensors and sizes its members read, outputs."""

        def node(value: str) -> torch.fx.Node:
            found = self.by_name[self.nodes[value]]
            return self.replaced.get(found, found)

        order = {n: position for position, n in enumerate(self.graph.graph.nodes)}
        members = [node(v) for v in (*binding.views, *binding.computed)]
        inputs = [node(v) for v in binding.inputs]
        known = set(members) | set(inputs)
        extras: Nodes = []
        sizes: Nodes = []
        pending = list(members)
        while pending:
            for arg in pending.pop().all_input_nodes:
                if arg in known:
                    continue
                known.add(arg)
                value = arg.meta.get("val")
                if isinstance(value, list | tuple):  # a split, whose parts the members view
                    members.append(arg)
                    pending.append(arg)
                else:
                    (extras if isinstance(value, torch.Tensor) else sizes).append(arg)
        members.sort(key=order.__getitem__)
        return members, inputs, extras, sizes, [node(v) for v in binding.outputs]

    def _value(self, node: torch.fx.Node) -> Any:
        original = next((o for o, item in self.replaced.items() if item is node), node)
        return self.values[original.name]


def _without_metadata_checks(graph: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """`graph` without export's dtype and device assertions on intermediate values: they
    read values inside tasks, which a kernel computes without materializing them."""
    check = torch.ops.aten._assert_tensor_metadata.default
    for node in list(graph.graph.nodes):
        if node.op == "call_function" and node.target == check:
            graph.graph.erase_node(node)
    return graph


def _key(found: Found) -> str:
    from tunehub.compiler.canonical import workload_key
    from tunehub.compiler.program import load

    return workload_key(load(found.signature))


def _mismatch(
    found: Found, expected: Sequence, got: Sequence, symbols: dict[str, int]
) -> str | None:
    """Why `got` is not `expected` within the outputs' dtype tolerance, or None."""
    from tunehub.compiler.verify import compare

    extent = 1
    for decl in found.signature.computes:
        if decl.reduce is not None:
            terms = [symbols[e] if isinstance(e, str) else e for e in decl.reduce.axes.values()]
            extent = max(extent, int(np.prod(terms)))
    for want, have, name in zip(expected, got, found.signature.outputs, strict=True):
        dtype = str(want.dtype).removeprefix("torch.")
        result = compare(_numpy(want), _numpy(have), dtype, reduce_extent=extent)
        if not result.ok:
            return f"{name}: {result.message}"
    return None


def _numpy(tensor: torch.Tensor) -> np.ndarray:
    """`tensor` on the host as numpy, in its own dtype (bfloat16 through ml_dtypes)."""
    tensor = tensor.detach().cpu()
    if tensor.dtype == torch.bfloat16:
        return tensor.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return tensor.numpy()


def _race(eager: Callable[[], Any], kernel: Callable[[], Any], cuda: bool) -> tuple[float, float]:
    """The fastest call of each (synchronized on CUDA), timed alternately after a warm-up
    call of each: other work on the machine only ever adds time (a thread preempted in a
    parallel region stalls the whole call), so the minimum is what the code itself costs,
    and alternating exposes both sides to the same load."""

    def timed(fn: Callable[[], Any]) -> float:
        start = time.perf_counter()
        fn()
        if cuda:
            torch.cuda.synchronize()
        return time.perf_counter() - start

    timed(eager), timed(kernel)
    times: tuple[list[float], list[float]] = ([], [])
    began = time.perf_counter()
    while len(times[0]) < MIN_RUNS or time.perf_counter() - began < MIN_SECONDS:
        times[0].append(timed(eager))
        times[1].append(timed(kernel))
    return min(times[0]), min(times[1])


def _this_target(tensor: torch.Tensor) -> str:
    """This machine's target for `tensor`'s device: its CPU's ISA or its GPU's arch."""
    from tunehub.schemas.target import Target
    from tunehub.worker.backend import worker_backend

    target = Target.parse("cuda" if tensor.is_cuda else "cpu")
    return str(worker_backend(target).resolve(target))


def _constants(program: Any) -> list[Any]:
    """The exported graph's leading arguments in order: each weight (detached), None where a
    user input goes."""
    from torch.export.graph_signature import InputKind

    found: list[Any] = []
    for spec in program.graph_signature.input_specs:
        if spec.kind == InputKind.USER_INPUT:
            found.append(None)
        elif spec.target in program.state_dict:
            found.append(program.state_dict[spec.target].detach())
        else:
            found.append(program.constants[spec.target])
    return found


def _arguments(constants: Sequence[Any], inputs: Sequence[torch.Tensor]) -> list[Any]:
    given = iter(inputs)
    return [next(given) if c is None else c for c in constants]


def _values(program: Any, arguments: list[Any]) -> dict[str, Any]:
    """Every node's value when the exported graph runs on `arguments`."""
    values: dict[str, Any] = {}

    class Recorder(torch.fx.Interpreter):
        def run_node(self, n: torch.fx.Node) -> Any:
            values[n.name] = result = super().run_node(n)
            return result

    with torch.no_grad():
        Recorder(program.graph_module).run(*arguments)
    return values
