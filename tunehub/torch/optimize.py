"""`optimize(model, example_inputs, source)`: a module whose tasks run tuned kernels.

The model is exported (`frontends.torch_export.trace`: the same tasks `tunehub extract
--torch` lists), its constants folded (`constants`), and each task found in its graph is
looked up in `source` by workload key. A workload's kernel replaces its ops, at every place
the model runs it, only if on the example inputs it (1) matches the ops' outputs at each of
those places within its dtype's tolerance, shapes and dtypes included (`compiler.verify`),
and (2) runs faster than those ops run eagerly here (`decide`'s rule), both measured now on
this machine and these threads: a kernel tuned on another machine, or a task eager PyTorch
already runs well, keeps the original ops. The replaced ops become one call of a
`calls.TaskCall`, which still runs them for a shape the kernels do not serve. Last, the whole
optimized module is timed against the eager one by the same rule. The report says, task by
task, what runs and why, and whether the optimized module is the faster.
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
from tunehub.runtime.dispatch import DispatchKernel
from tunehub.torch.calls import TaskCall
from tunehub.torch.constants import fold
from tunehub.torch.source import KernelSource, NoKernel
from tunehub.torch.subgraph import subgraph

Nodes = list[torch.fx.Node]
# Timing two ways of computing one thing: at least this many rounds, each timing both once
# in turn, for at least this long in all (a task; the whole module).
MIN_ROUNDS, TASK_SECONDS, MODULE_SECONDS = 9, 0.3, 1.0


@dataclass(frozen=True)
class Race:
    """Two ways of computing one thing, timed in alternated rounds (seconds per round). The
    kernel (or the optimized module) wins only if it was faster within at least three rounds
    in four: the first quartile of the rounds' speedups (eager / fast, each round's own
    pair) is above `min_speedup`. A round's two timings share the machine's state at that
    moment, so a drift in its speed over the race moves both (comparing each side's
    quartiles instead left a kernel 1.2x faster by pairs on eager's side, its spread
    overlapping eager's on a drifting VM), while noise within a round still leaves eager,
    the safe side, in place. A round of a workload's race runs each of its `places` in the
    model once."""

    eager: tuple[float, float, float]  # the first quartile, the median, the third
    fast: tuple[float, float, float]
    speedup: tuple[float, float, float]  # of the rounds' eager / fast
    min_speedup: float = 1.0
    places: int = 1

    @property
    def won(self) -> bool:
        return self.speedup[0] > self.min_speedup

    def __str__(self) -> str:
        def spread(q: tuple[float, float, float]) -> str:
            return f"{_us(q[1])} (quartiles {_us(q[0])}-{_us(q[2])})"

        low, median, high = self.speedup
        against = f"{spread(self.fast)} against eager {spread(self.eager)}"
        if self.places > 1:
            against = f"its {self.places} places together, {against}"
        rounds = f"speedup by round {median:.2f}x (quartiles {low:.2f}x-{high:.2f}x)"
        verdict = "above" if self.won else "not above"
        return f"{against}, {rounds}: first quartile {verdict} {self.min_speedup:g}"


@dataclass(frozen=True)
class TaskReport:
    """One task occurrence: whether it runs a tuned kernel (`tuned`), why (`reason`), and
    its workload's race, which decided (None where none ran)."""

    name: str
    workload_key: str
    source_ops: list[str]
    tuned: bool
    reason: str
    race: Race | None = None


@dataclass
class Report:
    """What `optimize` did, task by task in graph order, and the race of the whole
    optimized module against the eager one (`module`; None before it ran)."""

    target: str
    tasks: list[TaskReport] = field(default_factory=list)
    module: Race | None = None

    @property
    def tuned(self) -> list[TaskReport]:
        return [t for t in self.tasks if t.tuned]

    @property
    def faster(self) -> bool | None:
        """Whether the optimized module beat the eager one (None: not raced)."""
        return None if self.module is None else self.module.won

    def __str__(self) -> str:
        lines = [f"tunehub.torch on {self.target}: {len(self.tuned)}/{len(self.tasks)} tasks tuned"]
        for t in self.tasks:
            state = "kernel" if t.tuned else "eager "
            ops = ", ".join(t.source_ops[:3]) + (", ..." if len(t.source_ops) > 3 else "")
            lines.append(f"  {state} {t.name} [{t.workload_key[:12]}] {ops}: {t.reason}")
        if self.module is not None:
            verdict = "faster" if self.module.won else "NOT faster: keep using the eager module"
            lines.append(f"whole module, one forward pass: {self.module} ({verdict})")
        return "\n".join(lines)


class OptimizedModule(torch.nn.Module):
    """The exported graph with tuned tasks as `TaskCall`s; inference only (weights
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
    occurrences: dict[str, list[Found]] = {}
    for found in traced.found:
        occurrences.setdefault(_key(found), []).append(found)
    chosen: dict[int, TaskCall] = {}
    reports: dict[int, TaskReport] = {}
    for key, founds in occurrences.items():
        decided = rewriter.decide(key, founds, kernels, min_speedup)
        for found, decision in zip(founds, decided, strict=True):
            reports[id(found)] = decision.report
            if decision.call is not None:
                chosen[id(found)] = decision.call
    report = Report(target, [reports[id(found)] for found in traced.found])
    calls = []
    for found in traced.found:
        if id(found) in chosen:
            rewriter.replace(found, chosen[id(found)])
            calls.append(chosen[id(found)])
    # A dead random op (an inference dropout inside replaced ops) goes too: fx keeps random
    # ops by default, and one such op kept every op it reads running beside the kernel (GPT-2
    # ran its eager attention and two linears per layer a second time).
    graph.graph.eliminate_dead_code(lambda node: node.is_impure(impure_random=False))
    graph.recompile()
    users = sum(1 for c in constants if c is None)
    module = OptimizedModule(graph, constants, users, program.call_spec.out_spec, calls, report)
    if calls:
        with torch.no_grad():
            eager, fast = (lambda: model(*inputs)), (lambda: module(*inputs))
            report.module = _race(eager, fast, inputs[0].is_cuda, 1.0, MODULE_SECONDS)
        for call in calls:  # count the user's calls
            call.stats.update(kernel=0, fallback=0)
    if verbose:
        print(report)
    return module


@dataclass
class _Decision:
    report: TaskReport
    call: TaskCall | None = None


@dataclass
class _Occurrence:
    """One place the model runs a workload, ready to run either way."""

    found: Found
    call: TaskCall
    tensors: list[Any]  # the example's values of the call's tensors
    sizes: list[Any]  # and of its sizes
    expected: list[Any]  # and of the task's outputs
    symbols: dict[str, int] | None  # None: the kernel cannot take these shapes

    def eager(self) -> Any:
        return self.call.fallback(*self.tensors, *self.sizes)

    def kernel(self) -> Any:
        assert self.symbols is not None
        return self.call.run(self.tensors[: self.call.inputs], self.symbols)


class _Rewriter:
    """Decides each workload on the example values and rewrites the graph for those tuned."""

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
        self, key: str, founds: list[Found], kernels: KernelSource, min_speedup: float
    ) -> list[_Decision]:
        """One decision for every place the model runs workload `key`: its kernel runs at
        those where it takes the example's shapes if it is right at each of them and its
        race against their eager ops, summed per round, is won."""

        def eager(found: Found, reason: str, race: Race | None = None) -> _Decision:
            sources = [s.name for s in found.sources]
            return _Decision(TaskReport(found.signature.name, key, sources, False, reason, race))

        try:
            kernel = kernels.kernel(key)
        except NoKernel as exc:
            return [eager(found, str(exc)) for found in founds]
        ready: dict[int, _Occurrence] = {}
        for n, found in enumerate(founds):
            binding = found.binding
            if binding is not None and all(v in self.nodes for v in binding.inputs):
                ready[n] = self._occurrence(found, kernel)
        runnable = [o for o in ready.values() if o.symbols is not None]
        for o in runnable:
            assert o.symbols is not None  # runnable
            mismatch = _mismatch(o.found, o.expected, o.kernel(), o.symbols)
            if mismatch:
                why = f"its kernel's output differs from eager: {mismatch}"
                return [eager(found, why) for found in founds]
        race = None
        if runnable:
            race = _race(
                lambda: [o.eager() for o in runnable],
                lambda: [o.kernel() for o in runnable],
                runnable[0].tensors[0].is_cuda,
                min_speedup,
                TASK_SECONDS,
                places=len(runnable),
            )
        decisions = []
        for n, found in enumerate(founds):
            if n not in ready:
                decisions.append(eager(found, "its inputs are not all tensors of the graph"))
                continue
            occurrence = ready[n]
            if occurrence.symbols is None:
                why = "the example inputs are outside the tuned kernels' shapes or ranges"
                decisions.append(eager(found, why))
            elif race is not None and not (race.won or min_speedup == 0):
                decisions.append(eager(found, f"its kernel is not faster: {race}", race))
            else:
                entry = kernel.table.select(occurrence.symbols)
                tuned_at = entry.symbols or "fixed shapes"
                why = f"tuned kernel (record {entry.record.id}, tuned at {tuned_at}): {race}"
                sources = [s.name for s in found.sources]
                report = TaskReport(found.signature.name, key, sources, True, why, race)
                decisions.append(_Decision(report, occurrence.call))
        return decisions

    def _occurrence(self, found: Found, kernel: DispatchKernel) -> _Occurrence:
        assert found.binding is not None
        members, inputs, extras, sizes, outputs = self._group(found.binding)
        fallback = subgraph(members, [*inputs, *extras, *sizes], outputs)
        tensors = [self._value(n) for n in (*inputs, *extras)]
        call = TaskCall(kernel, fallback, len(inputs), tensors[0].device.type, found.signature.name)
        known = [self._value(n) for n in sizes]
        expected = [self._value(n) for n in outputs]
        return _Occurrence(found, call, tensors, known, expected, call.symbols(tensors))

    def replace(self, found: Found, call: TaskCall) -> None:
        assert found.binding is not None
        members, inputs, extras, sizes, outputs = self._group(found.binding)
        graph, inside = self.graph.graph, set(members)
        with graph.inserting_after(members[-1]):
            node = graph.call_function(call, ([*inputs, *extras], sizes))
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


def _race(
    eager: Callable[[], Any],
    fast: Callable[[], Any],
    cuda: bool,
    min_speedup: float,
    seconds: float,
    places: int = 1,
) -> Race:
    """`eager` against `fast`, after a warm-up call of each, in rounds that time one call of
    each in turn (which goes first alternating), until there are `MIN_ROUNDS` of them and
    `seconds` have passed: load from other work then falls on both sides alike."""

    def timed(fn: Callable[[], Any]) -> float:
        start = time.perf_counter()
        fn()
        if cuda:
            torch.cuda.synchronize()
        return time.perf_counter() - start

    timed(eager), timed(fast)
    times: tuple[list[float], list[float]] = ([], [])
    began = time.perf_counter()
    while len(times[0]) < MIN_ROUNDS or time.perf_counter() - began < seconds:
        if len(times[0]) % 2:
            times[1].append(timed(fast))
            times[0].append(timed(eager))
        else:
            times[0].append(timed(eager))
            times[1].append(timed(fast))
    speedups = [e / f for e, f in zip(*times, strict=True)]
    return Race(
        _quartiles(times[0]), _quartiles(times[1]), _quartiles(speedups), min_speedup, places
    )


def _quartiles(values: list[float]) -> tuple[float, float, float]:
    q1, median, q3 = np.percentile(values, [25, 50, 75])
    return float(q1), float(median), float(q3)


def _us(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms" if seconds >= 1e-3 else f"{seconds * 1e6:.0f} us"


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
